"""mpslinalg: torch.linalg-compatible linear algebra on hand-written Metal kernels.

The same kernels run on CUDA (NVRTC) and, for tests, on the CPU (OpenCL).
"""

from ._dispatch import backends, use_backend
from .inverse import det, inv, inv_ex

__all__ = ["backends", "det", "inv", "inv_ex", "use_backend"]
__version__ = "0.1.0"
