"""Metal on MPS tensors, through ``torch.mps.compile_shader`` (torch >= 2.7).

Thin on purpose: no Mac runs our tests, so everything up to the call into torch
(source text, argument order and casts, ``threads`` / ``group_size``) is plain
Python that the tests drive with a fake library.

compile_shader's rules this follows: argument k is bound to ``[[buffer(k)]]``,
tensors and scalars alike; a Python int is sent as int64 unless cast, so every
scalar is cast to int32 and declared ``constant int&``; ``threads`` is the
total thread count of a ``dispatchThreads`` grid; threadgroup memory can only be
declared with static sizes inside the kernel.
"""

from __future__ import annotations

import platform
import sys
from typing import Sequence

import torch

from .._kernel import Buffer, Instance, Scalar
from . import Runtime, Status



class MetalRuntime(Runtime):
    name = "metal"
    device_type = "mps"
    prelude = "prelude_metal.h"
    dtypes = (torch.float32, torch.complex64)  # MSL has no double

    def __init__(self, compile_shader=None) -> None:
        super().__init__()
        self._compile_shader = compile_shader

    def _probe(self) -> Status:
        if sys.platform != "darwin":
            return Status(False, "no Apple GPU (not macOS)")
        if not torch.backends.mps.is_built():
            return Status(False, "torch built without MPS")
        release = platform.mac_ver()[0]
        if release and int(release.split(".")[0]) < 14:
            return Status(False, f"macOS {release} too old (Metal 3.1 needs macOS 14)")
        if not torch.backends.mps.is_available():
            return Status(False, "no Apple GPU available to MPS")
        if not hasattr(torch.mps, "compile_shader"):
            return Status(False, f"torch {torch.__version__} has no torch.mps.compile_shader (needs 2.7)")
        return Status(True)

    shared_qualifier = "threadgroup"
    global_space = "device"
    position = "{group_index, thread_index, group_size, simd_lane, simd_group}"
    position_params = (
        "uint group_index [[threadgroup_position_in_grid]]",
        "uint thread_index [[thread_position_in_threadgroup]]",
        "uint group_size [[threads_per_threadgroup]]",
        "uint simd_lane [[thread_index_in_simdgroup]]",
        "uint simd_group [[simdgroup_index_in_threadgroup]]",
    )

    def kernel_prefix(self, instance: Instance) -> str:
        return "[[kernel]] "

    def buffer_param(self, index: int, buffer: Buffer, instance: Instance) -> str:
        const = "const " if buffer.const else ""
        return f"{const}device {instance.storage(buffer)}* {buffer.name} [[buffer({index})]]"

    def scalar_param(self, index: int, scalar: Scalar) -> str:
        return f"constant int& {scalar.name} [[buffer({index})]]"

    def _compile(self, instance: Instance, device: torch.device):
        compile_shader = self._compile_shader or torch.mps.compile_shader
        return getattr(compile_shader(self.source(instance)), instance.host_name)

    def max_group_size(self, instance: Instance, device: torch.device) -> int:
        return int(self.compiled(instance, device).max_threads_per_threadgroup)

    def launch(self, instance: Instance, groups: int, args: Sequence, device: torch.device) -> None:
        function = self.compiled(instance, device)
        group_size = instance.group_size
        if group_size > function.max_threads_per_threadgroup:
            raise RuntimeError(
                f"{instance.host_name} needs {group_size} threads per threadgroup; "
                f"this GPU's pipeline for it allows {function.max_threads_per_threadgroup}"
            )
        casts = {k: "int32" for k, a in enumerate(instance.kernel.args) if isinstance(a, Scalar)}
        function(*args, threads=groups * group_size, group_size=group_size, arg_casts=casts)
