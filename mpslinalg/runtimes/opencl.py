"""OpenCL C++ 2021 on the CPU (pyopencl + Intel's CPU runtime): how CI runs every kernel.

Intel's runtime is what makes this a faithful stand-in for a GPU: it compiles
C++ for OpenCL (templates, references, address spaces checked like MSL's) and
runs SIMD groups of width 32, as Apple and NVIDIA GPUs do. Kernels run
synchronously: buffers are copied in, and the written ones copied back.
"""

from __future__ import annotations

import atexit
import os
import shutil
import site
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import torch

from .._kernel import Buffer, Instance
from . import Runtime, Status

BUILD_OPTIONS = ["-cl-std=CLC++2021"]


def _intel_library() -> Path | None:
    prefixes = [sys.prefix, sysconfig.get_paths()["data"], site.getuserbase()]
    for prefix in prefixes:
        path = Path(prefix) / "lib" / "libintelocl.so"
        if path.exists():
            return path
    return None


def _point_loader_at_intel_runtime() -> None:
    """Register the pip-installed Intel runtime with the OpenCL loader.

    The wheel's own .icd file names a path that does not exist; the loader reads
    OCL_ICD_VENDORS when it first lists platforms, so this runs before that.
    A caller's own OCL_ICD_VENDORS is left alone.
    """
    library = _intel_library()
    if "OCL_ICD_VENDORS" in os.environ or library is None:
        return
    # A new private (0700) folder a process: a shared, predictable one could be
    # another user's (naming their library) or be read half-written by a second process.
    folder = Path(tempfile.mkdtemp(prefix="mpslinalg-opencl-"))
    (folder / "intel-cpu.icd").write_text(f"{library}\n")
    atexit.register(shutil.rmtree, folder, True)
    os.environ["OCL_ICD_VENDORS"] = str(folder)


# What installs the runtime, however mpslinalg itself was installed (the [test] extra of a
# clone installs the same packages).
INSTALL = "pip install pyopencl intel-opencl-rt intel-cmplr-lib-rt (Linux x86-64)"


class OpenCLRuntime(Runtime):
    name = "opencl"
    device_type = "cpu"
    prelude = "prelude_opencl.h"

    def __init__(self) -> None:
        super().__init__()
        self._context = None
        self._queue = None

    def _probe(self) -> Status:
        try:
            import pyopencl as cl
        except ImportError:
            return Status(False, f"pyopencl missing; {INSTALL}")
        _point_loader_at_intel_runtime()
        try:
            devices = [d for p in cl.get_platforms() for d in p.get_devices(cl.device_type.CPU)]
        except cl.Error as error:
            devices, detail = [], f" ({error})"
        else:
            detail = ""
        if not devices:
            return Status(
                False,
                f"OpenCL runtime missing: no CPU OpenCL device{detail}; pip install intel-opencl-rt intel-cmplr-lib-rt",
            )
        self._context = cl.Context([devices[0]])
        self._queue = cl.CommandQueue(self._context)
        return Status(True)

    shared_qualifier = "__local"
    global_space = "__global"
    position = (
        "{(uint)get_group_id(0), (uint)get_local_id(0), (uint)get_local_size(0),"
        " (uint)get_sub_group_local_id(), (uint)get_sub_group_id()}"
    )

    def kernel_prefix(self, instance: Instance) -> str:
        return (
            f"__attribute__((reqd_work_group_size({instance.group_size}, 1, 1)))\n"
            "__attribute__((intel_reqd_sub_group_size(32)))\n__kernel "
        )

    def buffer_param(self, index: int, buffer: Buffer, instance: Instance) -> str:
        const = "const " if buffer.const else ""
        return f"__global {const}{instance.storage(buffer)}* {buffer.name}"

    def _compile(self, instance: Instance, device: torch.device):
        import pyopencl as cl
        from pyopencl.cache import create_built_program_from_source_cached

        self._require()  # fits() may be the first thing a runtime is asked
        source = self.source(instance)
        with warnings.catch_warnings():
            # Intel's compiler reports success as non-empty output.
            warnings.simplefilter("ignore", cl.CompilerWarning)
            try:
                # pyopencl's cache of binaries, with our options alone: Program.build adds
                # "-I <pyopencl's own folder>" to the options the cache is keyed on, so
                # each virtual environment (CI makes new ones) compiled every kernel anew.
                program, _ = create_built_program_from_source_cached(
                    self._context, source, " ".join(BUILD_OPTIONS).encode(), self._context.devices
                )
            except cl.Error:
                cl.Program(self._context, source).build(options=BUILD_OPTIONS)  # raises, with the build log
                raise
        return cl.Kernel(program, instance.host_name)

    def _require(self) -> None:
        status = self.status()  # creates the context on first use
        if not status.usable:
            raise RuntimeError(f"the OpenCL runtime is {status}")

    def _group_limit(self, function, device: torch.device) -> int:
        import pyopencl as cl

        return int(function.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self._context.devices[0]))

    def launch(self, instance: Instance, groups: int, args: Sequence, device: torch.device) -> None:
        import numpy as np
        import pyopencl as cl

        self._require()
        function = self.compiled(instance, device)
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        kernel_args, written = [], []
        for arg, decl in zip(args, instance.kernel.args):
            if isinstance(decl, Buffer):
                host = arg.detach().numpy()
                if host.size == 0:  # OpenCL has no empty buffers; the kernel reads none of it
                    host = np.zeros(1, dtype=host.dtype)
                buffer = cl.Buffer(self._context, flags, hostbuf=host)
                kernel_args.append(buffer)
                if not decl.const:
                    written.append((host, buffer))
            else:
                kernel_args.append(np.int32(arg))
        group_size = instance.group_size
        with self._lock:
            function(self._queue, (groups * group_size,), (group_size,), *kernel_args)
            for host, buffer in written:
                cl.enqueue_copy(self._queue, host, buffer)
            self._queue.finish()
