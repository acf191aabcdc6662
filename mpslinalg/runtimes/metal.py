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

import os
import platform
import sys
from typing import Sequence

import torch

from .._kernel import Buffer, Instance, Scalar
from . import KernelUnavailable, Runtime, Status



# torch compiles every shader with fast math where this is set (read once a process):
# Apple's compiler may then assume that no value is NaN or infinite, and fold away the
# tests by which the kernels report singular, rank-deficient and non-finite input.
FAST_MATH = "PYTORCH_MPS_FAST_MATH"
FAST_MATH_REASON = (
    f"{FAST_MATH} is set: Apple's compiler may then assume no NaN or Inf, which the kernels' "
    f"handling of singular and non-finite input relies on; unset it to use them"
)


def fast_math() -> bool:
    """Whether torch compiles Metal shaders with fast math (PYTORCH_MPS_FAST_MATH, not 0)."""
    return os.environ.get(FAST_MATH, "0").strip() not in ("", "0")


def mps_unavailable_reason() -> str:
    """Why MPS is unavailable, in torch's words where it has them: a tensor on "mps" then
    raises its reason (torch 2.15: "The MPS backend is supported on macOS 15.0+", where
    2.14 needed 14.0, or no supported Metal GPU, as in a virtual machine)."""
    try:
        torch.empty(0, device="mps")
    except Exception as error:  # its message is the reason
        return "MPS unavailable: " + " ".join(str(error).split())
    return "no Apple GPU available to MPS"


SIMD_WIDTH = 32


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
            return Status(False, mps_unavailable_reason())
        if not hasattr(torch.mps, "compile_shader"):
            return Status(False, f"torch {torch.__version__} has no torch.mps.compile_shader (needs 2.7)")
        if fast_math():
            return Status(False, FAST_MATH_REASON)
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
        # The group size as the pipeline's maximum: Apple's compiler then fits the
        # kernel's registers to it (spilling if need be) rather than report a lower
        # limit, which would send the calls elsewhere (fits, the fallback).
        return f"[[max_total_threads_per_threadgroup({instance.group_size})]] [[kernel]] "

    def buffer_param(self, index: int, buffer: Buffer, instance: Instance) -> str:
        const = "const " if buffer.const else ""
        return f"{const}device {instance.storage(buffer)}* {buffer.name} [[buffer({index})]]"

    def scalar_param(self, index: int, scalar: Scalar) -> str:
        return f"constant int& {scalar.name} [[buffer({index})]]"

    def _compile(self, instance: Instance, device: torch.device):
        compile_shader = self._compile_shader or torch.mps.compile_shader
        return getattr(compile_shader(self.source(instance)), instance.host_name)

    def _group_limit(self, function, device: torch.device) -> int:
        # The kernels' SIMD groups are of 32 lanes, every Apple-silicon GPU's width: a
        # pipeline of another width (an AMD or Intel Mac's) runs no instance.
        width = int(getattr(function, "thread_execution_width", SIMD_WIDTH))
        if width != SIMD_WIDTH:
            raise KernelUnavailable(f"its pipeline's SIMD width is {width}; the kernels' SIMD groups are of {SIMD_WIDTH}")
        return int(function.max_threads_per_threadgroup)

    def launch(self, instance: Instance, groups: int, args: Sequence, device: torch.device) -> None:
        function = self.compiled(instance, device)  # compiled, and its group within the pipeline's limit
        group_size = instance.group_size
        casts = {k: "int32" for k, a in enumerate(instance.kernel.args) if isinstance(a, Scalar)}
        function(*args, threads=groups * group_size, group_size=group_size, arg_casts=casts)
