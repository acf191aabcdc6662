"""CUDA on CUDA tensors, through NVRTC (CuPy), on torch's current stream."""

from __future__ import annotations

import numpy as np
import torch

from .._kernel import Buffer, Instance
from . import Runtime, Status

POSITION = "{blockIdx.x, threadIdx.x, blockDim.x, threadIdx.x % 32u, threadIdx.x / 32u}"


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
            return Status(False, f"CuPy missing ({error.__class__.__name__}: {error}); pip install mpslinalg[cuda]")
        return Status(True)

    def entry_point(self, instance: Instance) -> str:
        params = []
        for arg in instance.kernel.args:
            if isinstance(arg, Buffer):
                const = "const " if arg.const else ""
                params.append(f"{const}{instance.storage(arg)}* __restrict__ {arg.name}")
            else:
                params.append(f"int {arg.name}")
        group_size = instance.kernel.group_size
        lines = [f'extern "C" __global__ void __launch_bounds__({group_size}) {instance.host_name}(']
        lines.append("    " + ",\n    ".join(params) + ") {")
        lines += [f"  __shared__ {s.element} {s.name}[{s.size}];" for s in instance.shared()]
        lines.append(f"  const thread_position pos = {POSITION};")
        lines.append("  " + instance.body_call(lambda b: ""))
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _compile(self, instance: Instance, device: torch.device):
        cupy = _cupy()
        with cupy.cuda.Device(device.index):
            module = cupy.RawModule(code=self.source(instance), options=("-std=c++17", "-default-device"))
            return module.get_function(instance.host_name)

    def launch(self, instance: Instance, groups: int, args: list, device: torch.device) -> None:
        cupy = _cupy()
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        function = self.compiled(instance, device)
        kernel_args = []
        for arg, decl in zip(args, instance.kernel.args):
            if isinstance(decl, Buffer):
                # An unowned view of the tensor's memory: no copy, and unlike
                # __cuda_array_interface__ no stream synchronisation.
                memory = cupy.cuda.UnownedMemory(arg.data_ptr(), arg.nbytes, arg, device.index)
                kernel_args.append(cupy.ndarray((arg.nbytes,), cupy.uint8, cupy.cuda.MemoryPointer(memory, 0)))
            else:
                kernel_args.append(np.int32(arg))
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream, device.index)
        with cupy.cuda.Device(device.index):
            function((groups,), (instance.kernel.group_size,), tuple(kernel_args), stream=stream)
