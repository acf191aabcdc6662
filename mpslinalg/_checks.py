"""Argument checks with torch.linalg's exact error types and messages."""

from __future__ import annotations

import functools
import warnings

import torch
from torch.utils._pytree import tree_map_only

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


# Argument errors are torch's own: the checks below find bad input cheaply and word the
# error as torch words it, but torch changes its words and types between releases (2.15
# raises NotImplementedError for integer input to inv, det and cholesky, where 2.7 raised
# RuntimeError). A public function therefore asks torch's own function, on the error path
# only, what it raises for the same arguments (``answers_as``).


def answers_as(function, torch_function):
    """``function`` (a public function) whose argument errors are ``torch_function``'s.

    Where ``function`` raises for its arguments, ``torch_function`` is called on the
    same arguments (``out=`` on fresh tensors of the same shapes, so that nothing of the
    caller's is written; MPS tensors on the CPU, where torch lacks some of these
    functions and would raise for that instead) and what it raises is raised instead;
    where torch accepts the arguments after all, ``function``'s own error stands.
    Neither a LinAlgError (a matrix's values, reported from ``info``) nor running out of
    memory is an argument error. The call that raises nothing pays one ``try``.
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (torch.linalg.LinAlgError, torch.OutOfMemoryError):
            raise
        except (RuntimeError, ValueError, TypeError, IndexError) as error:  # NotImplementedError is a RuntimeError
            torchs = None if torch.compiler.is_compiling() else torch_error(torch_function, args, kwargs)
            if torchs is None:
                raise
            raise torchs from None

    return wrapper


def torch_error(torch_function, args: tuple, kwargs: dict) -> Exception | None:
    """What ``torch_function(*args, **kwargs)`` raises, with ``out=`` on fresh tensors
    and MPS tensors moved to the CPU; None where it returns or raises a LinAlgError."""
    def host(t: torch.Tensor) -> torch.Tensor:
        return t.detach().cpu().requires_grad_(t.requires_grad) if t.device.type == "mps" else t

    args, kwargs = tree_map_only(torch.Tensor, host, (args, kwargs))
    if kwargs.get("out") is not None:
        kwargs["out"] = tree_map_only(torch.Tensor, lambda t: torch.empty_like(t.detach()), kwargs["out"])
    try:
        torch_function(*args, **kwargs)
    except torch.linalg.LinAlgError:
        return None
    except Exception as error:  # whatever torch raises is the answer
        return error
    return None


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


def system(api: str, A: torch.Tensor, B: torch.Tensor, left: bool, a_name: str = "A") -> None:
    """torch's errors for the system op(A) X = B (``left``) or X op(A) = B: dtypes and
    A's order against B's rows (columns). (Tensors on two devices go to torch.linalg:
    _dispatch.has_kernels.)"""
    if A.dtype != B.dtype:
        raise RuntimeError(
            f"{api}: Expected {a_name} and B to have the same dtype, but found {a_name} of type "
            f"{type_name(A.dtype)} and B of type {type_name(B.dtype)} instead"
        )
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(
            f"{api}: Incompatible shapes of A and B for the equation {equation} "
            f"({A.shape[-2]}x{A.shape[-1]} and {B.shape[-2]}x{B.shape[-1]})"
        )


_REAL_DTYPES = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The real dtype of ``dtype`` (itself if real): a table read, where ``A.real.dtype``
    makes a view (microseconds a call) and torch.compile cannot trace dtype.to_real()."""
    return _REAL_DTYPES.get(dtype, dtype)


def resolved(A: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor with A's values and no conjugate or negative bit."""
    return A.resolve_conj().resolve_neg().contiguous()


def first_failure(info: torch.Tensor) -> tuple[int, int] | None:
    """(index in the flattened batch, info) of the first matrix whose info > 0, or None.
    Synchronises with the device once, reading one scalar (the batch's largest info,
    as torch's checks do); the batch is searched only when some matrix failed."""
    flat = whole(info).reshape(-1)
    if flat.numel() == 0 or int(flat[0] if flat.numel() == 1 else flat.max()) <= 0:
        return None
    index = int(torch.nonzero(flat > 0)[0, 0])
    return index, int(flat[index])


def raise_for_first_failure(api: str, info: torch.Tensor, batched: bool, reason) -> None:
    """torch.linalg.LinAlgError for the first matrix whose info > 0, as torch words it:
    "{api}: (Batch element i): {reason(info)}" (first_failure: one scalar read)."""
    failure = first_failure(info)
    if failure is not None:
        index, value = failure
        prefix = f"(Batch element {index}): " if batched else ""
        raise torch.linalg.LinAlgError(f"{api}: {prefix}{reason(value)}")


def raise_if_singular(api: str, info: torch.Tensor, batched: bool) -> None:
    """The error of inv, solve and lu_factor for the first matrix with a zero pivot."""
    raise_for_first_failure(api, info, batched, lambda order: (
        f"The diagonal element {order} is zero, the inversion could not be completed because the input matrix is singular."))


# torch's out= messages print dtypes with c10's names.
_OUT_TYPE_NAMES = {  # C++ type names, as torch's out= messages print them
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.float32: "float",
    torch.float64: "double",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
    torch.bool: "bool",
    torch.uint8: "unsigned char",
    torch.int8: "signed char",
    torch.int16: "short int",
    torch.int32: "int",
    torch.int64: "long int",
}


def broadcast_batch(a: torch.Size, b: torch.Size) -> torch.Size:
    """The broadcast of batch shapes ``a`` and ``b``, with torch's error (its infer_size)
    when they do not broadcast: callers pass the batches in the order torch's message
    names them (solve's B first, lstsq's A first)."""
    ndim = max(len(a), len(b))
    out = [1] * ndim
    for i in reversed(range(ndim)):  # from the right, as infer_size, which reports the rightmost mismatch
        offset = ndim - 1 - i
        size_a = a[len(a) - 1 - offset] if len(a) - 1 - offset >= 0 else 1
        size_b = b[len(b) - 1 - offset] if len(b) - 1 - offset >= 0 else 1
        if size_a != size_b and size_a != 1 and size_b != 1:
            raise RuntimeError(
                f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) at non-singleton dimension {i}"
            )
        out[i] = size_b if size_a == 1 else size_a
    return torch.Size(out)


def out_without_grad(op: str, out, *tensors: torch.Tensor) -> None:
    """torch's error for ``out=`` while an input requires grad (``op`` as torch names
    its ATen op, e.g. "linalg_inv_ex"); to be called before any work is done."""
    if out is not None and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(
            f"{op}(): functions with out=... arguments don't support automatic differentiation, "
            "but one of the arguments requires grad."
        )


def into(out: torch.Tensor | None, result: torch.Tensor, castable: tuple[str, str] | None = None) -> torch.Tensor:
    """``result`` written into ``out`` as torch's ``out=`` does it (or ``result`` if out is None).

    out must have result's dtype and device, or, with ``castable`` = (api, name), any
    dtype result safely casts to (torch's checkLinalgCompatibleDtype, which pinv,
    matrix_rank, householder_product and geqrf apply to their output ``name``). A
    non-empty out of another shape is resized with torch's deprecation warning.
    """
    if out is None:
        return result
    if castable is not None:
        api, name = castable
        if not torch.can_cast(result.dtype, out.dtype):
            raise RuntimeError(
                f"{api}: Expected {name} to be safely castable from {type_name(result.dtype)} dtype, "
                f"but got {name} with dtype {type_name(out.dtype)}"
            )
        if out.device != result.device:
            raise RuntimeError(
                f"{api}: Expected {name} and input tensors to be on the same device, "
                f"but got {name} on {out.device} and input on {result.device}"
            )
    elif out.dtype != result.dtype:
        name = _OUT_TYPE_NAMES.get(result.dtype, str(result.dtype))
        raise RuntimeError(f"Expected out tensor to have dtype {name}, but got {_OUT_TYPE_NAMES.get(out.dtype, str(out.dtype))} instead")
    elif out.device != result.device:
        raise RuntimeError(f"Expected out tensor to have device {result.device}, but got {out.device} instead")
    if out.shape != result.shape:
        if out.numel() != 0:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {out.shape}, which does not "
                f"match the required output shape {result.shape}. This behavior is deprecated, and in a future "
                "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
                "reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0)."
            )
        out.resize_(result.shape)
    return out.copy_(result)


def into_each(out, results: tuple) -> tuple:
    """``results`` written into the tensors of ``out`` as :func:`into` does (or
    ``results`` if out is None)."""
    if out is None:
        return results
    return tuple(into(o, r) for o, r in zip(out, results))


# torch's checks by running its composite function on meta copies cost 40 us to over a
# millisecond of host time a call; these say, cheaply, when a call cannot fail them.


def tolerance_call_fits(A: torch.Tensor, hermitian: bool, atol, rtol) -> bool:
    """Whether pinv's or matrix_rank's arguments pass torch's checks for sure: a batch of
    matrices (square where ``hermitian``) and tolerances that are None or numbers."""
    numbers = all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in (atol, rtol))
    return A.dim() >= 2 and (not hermitian or A.shape[-1] == A.shape[-2]) and numbers


def householder_shapes_fit(A: torch.Tensor, tau: torch.Tensor) -> bool:
    """Whether householder_product's (A, tau) pass torch's checks for sure: m >= n >= k,
    tau's batch dims A's, one dtype."""
    return (A.dim() >= 2 and tau.dim() == A.dim() - 1 and A.dtype == tau.dtype
            and A.shape[-2] >= A.shape[-1] >= tau.shape[-1] and A.shape[:-2] == tau.shape[:-1])


def whole(info: torch.Tensor) -> torch.Tensor:
    """``info`` as one tensor on every rank where it is a DTensor (an all-gather; the
    checks that read it synchronise with the host anyway), else itself."""
    return info.full_tensor() if hasattr(info, "full_tensor") else info
