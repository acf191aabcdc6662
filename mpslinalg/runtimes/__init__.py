"""The three runtimes a kernel runs on, and the launch that picks one by device.

Each runtime generates its own entry point for a kernel :class:`~mpslinalg._kernel.Instance`,
compiles it once per process per (instance, device), caches it, and launches it
without synchronising with the host (the CPU OpenCL runtime, which exists for
tests, copies its buffers synchronously).

An instance that cannot run on a device (its compile failed, or its threadgroup is
larger than the compiled pipeline allows, as a Metal pipeline's limit falls with the
registers its kernel uses) is recorded as unusable there with a one-time
:class:`FallbackWarning`: :func:`fits` is then False for it, so that routes choose a
smaller instance, and launching it raises :class:`KernelUnavailable`, which the custom
op's body that launched it answers with torch (``_dispatch.answered_by``).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Sequence

import torch

from .._kernel import KERNELS, Buffer, Instance, Kernel, Scalar, program


@dataclass(frozen=True)
class Status:
    usable: bool
    reason: str = ""

    def __str__(self) -> str:
        return "usable" if self.usable else f"not usable: {self.reason}"


class KernelUnavailable(RuntimeError):
    """A kernel instance that cannot run on a device: its compile failed, or its
    threadgroup is larger than the pipeline allows."""


class FallbackWarning(RuntimeWarning):
    """A kernel instance cannot run here; the calls that need it take another route
    (a smaller instance, or torch.linalg) with the same results."""


@dataclass(frozen=True)
class _Unusable:
    reason: str


class Runtime:
    """A way to compile and launch the kernels on one kind of torch device."""

    name: str
    device_type: str
    prelude: str
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.complex64, torch.float64, torch.complex128)

    def __init__(self) -> None:
        # Reentrant: a build may probe the runtime (OpenCL sets itself up on first use), which takes it too.
        self._lock = threading.RLock()
        self._compiled: dict[tuple, object] = {}
        self._status: Status | None = None

    def status(self) -> Status:
        if self._status is None:
            with self._lock:
                if self._status is None:
                    self._status = self._probe()
        return self._status

    def _probe(self) -> Status:
        raise NotImplementedError

    # The dialect of the generated entry points; each runtime fills these in.
    shared_qualifier: str  # how a threadgroup array is declared at kernel scope
    global_space: str  # the address space of a buffer, in casts
    position: str  # the initializer of the body's thread_position
    position_params: tuple[str, ...] = ()  # entry parameters the position is read from

    def kernel_prefix(self, instance: Instance) -> str:
        """What precedes ``void <host name>(``: qualifiers and attributes."""
        raise NotImplementedError

    def buffer_param(self, index: int, buffer: Buffer, instance: Instance) -> str:
        raise NotImplementedError

    def scalar_param(self, index: int, scalar: Scalar) -> str:
        return f"int {scalar.name}"

    def entry_point(self, instance: Instance) -> str:
        """The kernel for ``instance``: its arguments, its threadgroup arrays, the call into the body."""
        params = [
            self.buffer_param(k, a, instance) if isinstance(a, Buffer) else self.scalar_param(k, a)
            for k, a in enumerate(instance.kernel.args)
        ]
        params += self.position_params
        lines = [f"{self.kernel_prefix(instance)}void {instance.host_name}(", "    " + ",\n    ".join(params) + ") {"]
        lines += [f"  {self.shared_qualifier} {s.element} {s.name}[{s.size}];" for s in instance.shared()]
        lines.append(f"  const thread_position pos = {self.position};")
        lines.append("  " + instance.body_call(self.global_space))
        lines.append("}")
        return "\n".join(lines) + "\n"

    def source(self, instance: Instance) -> str:
        return program(self.prelude, instance, self.entry_point(instance))

    def compiled(self, instance: Instance, device: torch.device):
        """The compiled entry point of ``instance`` on ``device``, built and checked on
        first use; KernelUnavailable if it cannot run there."""
        key = (instance, device)
        found = self._compiled.get(key)  # a dict read needs no lock; building one does
        if found is None:
            with self._lock:
                if key not in self._compiled:
                    self._compiled[key] = self._build(instance, device)
                found = self._compiled[key]
        if isinstance(found, _Unusable):
            raise KernelUnavailable(f"the {self.name} kernel {instance.host_name} cannot run on {device}: {found.reason}")
        return found

    def usable(self, instance: Instance, device: torch.device) -> bool:
        """Whether ``instance`` compiles on ``device`` and its threadgroup fits the pipeline."""
        try:
            self.compiled(instance, device)
        except KernelUnavailable:
            return False
        return True

    def _build(self, instance: Instance, device: torch.device):
        try:
            function = self._compile(instance, device)
        except Exception as error:  # Metal's SyntaxError, NVRTC's or OpenCL's build error, ...
            lines = str(error).strip().splitlines()
            reason = f"{type(error).__name__} while compiling" + (f": {lines[0]}" if lines else "")
        else:
            try:
                limit = self._group_limit(function, device)
            except KernelUnavailable as unusable:  # the pipeline cannot run it at all
                reason = str(unusable)
            else:
                if instance.group_size <= limit:
                    return function
                reason = f"it needs {instance.group_size} threads per threadgroup; this device's pipeline for it allows {limit}"
        warnings.warn(
            f"mpslinalg: the {self.name} kernel {instance.host_name} cannot run on {device} ({reason}); "
            "the calls that need it take another route (a smaller instance, or torch.linalg) with the same results",
            FallbackWarning,
            stacklevel=2,
        )
        return _Unusable(reason)

    def _compile(self, instance: Instance, device: torch.device):
        raise NotImplementedError

    def _group_limit(self, function, device: torch.device) -> int:
        """The most threads a threadgroup of the compiled ``function`` may have here;
        KernelUnavailable if it cannot run here at all."""
        raise NotImplementedError

    def launch(self, instance: Instance, groups: int, args: Sequence, device: torch.device) -> None:
        raise NotImplementedError

    def instances(self) -> list[Instance]:
        """Every instance this runtime can launch: those of its dtypes, and those of
        kernels on indices only (no T buffer), whose one type every runtime has."""
        return [i for k in KERNELS for i in k.all_instances() if i.scalar.dtype in self.dtypes or k.first_scalar_buffer is None]


def fits(kernel: Kernel, dtype: torch.dtype, device: torch.device, **values: int) -> bool:
    """Whether the instance of ``kernel`` for ``dtype`` and ``values`` can be launched
    on ``device``'s runtime: it compiles, and its threadgroup fits the pipeline
    (compiling it if need be) and ``thread_limit``."""
    instance = kernel.instance(dtype, **values)
    return instance.group_size <= _thread_limit.get() and for_device(device).usable(instance, device)


_thread_limit: contextvars.ContextVar[int] = contextvars.ContextVar("mpslinalg_thread_limit", default=1 << 30)


@contextlib.contextmanager
def thread_limit(threads: int):
    """Inside the block, routes choose instances as on a device whose pipelines allow at
    most ``threads`` threads a threadgroup (:func:`fits` is False above it), so that the
    smaller instances such a device takes run here too (``check --kernels``, tests)."""
    token = _thread_limit.set(threads)
    try:
        yield
    finally:
        _thread_limit.reset(token)


def launch(kernel: Kernel, groups: int, *args, **values: int) -> None:
    """Run ``kernel`` on ``groups`` threadgroups on the runtime of its tensors' device.

    ``args`` follow ``kernel.args``: tensors for buffers (contiguous, on one device,
    conjugate and negative bits resolved, of the buffer's element type), Python ints
    for scalars. The dtype of the first T buffer selects the instantiation (a kernel
    without one has a single dtype); ``values`` give its other parameters.
    """
    # One pass of checks (every launch makes them): the first T buffer gives the dtype.
    first = kernel.first_scalar_buffer
    dtype = args[first].dtype if first is not None else kernel.dtypes[0]  # else a kernel on indices only
    elements = {"T": dtype, "R": _REAL.get(dtype, dtype), "int": torch.int32}
    device = None
    for arg, decl in zip(args, kernel.args):
        if decl.__class__ is Scalar:
            if not -(2**31) <= arg < 2**31:
                raise OverflowError(f"{kernel.function}: {decl.name}={arg} does not fit in int32")
            continue
        if device is None:
            device = arg.device
        elif arg.device != device:
            raise RuntimeError(f"{kernel.function}: expected all tensors on {device}, found one on {arg.device}")
        if not arg.is_contiguous() or arg.is_conj() or arg.is_neg():
            raise RuntimeError(f"{kernel.function}: kernel arguments must be contiguous and resolved")
        # A buffer of another element type would be read as this one (and written past its end).
        if arg.dtype != elements[decl.element]:
            raise TypeError(f"{kernel.function}: {decl.name} must be {elements[decl.element]}, got {arg.dtype}")
    runtime = for_device(device)
    if dtype not in runtime.dtypes and first is not None:
        raise TypeError(f"{kernel.function}: the {runtime.name} runtime has no {dtype} kernels")
    runtime.launch(kernel.instance(dtype, **values), groups, args, device)


_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def groups_for(count: int, per_group: int) -> int:
    return math.ceil(count / per_group)


# Matrices per launch: kernels count them in int32, so larger batches go in pieces.
LAUNCH_LIMIT = 2**30


def pieces(count: int):
    """(start, stop) of the pieces of a batch of ``count`` matrices, one launch each."""
    for start in range(0, count, LAUNCH_LIMIT):
        yield start, min(count, start + LAUNCH_LIMIT)


def batches(count: int, *tensors: torch.Tensor):
    """(matrices, the tensors' slices) of each launch over a batch of ``count``
    matrices, each tensor contiguous with its matrices' elements in order (any shape:
    a (*batch, m, n) tensor, or a flat one): ``tensors`` themselves where one launch
    takes the whole batch (a reshape or a slice costs host time on every call); an
    empty tensor (a placeholder) as it is."""
    if count <= LAUNCH_LIMIT:
        yield count, tensors
        return
    flat = [t.reshape(count, -1) if t.numel() else t for t in tensors]
    for start, stop in pieces(count):
        yield stop - start, tuple(t[start:stop] if t.numel() else t for t in flat)


from .cuda import CudaRuntime  # noqa: E402
from .metal import MetalRuntime  # noqa: E402
from .opencl import OpenCLRuntime  # noqa: E402

RUNTIMES: dict[str, Runtime] = {r.name: r for r in (MetalRuntime(), CudaRuntime(), OpenCLRuntime())}
_BY_DEVICE = {r.device_type: r for r in RUNTIMES.values()}


def for_device(device: torch.device) -> Runtime:
    try:
        return _BY_DEVICE[device.type]
    except KeyError:
        raise RuntimeError(f"mpslinalg has no kernel runtime for {device.type} tensors") from None
