"""Which implementation a call takes: a kernel runtime, or torch.linalg.

MPS tensors run on Metal and CUDA tensors on CUDA (torch.linalg, with a one-time
warning, where CuPy is missing). CPU tensors run on torch.linalg (LAPACK) unless
the OpenCL runtime is chosen with ``MPSLINALG_BACKEND=opencl`` or
``with mpslinalg.use_backend("opencl"):``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import types
import warnings

import torch
from torch.autograd import forward_ad

from . import _checks, _sharding
from .runtimes import RUNTIMES, KernelUnavailable, Runtime, Status

# torch's own implementations of the functions mpslinalg stands in for, bound once
# from torch's C module: a user may put mpslinalg's functions in torch.linalg's place
# (``torch.linalg.qr = mpslinalg.qr``), and a fallback or argument check that looked
# ``torch.linalg.qr`` up at call time would then call back into mpslinalg for ever.
TORCH = types.SimpleNamespace(
    **{name.removeprefix("linalg_"): getattr(torch._C._linalg, name) for name in dir(torch._C._linalg) if name.startswith("linalg_")},
    **{name: getattr(torch._C._VariableFunctions, name) for name in ("geqrf", "ormqr", "logdet", "lu_unpack", "cholesky_solve", "cholesky_inverse")},
)

CPU_BACKENDS = ("torch", "opencl")
_cpu_backend: contextvars.ContextVar[str | None] = contextvars.ContextVar("mpslinalg_cpu_backend", default=None)
_warned: set[str] = set()


def cpu_backend() -> str:
    name = _cpu_backend.get() or os.environ.get("MPSLINALG_BACKEND") or "torch"  # set but empty: unset
    if name not in CPU_BACKENDS:
        raise ValueError(f"MPSLINALG_BACKEND must be one of {CPU_BACKENDS}, got {name!r}")
    return name


@contextlib.contextmanager
def use_backend(name: str):
    """A context manager: CPU tensors inside the block run on ``name``.

    The choice belongs to the calling thread (a context variable); under
    torch.compile it is read once, when the function is compiled. Outside any block,
    ``MPSLINALG_BACKEND`` decides (default "torch").

    Args:
        name: "opencl" (mpslinalg's kernels on the CPU's OpenCL runtime) or "torch"
            (torch.linalg).

    Raises:
        ValueError: for another name.

    Example:
        >>> with LA.use_backend("torch"):  # CPU tensors to torch.linalg inside the block
        ...     LA.inv(2 * torch.eye(2))
        tensor([[0.5000, 0.0000],
                [0.0000, 0.5000]])
    """
    if name not in CPU_BACKENDS:
        raise ValueError(f"use_backend: expected one of {CPU_BACKENDS}, got {name!r}")
    token = _cpu_backend.set(name)
    try:
        yield
    finally:
        _cpu_backend.reset(token)


def kernel_runtime(tensor: torch.Tensor) -> Runtime | None:
    """The runtime whose kernels serve ``tensor``, or None for torch.linalg."""
    return RUNTIMES.get(_runtime_name(tensor.device.type))


def has_kernels(tensor: torch.Tensor, *others: torch.Tensor) -> bool:
    """Whether ``tensor`` runs on mpslinalg's kernels: a usable runtime for its device
    that has kernels of its dtype, and ``others`` (a call's other tensors) on the same
    device. Else torch.linalg, which raises its own errors for dtypes it rejects and
    for tensors on two devices."""
    runtime = kernel_runtime(tensor)
    return runtime is not None and tensor.dtype in runtime.dtypes and all(o.device == tensor.device for o in others)


def square_kernels_apply(api: str, A: torch.Tensor) -> bool:
    """Whether square matrices A run on mpslinalg's kernels (a runtime for A's device that
    has kernels of its dtype); where a runtime serves the device, raises torch.linalg's
    errors (``api``'s) for A that is not a batch of square floating matrices."""
    runtime = kernel_runtime(A)
    if runtime is None:
        return False
    _checks.square(api, A)
    _checks.floating(api, A)
    return A.dtype in runtime.dtypes


# Probing a runtime is not traceable; under torch.compile the choice is made
# once, when the function is compiled.
@torch.compiler.assume_constant_result
def _runtime_name(device_type: str) -> str:
    if device_type == "cpu":
        if cpu_backend() != "opencl":
            return ""
        status = RUNTIMES["opencl"].status()
        if not status.usable:
            raise RuntimeError(f"mpslinalg: the OpenCL backend was requested but is {status}")
        return "opencl"
    for runtime in RUNTIMES.values():
        if runtime.device_type == device_type:
            status = runtime.status()
            if status.usable:
                return runtime.name
            if runtime.name not in _warned:
                _warned.add(runtime.name)
                warnings.warn(f"mpslinalg: {runtime.name} kernels unavailable ({status.reason}); using torch.linalg")
    return ""


def needs_forward_mode(*tensors: torch.Tensor) -> bool:
    """Whether a dual tensor or a torch.func transform is at work, which a custom op's
    (reverse-mode) autograd does not serve: the families then call their ops through
    a torch.autograd.Function with a JVP. It costs host time per call, and Dynamo
    cannot trace a custom JVP, so it is used only then."""
    if torch.compiler.is_compiling():
        return False
    return _forward_mode(tensors)


def _forward_mode(tensors) -> bool:
    """needs_forward_mode outside torch.compile."""
    if forward_ad._current_level >= 0:
        return True
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    for t in tensors:
        if wrapped(t):
            return True
    return False


def call(op, body, *args, function=None):
    """A family's custom op ``op`` on ``args``, the cheapest way that keeps its meaning:
    through ``function`` (a torch.autograd.Function that adds the JVP custom ops lack)
    where forward mode or a torch.func transform is at work; as ``body``, the op's
    implementation, where nothing the dispatcher adds is at work (eager, no gradient to
    record, no mode or tensor subclass: the custom op's dispatch costs about 30 us of
    host time a call); else through the op."""
    tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
    compiling = torch.compiler.is_compiling()
    forward = not compiling and _forward_mode(tensors)
    if function is not None and forward:
        return function.apply(*args)
    if not (compiling or forward) and _plain_tensors(tensors):
        return body(*args)
    if any(_sharding.is_dtensor(t) for t in tensors):  # a batch over a device mesh
        _sharding.ensure_registered()
        args = _sharding.with_replicated_tensors(args)
    return op(*args)


def save(ctx, *tensors: torch.Tensor) -> None:
    """A family's setup_context saves with this: for its backward, and for the JVP of
    ``with_transposed_jvp``'s function, which reads the same tensors."""
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)


def with_transposed_jvp(op, setup_context, backward, transposed=None, jvp=None, finish=None) -> type[torch.autograd.Function]:
    """The torch.autograd.Function that ``call`` takes for ``op`` under forward mode or a
    torch.func transform: the op's own setup_context (saving with ``save``) and
    backward, and for JVP the transpose of the backward. The VJP u -> J^H u is linear
    in the cotangent u, so its own VJP at a tangent t is J t: one formula serves both
    modes and runs on the device, where torch's JVP is the adjoint of its VJP (which its
    gradcheck asserts). ``transposed`` stands in for ``backward`` there where the
    backward holds a check on values that a vmapped tensor cannot take; ``finish`` (ctx,
    tangents) -> tangents moves the transpose's result to torch's choice where the
    outputs are not unique; ``jvp`` (ctx, *tangents) replaces the transpose altogether."""
    formula = transposed or backward

    class Function(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(*args):
            return op(*args)

        @staticmethod
        def setup_context(ctx, inputs, output):
            setup_context(ctx, inputs, output)
            outputs = output if isinstance(output, tuple) else (output,)
            ctx.output_like = [(o.shape, o.stride(), o.dtype) for o in outputs]

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

        @staticmethod
        def jvp(ctx, *tangents):
            if jvp is not None:
                return jvp(ctx, *tangents)
            device = ctx.saved_tensors[0].device
            zeros = [torch.zeros(shape, dtype=dtype, device=device) for shape, _, dtype in ctx.output_like]
            moving = []  # the inputs with a tangent and a gradient

            def vjp(*cotangents):
                grads = formula(ctx, *cotangents)
                grads = grads if isinstance(grads, tuple) else (grads,)
                moving[:] = [i for i, g in enumerate(grads) if g is not None and isinstance(tangents[i], torch.Tensor)]
                return tuple(grads[i] for i in moving)

            _, transpose = torch.func.vjp(vjp, *zeros)
            result = transpose(tuple(tangents[i] for i in moving))
            if finish is not None:
                result = finish(ctx, result)
            # Forward mode wants a view's tangent laid out as the view (outputs may be transposes).
            result = tuple(_laid_out(t, shape, stride) for t, (shape, stride, _) in zip(result, ctx.output_like))
            return result if len(result) > 1 else result[0]

    return Function


def _laid_out(t: torch.Tensor, shape, stride) -> torch.Tensor:
    if torch._C._functorch.is_functorch_wrapped_tensor(t) or t.stride() == stride:
        return t
    return torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _plain(args) -> bool:
    """Whether ``call`` takes the body itself for ``args``: the test ``call`` makes inline
    from the same parts, asking is_compiling once."""
    tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
    if torch.compiler.is_compiling() or _forward_mode(tensors):
        return False
    return _plain_tensors(tensors)


def _plain_tensors(tensors) -> bool:
    """_plain for tensors outside torch.compile and forward mode: no mode, no subclass,
    no gradient to record."""
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    return True


def answered_by(reference):
    """Decorates the body of every custom op that launches kernels: where a kernel it
    needs cannot run on the device (KernelUnavailable: its compile failed, or its
    threadgroup is larger than the pipeline allows; the runtime has warned once), the
    op's outputs come from ``reference``, the same outputs by torch's own functions
    (``TORCH``): on the tensors' device where torch has the op for it, else on a CPU
    copy, moved back. Outputs are contiguous, as the ops' fake implementations say.

    The fallback lives in the body, not in the public functions, so that compiled
    graphs (which call the op) and eager calls (which call the body) take it alike."""

    def decorate(body):
        @functools.wraps(body)
        def answered(*args):
            try:
                return body(*args)
            except KernelUnavailable:
                return _contiguous(_on_torch(reference, args))

        return answered

    return decorate


def _on_torch(reference, args):
    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    try:
        return reference(*args)
    except torch.linalg.LinAlgError:  # an error the op reports, as torch reports it
        raise
    except (NotImplementedError, RuntimeError, TypeError):  # torch lacks the op on the device
        if device.type == "cpu":
            raise
    moved = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), reference(*moved))


def _contiguous(result):
    if isinstance(result, torch.Tensor):
        return result.contiguous()
    return tuple(t.contiguous() for t in result)


def backends() -> dict[str, Status]:
    """For each runtime ("metal", "cuda", "opencl"), whether it is usable here and, if
    not, why.

    Returns:
        A dict from runtime name to a ``Status``: ``status.usable`` (bool) and
        ``status.reason`` (str, empty where usable), as ``python -m mpslinalg info``
        prints them.

    Example:
        >>> sorted(LA.backends())
        ['cuda', 'metal', 'opencl']
    """
    return {name: runtime.status() for name, runtime in RUNTIMES.items()}
