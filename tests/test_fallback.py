"""A kernel that cannot run on the device, as on a Mac whose compiler rejects it or whose
pipeline allows fewer threads than its threadgroup has: a one-time FallbackWarning naming
the kernel and the reason, and the call answered by the next route that works (a smaller
instance, else torch) with the same results, on every public function, eager and compiled.

No Mac runs here: the Metal runtime is driven up to torch's call by a fake
compile_shader, and the routes are exercised on the OpenCL runtime with its compiler
or its pipelines made to fail the same way."""

import re
import warnings

import pytest
import torch

import mpslinalg as LA
from conftest import require
from mpslinalg import _dispatch
from mpslinalg.composite import FORWARDED_TO_TORCH
from mpslinalg.inverse import INVERSE_SMALL
from mpslinalg.lu_family import LU_FACTOR_PANEL
from mpslinalg.runtimes import RUNTIMES, FallbackWarning, KernelUnavailable, fits
from mpslinalg.runtimes.metal import MetalRuntime
from mpslinalg.svd_family import SVD_JACOBI
from test_hardening import CALLS, NOT_DIFFERENTIABLE, inputs
from test_runtimes import FakeLibrary

MPS = torch.device("mps")


def rejecting(source):
    raise SyntaxError("program_source:12:5: error: program scope variable must reside in constant address space")


def test_metal_compile_error_is_a_warning_and_an_unusable_instance():
    runtime = MetalRuntime(compile_shader=rejecting)
    instance = INVERSE_SMALL.instance(torch.float32, N=3)
    with pytest.warns(FallbackWarning, match=r"metal kernel inverse_small_float32_n3 cannot run on mps \(SyntaxError while compiling: program_source:12:5: error: program scope"):
        assert not runtime.usable(instance, MPS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: a second ask neither compiles nor warns again
        assert not runtime.usable(instance, MPS)
        with pytest.raises(KernelUnavailable, match="inverse_small_float32_n3 cannot run on mps: SyntaxError"):
            runtime.launch(instance, 1, [torch.zeros(1, 3, 3)] * 2 + [torch.zeros(1, dtype=torch.int32), 1], MPS)


def test_metal_pipeline_smaller_than_the_threadgroup():
    class Small(FakeLibrary):
        max_threads = 512

    runtime = MetalRuntime(compile_shader=Small)
    large = LU_FACTOR_PANEL.instance(torch.float32, GROUP=1024, ROWS=1)
    small = LU_FACTOR_PANEL.instance(torch.float32, GROUP=256, ROWS=2)
    with pytest.warns(FallbackWarning, match="needs 1024 threads per threadgroup; this device's pipeline for it allows 512"):
        assert not runtime.usable(large, MPS)
    assert runtime.usable(small, MPS)
    a, pivots, info = torch.zeros(1, 300, 300), torch.zeros(1, 300, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    with pytest.raises(KernelUnavailable, match="allows 512"):
        runtime.launch(large, 1, [a, pivots, info, 300, 300, 0, 32, 1, 300, 1], MPS)
    runtime.launch(small, 1, [a, pivots, info, 300, 300, 0, 32, 1, 300, 1], MPS)


def test_metal_pipeline_of_another_simd_width_runs_nothing():
    """The kernels' SIMD groups are 32 lanes wide, as on every Apple-silicon GPU."""

    class Narrow(FakeLibrary):
        def __getattr__(self, name):
            kernel = super().__getattr__(name)
            kernel.thread_execution_width = 16
            return kernel

    instance = INVERSE_SMALL.instance(torch.float32, N=3)
    with pytest.warns(FallbackWarning, match=r"inverse_small_float32_n3 cannot run on mps \(its pipeline's SIMD width is 16"):
        assert not MetalRuntime(compile_shader=Narrow).usable(instance, MPS)
    assert MetalRuntime(compile_shader=FakeLibrary).usable(instance, MPS)


_BUILT = {}  # instance -> OpenCL kernel, across tests


@pytest.fixture
def failing_opencl(monkeypatch):
    """The OpenCL runtime on an empty kernel cache, failing as the test says: its
    ``compile_error(instance)`` plants a compile error, its ``thread_limit`` caps every
    pipeline; ``launched`` lists the instances that ran."""
    require("opencl")
    runtime = RUNTIMES["opencl"]
    real_compile, real_limit, real_launch = runtime._compile, runtime._group_limit, runtime.launch

    class State:
        compile_error = staticmethod(lambda instance: False)
        thread_limit = 1 << 30
        launched: list[str] = []

    state = State()

    def compile(instance, device):
        if state.compile_error(instance):
            raise SyntaxError(f"planted: {instance.host_name} does not compile")
        if instance not in _BUILT:  # the kernel cache starts empty; the compiler's work need not
            _BUILT[instance] = real_compile(instance, device)
        return _BUILT[instance]

    def launch(instance, groups, args, device):
        real_launch(instance, groups, args, device)
        state.launched.append(instance.host_name)

    monkeypatch.setattr(runtime, "_compiled", {})
    monkeypatch.setattr(runtime, "_compile", compile)
    monkeypatch.setattr(runtime, "_group_limit", lambda function, device: min(real_limit(function, device), state.thread_limit))
    monkeypatch.setattr(runtime, "launch", launch)
    yield state


def outcome(name, backend, dtype=torch.float64):
    A, B = (x.to(dtype) for x in inputs("cpu"))
    differentiable = name not in NOT_DIFFERENTIABLE
    A.requires_grad_(differentiable)
    with LA.use_backend(backend):
        result = CALLS[name](A, B)
        grad = torch.autograd.grad(result.sum(), A)[0] if differentiable else None
    return result.detach(), grad


def assert_same_results(got, expected):
    torch.testing.assert_close(got[0], expected[0])
    if expected[1] is not None:
        torch.testing.assert_close(got[1], expected[1])


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_function_answered_by_torch_when_no_kernel_compiles(failing_opencl, name):
    failing_opencl.compile_error = lambda instance: True
    expected = outcome(name, "torch")
    if name in FORWARDED_TO_TORCH:  # torch's own function: no kernel to fail, no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            got = outcome(name, "opencl")
        assert failing_opencl.launched == []
        assert_same_results(got, expected)
        return
    with pytest.warns(FallbackWarning, match=r"opencl kernel \w+ cannot run on cpu \(SyntaxError while compiling: planted"):
        got = outcome(name, "opencl")
    assert failing_opencl.launched == [], "no kernel may run"
    assert_same_results(got, expected)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_function_answered_where_pipelines_allow_only_32_threads(failing_opencl, name):
    """Kernels of SIMD-group size still run; every larger one is refused."""
    failing_opencl.thread_limit = 32
    expected = outcome(name, "torch")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always", FallbackWarning)
        got = outcome(name, "opencl")
    assert_same_results(got, expected)


@pytest.mark.parametrize(
    "name, A",
    [
        ("lu_factor_ex", torch.randn(2, 300, 300, dtype=torch.float64)),  # the 1024-thread panel otherwise
        ("svd", torch.randn(2, 130, 130, dtype=torch.float64)),  # svd_jacobi's 1024-thread instance otherwise
        ("geqrf", torch.randn(2, 700, 70, dtype=torch.float64)),  # geqrf_panel's 1024 threads otherwise
    ],
)
def test_a_smaller_instance_serves_where_the_larger_does_not_fit(failing_opencl, name, A):
    failing_opencl.thread_limit = 512
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        with LA.use_backend("opencl"):
            got = getattr(LA, name)(A)
    assert all(not re.search(r"_group1024\b", n) for n in failing_opencl.launched), failing_opencl.launched
    assert failing_opencl.launched, "kernels, not torch, answered"
    expected = getattr(LA, name)(A)  # torch.linalg on the CPU
    if name == "svd":
        torch.testing.assert_close(got.S, expected.S)
        torch.testing.assert_close(got.U @ torch.diag_embed(got.S).to(A.dtype) @ got.Vh, A)
    elif name == "geqrf":
        torch.testing.assert_close(got.a.triu().abs(), expected.a.triu().abs())
    else:
        torch.testing.assert_close(got, expected)
    refused = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert refused and all("needs 1024 threads per threadgroup; this device's pipeline for it allows 512" in m for m in refused)


def test_compiled_graphs_take_the_fallback(failing_opencl):
    """torch.compile calls the custom op, whose body answers by torch as eager calls do."""
    failing_opencl.compile_error = lambda instance: True
    A = torch.randn(3, 6, 6, dtype=torch.float64)
    torch._dynamo.reset()
    with LA.use_backend("opencl"), pytest.warns(FallbackWarning):
        Q, R = torch.compile(LA.qr, fullgraph=True)(A)
    torch.testing.assert_close(Q @ R, A)


def test_torch_without_the_op_on_the_device_answers_on_a_cpu_copy(monkeypatch):
    """Where torch has no implementation for the device (NotImplementedError on MPS for
    many linalg ops), the fallback computes on a CPU copy and moves the result back.
    (A meta tensor stands in for the MPS one; its CPU copy is made of zeros.)"""
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self: torch.zeros(self.shape, dtype=self.dtype))
    devices = []

    def reference(A):
        devices.append(A.device.type)
        if A.device.type != "cpu":
            raise NotImplementedError("The operator 'aten::linalg_qr.out' is not currently implemented for the MPS device")
        return A + 1

    @_dispatch.answered_by(reference)
    def body(A):
        raise KernelUnavailable("planted")

    result = body(torch.zeros(2, 2, device="meta"))
    assert devices == ["meta", "cpu"] and result.device.type == "meta"
    torch.testing.assert_close(body(torch.zeros(2, 2)), torch.ones(2, 2))


def test_fits_is_false_for_an_instance_that_does_not_compile(failing_opencl):
    failing_opencl.compile_error = lambda instance: instance.values == (("GROUP", 1024),)
    cpu = torch.device("cpu")
    with pytest.warns(FallbackWarning, match="svd_jacobi_float32_group1024"):
        assert not fits(SVD_JACOBI, torch.float32, cpu, GROUP=1024)
    assert fits(SVD_JACOBI, torch.float32, cpu, GROUP=512)


def on_a_mac(monkeypatch) -> None:
    """The Metal runtime's probe answers as on an Apple-silicon Mac with macOS 15."""
    from mpslinalg.runtimes import metal

    monkeypatch.setattr(metal.sys, "platform", "darwin")
    monkeypatch.setattr(metal.platform, "mac_ver", lambda: ("15.1", ("", "", ""), "arm64"))
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "compile_shader", rejecting, raising=False)


def test_unavailable_mps_is_explained_in_torchs_words(monkeypatch):
    """On a Mac where torch's MPS is unavailable (torch 2.15 needs macOS 15, 2.14 needed
    14; no Metal GPU in a virtual machine), the runtime's reason is what torch raises when
    asked for an MPS tensor, so that ``info`` names the macOS release the installed torch
    needs; where torch raises nothing, a reason of ours."""
    from mpslinalg.runtimes import metal

    on_a_mac(monkeypatch)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    real_empty = torch.empty

    def empty_as_on_macos_14(*args, device=None, **kwargs):
        if device == "mps":  # torch 2.15's words on macOS 14 (libtorch_cpu's mps_unavailable_error)
            raise RuntimeError("The MPS backend is supported on macOS 15.0+. \nCurrent OS version can be queried using `sw_vers`")
        return real_empty(*args, device=device, **kwargs)

    monkeypatch.setattr(metal.torch, "empty", empty_as_on_macos_14)
    status = MetalRuntime().status()
    assert not status.usable
    assert status.reason == "MPS unavailable: The MPS backend is supported on macOS 15.0+. Current OS version can be queried using `sw_vers`"
    monkeypatch.setattr(metal.torch, "empty", lambda *a, device=None, **k: real_empty(*a, **k))
    assert MetalRuntime().status().reason == "no Apple GPU available to MPS"


@pytest.mark.parametrize("value, usable", [(None, True), ("0", True), ("1", False)])
def test_fast_math_refuses_metal_with_a_clear_reason(monkeypatch, capsys, value, usable):
    """PYTORCH_MPS_FAST_MATH lets Apple's compiler assume no NaN or Inf, on which the
    kernels' info, rank and NaN propagation depend: the runtime refuses Metal (MPS
    tensors then go to torch.linalg with one warning) and ``info`` says why."""
    from mpslinalg import __main__ as command

    on_a_mac(monkeypatch)
    if value is None:
        monkeypatch.delenv("PYTORCH_MPS_FAST_MATH", raising=False)
    else:
        monkeypatch.setenv("PYTORCH_MPS_FAST_MATH", value)
    metal = MetalRuntime()
    assert metal.status().usable == usable
    monkeypatch.setitem(RUNTIMES, "metal", metal)
    command.info()
    line = next(l for l in capsys.readouterr().out.splitlines() if l.strip().startswith("metal"))
    assert ("PYTORCH_MPS_FAST_MATH is set: Apple's compiler may then assume no NaN or Inf" in line) != usable
