"""Argument checks with torch.linalg's exact error types and messages."""

from __future__ import annotations

import torch

_TYPE_NAMES = {
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
}


def type_name(dtype: torch.dtype) -> str:
    """torch's ScalarType name, as its messages print it ("Float", "ComplexFloat")."""
    return _TYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def square(api: str, A: torch.Tensor, name: str = "A") -> None:
    if A.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor {name} must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"{api}: {name} must be batches of square matrices, "
            f"but they are {A.shape[-2]} by {A.shape[-1]} matrices"
        )


def floating(api: str, A: torch.Tensor) -> None:
    if not (A.is_floating_point() or A.is_complex()):
        raise RuntimeError(f"{api}: Expected a floating point or complex tensor as input. Got {type_name(A.dtype)}")


def resolved(A: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor with A's values and no conjugate or negative bit."""
    return A.resolve_conj().resolve_neg().contiguous()


def raise_if_singular(api: str, info: torch.Tensor, batched: bool) -> None:
    """torch.linalg.LinAlgError for the first matrix whose info > 0 (synchronises with the device)."""
    flat = info.reshape(-1)
    failed = torch.nonzero(flat > 0)
    if failed.numel() == 0:
        return
    index = int(failed[0, 0])
    prefix = f"(Batch element {index}): " if batched else ""
    raise torch.linalg.LinAlgError(
        f"{api}: {prefix}The diagonal element {int(flat[index])} is zero, "
        "the inversion could not be completed because the input matrix is singular."
    )
