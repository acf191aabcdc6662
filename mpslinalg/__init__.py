"""mpslinalg: torch.linalg-compatible linear algebra on hand-written Metal kernels.

The same kernels run on CUDA (NVRTC) and, for tests, on the CPU (OpenCL).
"""

from . import _checks, _dispatch, _sharding
from ._dispatch import backends, use_backend
from .cholesky_family import cholesky, cholesky_ex, cholesky_inverse, cholesky_solve
from .composite import (
    cond, cross, diagonal, ldl_factor, ldl_factor_ex, ldl_solve, matmul, matrix_norm, matrix_power, matrix_sqrth,
    multi_dot, norm, polar, tensorinv, tensorsolve, vander, vecdot, vector_norm,
)
from .eig_family import eig, eigvals
from .eigh_family import eigh, eigvalsh
from .expm_family import matrix_exp
from .inverse import det, inv, inv_ex
from .lu_family import logdet, lu, lu_factor, lu_factor_ex, lu_solve, lu_unpack, slogdet, solve, solve_ex
from .patch import patch_torch, unpatch_torch
from .qr_family import geqrf, householder_product, ormqr, qr
from .svd_family import lstsq, matrix_rank, pinv, svd, svdvals
from .triangular import solve_tril, solve_triangular, tril_inverse

__all__ = [
    "backends", "cholesky", "cholesky_ex", "cholesky_inverse", "cholesky_solve", "cond", "cross", "det", "diagonal",
    "eig", "eigh", "eigvals", "eigvalsh", "geqrf", "householder_product", "inv", "inv_ex", "ldl_factor", "ldl_factor_ex", "ldl_solve",
    "logdet", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "lu_unpack", "lstsq", "matmul", "matrix_exp", "matrix_norm", "matrix_power",
    "matrix_rank", "matrix_sqrth", "multi_dot", "norm", "ormqr", "patch_torch", "pinv", "polar", "qr", "slogdet", "solve",
    "solve_ex", "solve_tril", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "tril_inverse",
    "unpatch_torch", "use_backend", "vander", "vecdot", "vector_norm",
]
__version__ = "0.1.0"

# A batch sharded over a device mesh (a DTensor) goes through every function with the
# plain tensors the function makes (identities, masks) taken as replicated; any other
# call pays one check of its arguments (_sharding.mixable). Bad arguments get the error
# of torch's function of the same name, as the installed torch words it (_checks.answers_as).
for _name in set(__all__) - {"backends", "use_backend", "patch_torch", "unpatch_torch"}:
    globals()[_name] = _sharding.mixable(globals()[_name])
    if hasattr(_dispatch.TORCH, _name):
        globals()[_name] = _checks.answers_as(globals()[_name], getattr(_dispatch.TORCH, _name))
del _name
