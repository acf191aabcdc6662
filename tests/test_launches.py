"""Work per call: each public function issues no more device work than its route needs.

A small call's time is host time, and the host's time grows with every kernel and
torch op a call issues (a launch on CUDA, a command encoder's work on Metal). The
budgets below are each route's counts as measured on the OpenCL runtime, kernels
(mpslinalg's launches) and torch ops that run on the device (views and allocations
aside); a change that adds work fails here and must raise its budget on purpose.
"""

from __future__ import annotations

import pytest
import torch

import mpslinalg as LA
from mpslinalg.bench import device_work as work

def _inputs(device):
    generator = torch.Generator().manual_seed(23)

    def random(*shape, dtype=torch.float32):
        return torch.randn(*shape, dtype=dtype, generator=generator).to(device)

    eye = torch.eye(16, device=device)
    M = random(4, 16, 16) + 4 * eye
    P = M @ M.mT / 16 + eye
    return {
        "LU": torch.linalg.lu_factor(M), "QR": torch.geqrf(random(4, 24, 8)), "Lp": torch.linalg.cholesky(P),
        "S4": random(4, 4, 4) + 8 * torch.eye(4, device=device), "M": M, "H": M + M.mT, "P": P,
        "L": M.tril(), "B": random(4, 16, 3), "C": random(4, 16, 16, dtype=torch.complex64), "tall": random(4, 24, 8),
        "chunks": random(1, 64, 2, 16).tril(-1) * 0.1,
        "C32": random(4, 32, 32, dtype=torch.complex64) + 8 * torch.eye(32, device=device),
        "B32": random(4, 3, 32, dtype=torch.complex64),
    }


# function -> (call on the inputs, kernels, device ops): the route of each small case.
BUDGETS = {
    "inv_ex 4x4": (lambda x: LA.inv_ex(x["S4"]), 1, 0),
    "det 4x4": (lambda x: LA.det(x["S4"]), 1, 0),
    # The fused sgesv (B = I); the singular check reads the batch's largest info (a reduction and one scalar).
    "inv 16x16": (lambda x: LA.inv(x["M"]), 1, 2),
    "solve_triangular": (lambda x: LA.solve_triangular(x["L"], x["B"], upper=False), 1, 0),
    "solve_tril": (lambda x: LA.solve_tril(x["chunks"]), 1, 0),
    "lu_factor_ex": (lambda x: LA.lu_factor_ex(x["M"]), 1, 0),
    "solve_ex": (lambda x: LA.solve_ex(x["M"], x["B"]), 1, 0),
    "qr": (lambda x: LA.qr(x["M"]), 1, 0),
    "svd": (lambda x: LA.svd(x["M"]), 1, 0),
    "eigh": (lambda x: LA.eigh(x["H"]), 1, 0),
    "eigvalsh": (lambda x: LA.eigvalsh(x["H"]), 1, 0),
    "eig": (lambda x: LA.eig(x["M"]), 1, 1),  # the copy into the kernel's workspace (real input stays real)
    "eigvals": (lambda x: LA.eigvals(x["M"]), 1, 1),
    # n <= 16: the whole exponential in one kernel (expm_small); the division is the case's own.
    "matrix_exp": (lambda x: LA.matrix_exp(x["M"] / 8), 1, 1),
    # Past 16: the norm, the degree's coefficients and the polynomial in elementwise ops and
    # products, the solve, the squaring kernel.
    "matrix_exp 32x32 complex": (lambda x: LA.matrix_exp(x["C32"] / 64), 2, 53),
    "cholesky_ex": (lambda x: LA.cholesky_ex(x["P"]), 1, 0),
    "lu_factor_ex complex": (lambda x: LA.lu_factor_ex(x["C"]), 1, 0),
    "lstsq": (lambda x: LA.lstsq(x["tall"], x["tall"][..., :2]), 4, 15),
    "lu": (lambda x: LA.lu(x["M"]), 2, 8),
    "lu_solve": (lambda x: LA.lu_solve(*x["LU"], x["B"]), 1, 0),  # torch's factors, by columns, read in place
    "solve": (lambda x: LA.solve(x["M"], x["B"]), 1, 2),
    "inv 32x32 complex": (lambda x: LA.inv(x["C32"]), 1, 2),
    "solve 32x32 complex, right": (lambda x: LA.solve(x["C32"], x["B32"], left=False), 1, 2),
    "lu_solve adjoint, right": (lambda x: LA.lu_solve(*x["LU"], x["B"].mT, left=False, adjoint=True), 1, 1),
    "slogdet": (lambda x: LA.slogdet(x["M"]), 1, 0),
    "logdet": (lambda x: LA.logdet(x["P"]), 1, 2),
    "det 16x16": (lambda x: LA.det(x["M"]), 1, 0),  # the factorization and the product fused
    "pinv": (lambda x: LA.pinv(x["M"]), 1, 6),
    "matrix_rank": (lambda x: LA.matrix_rank(x["M"]), 1, 4),
    "svdvals": (lambda x: LA.svdvals(x["M"]), 1, 0),
    "geqrf": (lambda x: LA.geqrf(x["tall"]), 1, 0),
    "householder_product": (lambda x: LA.householder_product(*x["QR"]), 1, 1),
    "ormqr": (lambda x: LA.ormqr(*x["QR"], x["tall"][..., :2]), 1, 13),
    "cholesky": (lambda x: LA.cholesky(x["P"]), 1, 2),
    "cholesky_solve": (lambda x: LA.cholesky_solve(x["B"], x["Lp"]), 2, 1),
    "cholesky_inverse": (lambda x: LA.cholesky_inverse(x["Lp"]), 1, 2),
    "tril_inverse": (lambda x: LA.tril_inverse(x["Lp"]), 1, 1),
}


@pytest.mark.parametrize("case", list(BUDGETS))
def test_work_per_call_within_budget(device, case):
    call, kernels, ops = BUDGETS[case]
    x = _inputs(device)
    call(x)  # compiles; the first call may build what later calls reuse
    got, names = work(device, lambda: call(x))
    assert kernels is not None and got <= kernels and len(names) <= ops, (
        f"{case}: {got} kernels and {len(names)} device ops {sorted(names)} against a budget of {kernels} and {ops}")
