"""One declaration per kernel, from which every runtime generates its entry point.

A kernel body is a function template in ``metal/<family>.metal`` whose
parameters are, in order: the declared buffers and scalars, the threadgroup
arrays, and a ``thread_position``. A :class:`Kernel` names that template, its
parameters, its instantiations and its launch shape; each runtime
(``runtimes/metal.py``, ``cuda.py``, ``opencl.py``) turns an :class:`Instance`
into an entry point of its own dialect that declares the arguments, the
threadgroup arrays at kernel scope (as MSL requires) and calls the body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

import torch


@dataclass(frozen=True)
class ScalarType:
    """How one torch dtype appears in kernel source."""

    dtype: torch.dtype
    name: str  # in host names: "float32"
    ctype: str  # the kernel's T: "complex_t<float>"
    storage: str  # the element a buffer of it is declared with: "float"


SCALAR_TYPES = {
    t.dtype: t
    for t in (
        ScalarType(torch.float32, "float32", "float", "float"),
        ScalarType(torch.complex64, "complex64", "complex_t<float>", "float"),
        ScalarType(torch.float64, "float64", "double", "double"),
        ScalarType(torch.complex128, "complex128", "complex_t<double>", "double"),
        ScalarType(torch.int32, "int32", "int", "int"),  # for kernels on indices only
    )
}
FLOATING = (torch.float32, torch.complex64, torch.float64, torch.complex128)


KERNELS: list[Kernel] = []  # every declared kernel, in declaration order

# Threadgroup memory an instance may declare: Metal's 32 KiB for the types Metal has,
# CUDA's 48 KiB of static shared memory for the 8-byte types that only CUDA and
# OpenCL instantiate.
METAL_DTYPES = (torch.float32, torch.complex64)
SHARED_LIMIT = {True: 32 * 1024, False: 48 * 1024}


@dataclass(frozen=True)
class Buffer:
    """A tensor argument. ``element`` "T" is the kernel's scalar type, "R" its real
    type (singular values of complex matrices); else a C type."""

    name: str
    element: str = "T"
    const: bool = False


@dataclass(frozen=True)
class Scalar:
    """A 32-bit integer argument, passed by value."""

    name: str


@dataclass(frozen=True)
class Shared:
    """A threadgroup array: ``element`` is a C type, "T" or "R" (T's real type), ``size`` in elements."""

    name: str
    element: str
    size: int


@dataclass(frozen=True, eq=False)  # compared and hashed by identity
class Kernel:
    """A kernel body and its instantiations.

    ``template`` maps the values of an instantiation (a dict of ints, e.g. ``{"N": 4}``)
    to the body's template arguments after T (bools become ``true``/``false``);
    ``shared`` maps them to its threadgroup arrays. Every instantiation exists for
    every dtype in ``dtypes`` for which ``where(dtype, **values)`` holds and whose
    threadgroup arrays fit ``SHARED_LIMIT``.
    """

    function: str
    source: str
    args: tuple[Buffer | Scalar, ...]
    instances: tuple[dict, ...]
    group_size: int | Callable[..., int]  # threads per threadgroup, or a function of the values
    template: Callable[..., Sequence[int]]
    shared: Callable[..., Sequence[Shared]] = lambda **_: ()
    dtypes: tuple[torch.dtype, ...] = FLOATING
    where: Callable[..., bool] = lambda dtype, **_: True

    def __post_init__(self) -> None:
        KERNELS.append(self)

    @cached_property
    def first_scalar_buffer(self) -> int | None:
        """The index in ``args`` of the first buffer of T, whose dtype selects the
        instantiation; None for a kernel on indices only."""
        return next((k for k, a in enumerate(self.args) if isinstance(a, Buffer) and a.element == "T"), None)

    def instance(self, dtype: torch.dtype, **values: int) -> Instance:
        key = (id(self), dtype, *values.items())  # kernels live as long as the process
        found = _INSTANCES.get(key)  # every launch asks: keep it a dictionary lookup
        if found is None:
            if not self.exists(dtype, **values):
                raise ValueError(f"{self.function} has no instantiation for {dtype}, {values}")
            ordered = tuple((name, values[name]) for name in self.instances[0])  # the declaration's order
            found = _INSTANCES.setdefault(key, Instance(self, SCALAR_TYPES[dtype], ordered))
        return found

    def exists(self, dtype: torch.dtype, **values: int) -> bool:
        key = (id(self), dtype, *values.items())  # kernels live as long as the process
        if key not in _EXISTS:
            _EXISTS[key] = (
                dtype in self.dtypes
                and values in self.instances
                and self.where(dtype, **values)
                and self.shared_bytes(dtype, **values) <= SHARED_LIMIT[dtype in METAL_DTYPES]
            )
        return _EXISTS[key]

    def shared_bytes(self, dtype: torch.dtype, **values: int) -> int:
        # Not dtype.to_real(): torch.compile cannot trace it (torch 2.11).
        sizes = {"T": dtype.itemsize, "R": dtype.itemsize // 2 if dtype.is_complex else dtype.itemsize}
        return sum(s.size * sizes.get(s.element, 4) for s in self.shared(**values))

    def all_instances(self) -> list[Instance]:
        return [self.instance(d, **v) for d in self.dtypes for v in self.instances if self.exists(d, **v)]


_INSTANCES: dict[tuple, Instance] = {}
_EXISTS: dict[tuple, bool] = {}


# Compared and hashed by identity: Kernel.instance interns one per (kernel, dtype,
# values), and every launch looks its compiled entry point up by it (a field-wise hash
# of the dataclass cost a microsecond a launch).
@dataclass(frozen=True, eq=False)
class Instance:
    kernel: Kernel
    scalar: ScalarType
    values: tuple[tuple[str, int], ...] = field(default=())

    @property
    def host_name(self) -> str:
        """The entry point's name, carrying every parameter: inverse_small_float32_n4."""
        parts = [self.kernel.function, self.scalar.name]
        parts += [f"{key.lower()}{value}" for key, value in self.values]
        return "_".join(parts)

    @cached_property
    def group_size(self) -> int:
        size = self.kernel.group_size
        return size if isinstance(size, int) else size(**dict(self.values))

    @property
    def template_args(self) -> str:
        rendered = [("true" if v else "false") if isinstance(v, bool) else str(v) for v in self.kernel.template(**dict(self.values))]
        return ", ".join([self.scalar.ctype] + rendered)

    def shared(self) -> list[Shared]:
        return [
            Shared(s.name, self.element(s.element), s.size)
            for s in self.kernel.shared(**dict(self.values))
        ]

    def element(self, element: str) -> str:
        return {"T": self.scalar.ctype, "R": self.scalar.storage}.get(element, element)

    def storage(self, buffer: Buffer) -> str:
        """The C type a buffer is declared with in an entry point's signature.

        Complex buffers are declared as their real storage and cast to T inside:
        C++ for OpenCL accepts no class-template pointer as a kernel parameter.
        """
        return self.scalar.storage if buffer.element in ("T", "R") else buffer.element

    def body_call(self, address_space: str) -> str:
        """The call from an entry point into the body: ``f<T, ...>(args..., shared..., pos)``."""
        args = []
        for a in self.kernel.args:
            if isinstance(a, Buffer) and a.element == "T" and self.scalar.ctype != self.scalar.storage:
                const = "const " if a.const else ""
                space = f"{address_space} " if address_space else ""
                args.append(f"reinterpret_cast<{const}{space}{self.scalar.ctype}*>({a.name})")
            else:
                args.append(a.name)
        args += [s.name for s in self.shared()] + ["pos"]
        return f"{self.kernel.function}<{self.template_args}>({', '.join(args)});"


_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.MULTILINE)


@cache
def metal_file(name: str) -> str:
    """A kernel source from ``metal/`` with its local ``#include "..."`` lines inlined once."""
    return _inline(name, set())


@cache
def _metal_sources():
    """The folder of the kernel sources: the installed ``mpslinalg.metal``, else (a source
    checkout imported from its root, or an editable install made without setuptools'
    finder, which maps the subpackage) ``metal/`` beside the package."""
    try:
        return resources.files("mpslinalg.metal")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "metal"


def _inline(name: str, seen: set[str]) -> str:
    if name in seen:
        return ""
    seen.add(name)
    text = _metal_sources().joinpath(name).read_text()
    text = text.replace("#pragma once\n", "")
    return _INCLUDE.sub(lambda m: _inline(m.group(1), seen), text)


def program(prelude: str, instance: Instance, entry: str) -> str:
    """The whole translation unit one runtime compiles for one instance."""
    return "\n".join([metal_file(prelude), metal_file(instance.kernel.source), entry])
