import os

import pytest
import torch
from hypothesis import HealthCheck, settings

import mpslinalg


def load_hypothesis_profile() -> None:
    """Register our hypothesis profiles and load HYPOTHESIS_PROFILE (default ci).

    Importing torch.testing._internal (tests/test_opinfo.py) registers torch's own
    profiles, one of them also named "dev", and loads one that does not suppress the
    function-scoped-fixture health check, so that module calls this again after it.
    """
    settings.register_profile(
        "ci",
        deadline=None,
        derandomize=True,
        max_examples=150,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    settings.register_profile(
        "dev", deadline=None, max_examples=30, print_blob=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    settings.register_profile(  # on demand: HYPOTHESIS_PROFILE=fuzz (tests/test_fuzz.py)
        "fuzz", deadline=None, max_examples=3000, print_blob=True, suppress_health_check=list(HealthCheck)
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


load_hypothesis_profile()

# Reference products on CUDA in full FP32, as torch's linalg backward uses.
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

KERNEL_BACKENDS = [
    pytest.param("opencl", id="opencl"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.cuda),
    pytest.param("metal", id="metal", marks=pytest.mark.mps),
]
DEVICES = {"opencl": "cpu", "cuda": "cuda", "metal": "mps"}

# torch 2.7 (CI's oldest, .ci/oldest-torch) fills the inverse and the solution of an
# exactly singular float32 matrix with another inf/NaN pattern, and may report a later
# zero pivot in info (same MKL 2024.2 as torch 2.14): mpslinalg follows the newer torch,
# so tests of those patterns skip where torch's own answer is the older one.
OLD_SINGULAR_PATTERNS = not bool(torch.linalg.inv_ex(torch.zeros(2, 2)).inverse[1, 1].isinf())
SINGLE = {torch.float64: torch.float32, torch.complex128: torch.complex64}


def require(name: str) -> None:
    """Skip unless the runtime is usable; in CI the OpenCL runtime must be."""
    status = mpslinalg.backends()[name]
    if status.usable:
        return
    if name == "opencl" and os.environ.get("CI"):
        pytest.fail(f"CI must run the kernels on OpenCL, but the runtime is {status}")
    pytest.skip(f"{name} runtime {status}")


@pytest.fixture(params=KERNEL_BACKENDS)
def device(request):
    """The torch device of each usable kernel runtime, with that runtime selected."""
    require(request.param)
    if request.param == "opencl":
        with mpslinalg.use_backend("opencl"):
            yield torch.device("cpu")
    elif request.param == "cuda":
        yield torch.device("cuda")
        # A kernel fault is reported by the next CUDA call and then by every later one
        # in the process: synchronising here charges it to the test that caused it.
        torch.cuda.synchronize()
    else:
        yield torch.device(DEVICES[request.param])


def supported(device: torch.device, dtype: torch.dtype) -> None:
    """Skip a float64/complex128 case on MPS, which has no double."""
    if device.type == "mps" and dtype in SINGLE:
        pytest.skip("MPS has no float64")


def keeps_subnormals(device: torch.device) -> None:
    """Skip on Metal a test that asserts results computed from float32 subnormals: Apple
    GPUs may flush them to zero (as torch's own MPS kernels see them). It holds on CUDA
    and OpenCL, which keep them; metal/README.md says what each kernel does on Metal."""
    if device.type == "mps":
        pytest.skip("Apple GPUs may flush float32 subnormals to zero: this holds on CUDA and OpenCL")


def on(device: torch.device, A: torch.Tensor) -> torch.Tensor:
    """A on device; float64 data goes to float32 on MPS, which has no double."""
    if device.type == "mps":
        A = A.to(SINGLE.get(A.dtype, A.dtype))
    return A.to(device)
