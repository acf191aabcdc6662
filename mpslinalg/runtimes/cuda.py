"""CUDA on CUDA tensors, through NVRTC (CuPy), on torch's current stream."""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import tempfile
import warnings
from typing import Sequence

import numpy as np
import torch

from .._kernel import Buffer, Instance
from . import Runtime, Status

# IEEE division and square root and subnormals kept (NVRTC's defaults, stated so that
# no caller's defaults change them): results must match the other runtimes.
OPTIONS = ("-std=c++17", "-default-device", "-ftz=false", "-prec-div=true", "-prec-sqrt=true")


MAX_THREADS_PER_BLOCK = 0  # CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK


def _cupy():
    import cupy

    return cupy


class CudaRuntime(Runtime):
    name = "cuda"
    device_type = "cuda"
    prelude = "prelude_cuda.h"

    def _probe(self) -> Status:
        if not torch.cuda.is_available():
            return Status(False, "no CUDA device")
        try:
            _cupy()
        except Exception as error:  # ImportError, or a CuPy built for another CUDA
            return Status(False, f"CuPy missing ({error.__class__.__name__}: {error}); pip install {_cupy_package()}")
        return Status(True)

    shared_qualifier = "__shared__"
    global_space = ""
    position = "{blockIdx.x, threadIdx.x, blockDim.x, threadIdx.x % 32u, threadIdx.x / 32u}"

    def kernel_prefix(self, instance: Instance) -> str:
        return f'extern "C" __global__ __launch_bounds__({instance.group_size}) '

    def buffer_param(self, index: int, buffer: Buffer, instance: Instance) -> str:
        const = "const " if buffer.const else ""
        return f"{const}{instance.storage(buffer)}* __restrict__ {buffer.name}"

    def _compile(self, instance: Instance, device: torch.device):
        cupy = _cupy()
        with cupy.cuda.Device(device.index):
            module = cupy.cuda.function.Module()
            module.load(_ptx(self.source(instance), instance.host_name, torch.cuda.get_device_capability(device)))
            return module.get_function(instance.host_name)

    def _group_limit(self, function, device: torch.device) -> int:
        # __launch_bounds__(group size) makes ptxas fit the registers to it.
        driver = _cupy().cuda.driver
        with _cupy().cuda.Device(device.index):
            return int(driver.funcGetAttribute(MAX_THREADS_PER_BLOCK, function.ptr))

    def launch(self, instance: Instance, groups: int, args: Sequence, device: torch.device) -> None:
        cupy = _cupy()
        current = torch.cuda.current_device()
        index = current if device.index is None else device.index
        function = self.compiled(instance, _device(index))
        # Buffers go as their addresses: CuPy packs a Python int as 8 bytes, the
        # size of a device pointer, with no copy and no stream synchronisation.
        kernel_args = tuple(
            arg.data_ptr() if isinstance(decl, Buffer) else np.int32(arg)
            for arg, decl in zip(args, instance.kernel.args)
        )
        stream = _external_stream(_current_stream(index), index)
        if current == index:
            function((groups,), (instance.group_size,), kernel_args, stream=stream)
        else:
            with cupy.cuda.Device(index):
                function((groups,), (instance.group_size,), kernel_args, stream=stream)


def _cupy_package() -> str:
    """The CuPy wheel for the CUDA major version torch was built with (the [cuda] and
    [cuda12] extras of a clone install the same)."""
    major = (torch.version.cuda or "13").split(".")[0]
    return f"cupy-cuda{major}x"


def _ptx(source: str, name: str, capability: tuple[int, int]) -> bytes:
    """PTX of ``source`` for a device of compute ``capability``, by NVRTC with OPTIONS
    exactly. (CuPy's RawModule appends -ftz=true to every option list, which flushes
    subnormal inputs to zero: a subnormal pivot would read as singular.)

    NVRTC takes seconds for the larger unrolled kernels, so the PTX is kept on disk
    (``_cache_dir``) under a hash of
    everything it depends on; the driver caches its own step, PTX to machine code."""
    from cupy_backends.cuda.libs import nvrtc

    options = (*OPTIONS, f"-arch=compute_{capability[0]}{capability[1]}")
    key = hashlib.sha256("\0".join((source, *options, str(getattr(nvrtc, "getVersion", tuple)()))).encode()).hexdigest()
    cached = _cache_dir() / f"{name}-{key[:32]}.ptx"
    try:
        return cached.read_bytes()
    except OSError:
        pass
    program = nvrtc.createProgram(source, f"{name}.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as error:
            raise RuntimeError(f"NVRTC could not compile {name}:\n{nvrtc.getProgramLog(program)}") from error
        ptx = nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)
    try:
        _write_whole(cached, ptx)
    except OSError:
        pass  # a read-only or full disk only costs the compile next time
    return ptx


def _write_whole(path: pathlib.Path, data: bytes) -> None:
    """``data`` into ``path`` by a rename: a concurrent reader (another process, on any
    host sharing the folder) sees the old file or the whole new one, and a failed
    write leaves nothing behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


def _cache_dir() -> pathlib.Path:
    """``$MPSLINALG_CACHE_DIR/cuda``, else ``$XDG_CACHE_HOME/mpslinalg/cuda``, else
    ``~/.cache/mpslinalg/cuda``."""
    configured = os.environ.get("MPSLINALG_CACHE_DIR")
    if configured:
        return pathlib.Path(configured) / "cuda"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "mpslinalg" / "cuda"


@functools.lru_cache(maxsize=None)
def _device(index: int) -> torch.device:
    return torch.device("cuda", index)


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own Triton launches call


def _current_stream(index: int) -> int:
    """The handle of torch's current stream on device ``index``."""
    return _RAW_STREAM(index) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


@functools.lru_cache(maxsize=64)
def _external_stream(handle: int, index: int):
    """CuPy's view of torch's stream ``handle``, made once per stream."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # CuPy 14 prefers Stream.from_external
        return _cupy().cuda.ExternalStream(handle, index)
