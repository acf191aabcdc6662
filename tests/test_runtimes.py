"""The runtimes: generated entry points, the Metal launch up to torch's call, dispatch, caching."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import threading
import warnings

import pytest
import torch

import mpslinalg as LA
from mpslinalg import _dispatch
from mpslinalg._kernel import FLOATING, KERNELS, SCALAR_TYPES, metal_file
from mpslinalg import lu_family
from mpslinalg.inverse import DET_SMALL, GROUP, INVERSE_SMALL
from mpslinalg.lu_family import LU_FACTOR_PANEL
from mpslinalg.runtimes import RUNTIMES, launch
from mpslinalg.runtimes.metal import MetalRuntime
from mpslinalg.svd_family import SVD_TINY
from conftest import require


class FakeLibrary:
    """Stands in for the object torch.mps.compile_shader returns; records each call."""

    def __init__(self, source):
        self.source = source
        self.calls = []
        self.kernels = set(re.findall(r"\[\[kernel\]\] void (\w+)\(", source))

    max_threads = 1024  # what each pipeline allows

    def __getattr__(self, name):
        if name not in self.kernels:
            raise AttributeError(name)
        return FakeKernel(name, self.calls, self.max_threads)


class FakeKernel:
    def __init__(self, name, calls, max_threads):
        self.name, self.calls, self.max_threads_per_threadgroup = name, calls, max_threads

    def __call__(self, *args, **kwargs):
        self.calls.append((self.name, args, kwargs))


def test_metal_launch_up_to_compile_shader():
    libraries = []
    runtime = MetalRuntime(compile_shader=lambda source: libraries.append(FakeLibrary(source)) or libraries[-1])
    instance = INVERSE_SMALL.instance(torch.complex64, N=4)
    a, inverse, info = torch.zeros(300, 4, 4, dtype=torch.complex64), torch.zeros(300, 4, 4, dtype=torch.complex64), torch.zeros(300, dtype=torch.int32)
    runtime.launch(instance, 3, [a, inverse, info, 300], torch.device("mps"))
    runtime.launch(instance, 3, [a, inverse, info, 300], torch.device("mps"))
    assert len(libraries) == 1, "compiled once per process per (instance, device)"
    library = libraries[0]
    source = library.source
    assert source.startswith("// Metal prelude") and "#include <metal_stdlib>" in source
    assert "template <typename T, int N, int GROUP, int STRIDE>\nMETAL_FUNC void inverse_small(" in source
    entry = source[source.index("[[max_total_threads_per_threadgroup(128)]] [[kernel]] void inverse_small_complex64_n4("):]
    # Argument k is buffer k, in call order; the scalar is a 32-bit constant.
    assert re.findall(r"\[\[buffer\((\d)\)\]\]", entry) == ["0", "1", "2", "3"]
    assert "const device float* a [[buffer(0)]]" in entry
    assert "device float* inverse [[buffer(1)]]" in entry
    assert "device int* info [[buffer(2)]]" in entry
    assert "constant int& batch [[buffer(3)]]" in entry
    assert f"threadgroup complex_t<float> tile[{GROUP * 17}];" in entry
    assert "inverse_small<complex_t<float>, 4, 128, 17>(reinterpret_cast<const device complex_t<float>*>(a)" in entry
    assert library.calls == [("inverse_small_complex64_n4", (a, inverse, info, 300), {"threads": 3 * GROUP, "group_size": GROUP, "arg_casts": {3: "int32"}})] * 2


def test_blocked_lu_takes_the_smaller_panel_where_the_larger_does_not_fit(monkeypatch):
    require("opencl")
    panels = []
    real = lu_family.launch

    def recording(kernel, *args, **values):
        if kernel is LU_FACTOR_PANEL:
            panels.append((values["GROUP"], values["ROWS"]))
        return real(kernel, *args, **values)

    monkeypatch.setattr(lu_family, "fits", lambda *args, **values: False)
    monkeypatch.setattr(lu_family, "launch", recording)
    A = torch.randn(2, 300, 300, dtype=torch.float64)
    with LA.use_backend("opencl"):
        LU, pivots, info = LA.lu_factor_ex(A)
    assert panels == [(256, 2)] * 2 + [(256, 1)] * 8  # panels of 300 rows, then 268, then at most 256
    torch.testing.assert_close(LU, torch.linalg.lu_factor_ex(A).LU)


def test_metal_runtime_has_no_double_kernels(monkeypatch):
    from mpslinalg import runtimes

    metal = RUNTIMES["metal"]
    assert set(metal.dtypes) == {torch.float32, torch.complex64}
    monkeypatch.setitem(runtimes._BY_DEVICE, "cpu", metal)  # reach launch()'s dtype check without a Mac
    a = torch.zeros(1, 2, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="no torch.float64 kernels"):
        launch(DET_SMALL, 1, a, torch.zeros(1, dtype=torch.float64), 1, N=2)


@pytest.mark.parametrize("runtime", ["metal", "cuda", "opencl"])
def test_every_instance_has_an_entry_point(runtime):
    rt = RUNTIMES[runtime]
    names = set()
    for kernel in KERNELS:
        for instance in kernel.all_instances():
            if instance.scalar.dtype not in rt.dtypes:
                continue
            entry = rt.entry_point(instance)
            assert instance.host_name in entry and instance.host_name not in names
            names.add(instance.host_name)
            source = rt.source(instance)
            assert metal_file(kernel.source) in source
    expected = sum(k.exists(d, **v) for k in KERNELS for d in k.dtypes if d in rt.dtypes for v in k.instances)
    assert len(names) == expected


def test_cuda_entry_point():
    entry = RUNTIMES["cuda"].entry_point(INVERSE_SMALL.instance(torch.float64, N=3))
    assert entry.startswith('extern "C" __global__ __launch_bounds__(128) void inverse_small_float64_n3(')
    assert "const double* __restrict__ a" in entry and "int batch" in entry
    assert f"__shared__ double tile[{GROUP * 9}];" in entry
    assert "{blockIdx.x, threadIdx.x, blockDim.x, threadIdx.x % 32u, threadIdx.x / 32u}" in entry


def test_cuda_ptx_is_compiled_once_and_kept_on_disk(tmp_path, monkeypatch):
    # NVRTC stood in for by a fake that records its calls: the second request,
    # from a "new process" (the same arguments), reads the PTX from the cache.
    import types

    from mpslinalg.runtimes import cuda

    compiled = []

    class NVRTCError(Exception):
        pass

    fake = types.SimpleNamespace(
        NVRTCError=NVRTCError,
        getVersion=lambda: (13, 0),
        createProgram=lambda source, name, headers, includes: source,
        compileProgram=lambda program, options: compiled.append(options),
        getPTX=lambda program: b"// ptx of " + program.encode(),
        destroyProgram=lambda program: None,
    )
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.nvrtc = fake
    monkeypatch.setitem(sys.modules, "cupy_backends", types.ModuleType("cupy_backends"))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda", types.ModuleType("cupy_backends.cuda"))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", libs)
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", fake)
    monkeypatch.setenv("MPSLINALG_CACHE_DIR", str(tmp_path))
    first = cuda._ptx("kernel A", "k", (9, 0))
    assert first == b"// ptx of kernel A" and compiled == [(*cuda.OPTIONS, "-arch=compute_90")]
    assert cuda._ptx("kernel A", "k", (9, 0)) == first and len(compiled) == 1
    assert cuda._ptx("kernel A", "k", (8, 0)) == first and len(compiled) == 2  # another target
    assert cuda._ptx("kernel B", "k", (9, 0)) == b"// ptx of kernel B" and len(compiled) == 3
    assert sorted(p.suffix for p in (tmp_path / "cuda").iterdir()) == [".ptx"] * 3


def test_opencl_entry_point_requests_simd_width_32():
    entry = RUNTIMES["opencl"].entry_point(DET_SMALL.instance(torch.complex128, N=2))
    assert "__attribute__((intel_reqd_sub_group_size(32)))" in entry
    assert "__attribute__((reqd_work_group_size(128, 1, 1)))" in entry
    assert "__global double* det" in entry and "__local complex_t<double> tile[640];" in entry


def test_opencl_compiles_every_instance():
    require("opencl")
    runtime = RUNTIMES["opencl"]
    for kernel in KERNELS:
        for instance in kernel.all_instances():
            assert runtime.compiled(instance, torch.device("cpu")) is runtime.compiled(instance, torch.device("cpu"))


def test_host_names_carry_every_parameter():
    assert INVERSE_SMALL.instance(torch.float32, N=4).host_name == "inverse_small_float32_n4"
    assert DET_SMALL.instance(torch.complex128, N=1).host_name == "det_small_complex128_n1"
    with pytest.raises(ValueError):
        INVERSE_SMALL.instance(torch.float32, N=5)
    assert set(FLOATING) == {torch.float32, torch.complex64, torch.float64, torch.complex128} &  set(SCALAR_TYPES)


def test_launch_refuses_unresolved_or_strided_arguments():
    require("opencl")
    a = torch.zeros(4, 2, 2, dtype=torch.complex64)
    det = torch.zeros(4, dtype=torch.complex64)
    for bad in [a.conj(), a.mT]:
        with pytest.raises(RuntimeError, match="contiguous and resolved"):
            launch(DET_SMALL, 1, bad, det, 4, N=2)


def test_launch_refuses_buffers_of_another_element_type():
    require("opencl")
    a = torch.zeros(2, 3, 3)
    inverse, info = torch.zeros(2, 3, 3), torch.zeros(2, dtype=torch.int32)
    for args, name in [((a, inverse.double(), info), "inverse"), ((a, inverse, info.long()), "info")]:
        with pytest.raises(TypeError, match=f"inverse_small: {name} must be torch.(float32|int32)"):
            launch(INVERSE_SMALL, 1, *args, 2, N=3)
    singular = torch.zeros(4, 3, dtype=torch.complex64)  # an R buffer: the real type
    with pytest.raises(TypeError, match="s must be torch.float32, got torch.complex64"):
        launch(SVD_TINY, 1, torch.zeros(4, 3, 3, dtype=torch.complex64), torch.zeros(4, 3, 3, dtype=torch.complex64),
               singular, torch.zeros(4, 3, 3, dtype=torch.complex64), 4, N=3)


def test_cpu_default_is_torch_linalg(monkeypatch):
    monkeypatch.delenv("MPSLINALG_BACKEND", raising=False)
    assert _dispatch.kernel_runtime(torch.zeros(2, 2)) is None
    with LA.use_backend("opencl"):
        if RUNTIMES["opencl"].status().usable:
            assert _dispatch.kernel_runtime(torch.zeros(2, 2)) is RUNTIMES["opencl"]
    monkeypatch.setenv("MPSLINALG_BACKEND", "opencl")
    if RUNTIMES["opencl"].status().usable:
        assert _dispatch.kernel_runtime(torch.zeros(2, 2)) is RUNTIMES["opencl"]
    with LA.use_backend("torch"):
        assert _dispatch.kernel_runtime(torch.zeros(2, 2)) is None
    with pytest.raises(ValueError, match="use_backend"):
        with LA.use_backend("cuda"):
            pass
    monkeypatch.setenv("MPSLINALG_BACKEND", "")  # set but empty (`export MPSLINALG_BACKEND=`): the default
    assert _dispatch.kernel_runtime(torch.zeros(2, 2)) is None
    monkeypatch.setenv("MPSLINALG_BACKEND", "metal")
    with pytest.raises(ValueError, match="MPSLINALG_BACKEND"):
        _dispatch.kernel_runtime(torch.zeros(2, 2))


def test_unusable_gpu_runtime_falls_back_with_one_warning(monkeypatch):
    from mpslinalg.runtimes import Status

    metal = RUNTIMES["metal"]
    monkeypatch.setattr(metal, "_status", Status(False, "no Apple GPU (test)"))
    monkeypatch.setattr(_dispatch, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _dispatch._runtime_name("mps") == ""
        assert _dispatch._runtime_name("mps") == ""
    assert [str(w.message) for w in caught] == ["mpslinalg: metal kernels unavailable (no Apple GPU (test)); using torch.linalg"]


def test_backends_say_why():
    statuses = LA.backends()
    assert set(statuses) == {"metal", "cuda", "opencl"}
    for status in statuses.values():
        assert status.usable or status.reason
    if sys.platform != "darwin":
        assert statuses["metal"].reason == "no Apple GPU (not macOS)"
    if not torch.cuda.is_available():
        assert statuses["cuda"].reason == "no CUDA device"


def test_opencl_runs_in_ci():
    """CI runs every kernel on OpenCL: if the runtime cannot start there, CI fails."""
    if os.environ.get("CI"):
        assert LA.backends()["opencl"].usable, LA.backends()["opencl"].reason
    else:
        require("opencl")


def test_threads_share_the_kernel_cache_but_not_the_backend(monkeypatch):
    require("opencl")
    from mpslinalg import inverse as family

    launches = []
    real = family.launch
    # By thread name: an ident is reused once its thread ends, and these may run one after another.
    monkeypatch.setattr(family, "launch", lambda *a, **k: (launches.append(threading.current_thread().name), real(*a, **k)))
    A = torch.randn(64, 3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    results, errors = [], []

    def work(backend):
        try:
            with LA.use_backend(backend):
                for _ in range(20):
                    results.append(LA.inv(A))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(b,), name=f"{b} {k}") for k, b in enumerate(("opencl", "opencl", "torch"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert launches.count("torch 2") == 0 and len(launches) == 40
    for X in results:
        torch.testing.assert_close(X, torch.linalg.inv(A))


def run_module(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=600)


def test_info_command():
    done = run_module("mpslinalg", "info")
    assert done.returncode == 0, done.stderr
    for name in ("metal", "cuda", "opencl"):
        assert re.search(rf"^  {name}\s+(usable|not usable: .+)$", done.stdout, re.MULTILINE)


def test_check_command_passes():
    done = run_module("mpslinalg", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["function", "dtype", "shape", "via", "ratio", "<", "thresh", "result", "time", "ms"]
    for function in ("inv_ex", "det", "solve_triangular", "tril_inverse", "solve_tril"):
        assert any(re.match(rf"{function}\s+(float32|complex64)\s", line) for line in lines), function
    assert re.fullmatch(r"\d+ passed, 0 failed: mpslinalg's kernels on the \w+ runtime.*", lines[-1])


def test_check_quick_filters_and_streams():
    """``check --quick -k PATTERN``: the header first, only the functions named by the
    pattern, a family's first case each; --help in plain words."""
    done = run_module("mpslinalg", "check", "--quick", "-k", "cholesky")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[:2] == ["function", "dtype"]
    functions = {line.split()[0] for line in lines[2:-1]}
    assert functions == {"cholesky", "cholesky_solve", "cholesky_inverse"}
    assert all(" 1000x3x3" in line for line in lines[2:-1]), "the first case alone"
    assert re.fullmatch(r"\d+ passed, 0 failed: .+", lines[-1])
    assert run_module("mpslinalg", "check", "-k", "no such function").returncode == 1
    usage = run_module("mpslinalg", "--help").stdout
    assert "info" in usage and "``" not in usage


def test_check_kernels_command_passes_every_instance():
    """``check --kernels`` on the best runtime here (OpenCL in CI): a row for every
    instance the runtime can launch, each compiled and run against SciPy, all passing."""
    require("opencl")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "mpslinalg", "check", "--kernels"], capture_output=True, text=True, env=env, timeout=3000)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    runtime = RUNTIMES[lines[0].split(" kernel check on ")[1].split()[0]]
    header = lines.index(next(line for line in lines if line.startswith("kernel ")))
    rows = [line.split() for line in lines[header + 1 : -1]]
    assert sorted(row[1] for row in rows) == sorted(i.host_name for i in runtime.instances())
    assert all(row[3] == "pass" and int(row[4]) > 0 for row in rows)
    assert lines[-1] == f"{len(rows)} of {len(rows)} instances passed"


def test_check_kernels_reports_what_failed(monkeypatch):
    """An instance that does not compile, one that a failing call launched and one that no
    call launched are each a failing row with the reason; the others pass."""
    require("opencl")
    from mpslinalg import check
    from mpslinalg.inverse import DET_SMALL

    runtime = RUNTIMES["opencl"]
    instances = [INVERSE_SMALL.instance(torch.float64, N=n) for n in (1, 2, 3)] + [DET_SMALL.instance(torch.float64, N=n) for n in (2, 3)]
    real_compile = runtime._compile

    def compile(instance, device):
        if instance.host_name == "inverse_small_float64_n3":
            raise SyntaxError("planted")
        return real_compile(instance, device)

    def battery(device, dtype):
        A = torch.eye(2, dtype=dtype).expand(3, 2, 2) * 2
        yield "inv_ex", "3x1x1", lambda: float(LA.inv_ex(torch.ones(3, 1, 1, dtype=dtype)).inverse.sum()) / 3
        yield "inv_ex", "3x2x2", lambda: float(LA.inv_ex(A).inverse.sum())  # 3.0: below THRESHOLD
        yield "det", "3x2x2 wrong", lambda: 1e3 + float(LA.det(A).sum())  # a failing ratio, 1012
        yield "inv_ex", "3x3x3", lambda: float(LA.inv_ex(torch.eye(3, dtype=dtype).expand(3, 3, 3)).inverse.sum())

    monkeypatch.setattr(runtime, "_compiled", {})
    monkeypatch.setattr(runtime, "_compile", compile)
    monkeypatch.setattr(runtime, "instances", lambda: instances)
    monkeypatch.setattr(check, "kernel_battery", battery)
    with LA.use_backend("opencl"):
        rows = {row.instance: row for row in check.check_kernels(runtime, torch.device("cpu"), (torch.float64,), progress=open(os.devnull, "w"))}
    assert [rows[i.host_name].status for i in instances] == ["pass", "pass", "FAIL", "FAIL", "not run"]
    assert rows["inverse_small_float64_n3"].error == "SyntaxError while compiling: planted" and rows["inverse_small_float64_n3"].calls == 0
    assert rows["det_small_float64_n2"].error == "det float64 3x2x2 wrong: ratio 1.01e+03"
    assert rows["inverse_small_float64_n2"].worst == 3.0 and rows["inverse_small_float64_n1"].calls == 1


def test_bench_command_writes_table_and_json(tmp_path):
    require("opencl")
    done = run_module("mpslinalg.bench", "inv", "--batch", "256", "--json", str(tmp_path / "b.json"), "--markdown", str(tmp_path / "b.md"))
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "b.md").read_text()
    assert table.startswith("# mpslinalg") and "\n## inv\n" in table and "## lu" not in table
    assert "| 256 x 4x4 float32 | mpslinalg.inv_ex |" in table and "torch.linalg.inv" in table
    assert ("kornia inverse_transformation" in table) == (importlib.util.find_spec("kornia") is not None)
    assert '"implementation": "mpslinalg.det"' in (tmp_path / "b.json").read_text()
    progress = done.stderr.splitlines()
    assert len(progress) == 4 and progress[-1].endswith("inv 256 x 4x4 float32 rigid poses"), done.stderr


def test_bench_merges_runs_and_defaults_to_every_family(tmp_path, monkeypatch):
    from mpslinalg import bench

    runs = []
    for family in ("inv", "svd"):
        result = bench.Result(family, f"{family} case", f"mpslinalg.{family}", 1e-3, 10**6)
        bench.write([result], f"# header\n\n{family} run", None, None, str(tmp_path / f"{family}.json"))
        runs.append(str(tmp_path / f"{family}.json"))
    assert bench.main(["--merge", *runs, "--markdown", str(tmp_path / "report.md")]) == 0
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# header\n\ninv run") and "Runs: inv on inv run; svd on svd run." in report
    assert "## inv" in report and "## svd" in report and "| svd case | mpslinalg.svd |  | 1.0000 |" in report
    # A merged report merged again with a new run keeps each earlier run's setting.
    bench.main(["--merge", *runs, "--json", str(tmp_path / "merged.json")])
    bench.write([bench.Result("eig", "eig case", "mpslinalg.eig", 1e-3, 10**6)], "# header\n\neig run", None, None, str(tmp_path / "eig.json"))
    assert bench.main(["--merge", str(tmp_path / "merged.json"), str(tmp_path / "eig.json"), "--markdown", str(tmp_path / "again.md")]) == 0
    assert "Runs: inv on inv run; svd on svd run; eig on eig run." in (tmp_path / "again.md").read_text()
    ran = []
    monkeypatch.setattr(bench, "FAMILIES", {name: (lambda device, batch, name=name: ran.append(name) or []) for name in ("a", "b")})
    assert bench.main([]) == 0 and ran == ["a", "b"]
    with pytest.raises(SystemExit):
        bench.main(["c"])


def test_bench_plot_writes_the_performance_page_and_its_figures(tmp_path):
    """--plot: per family a figure and a table with the ratios first; the cases where
    torch.linalg is faster listed apart; the families not measured named."""
    from mpslinalg import bench

    rows = [("mpslinalg.inv_ex", 1e-3), ("mpslinalg.inv_ex (graph)", 5e-4), ("torch.linalg.inv_ex", 4e-3),
            ("torch.linalg.inv_ex (graph)", 4e-3), ("cupy.linalg.inv", 2e-3)]
    results = [bench.Result("inv", "1000 x 4x4 float32", name, seconds, 10**6) for name, seconds in rows]
    results.append(bench.Result("svd", "1024x1024 float32", "mpslinalg.svd", 2.0, 10**6))
    results.append(bench.Result("svd", "1024x1024 float32", "torch.linalg.svd", 0.05, 10**6))
    bench.write(results, "# mpslinalg benchmark\n\nSome GPU via cuda; 2026-12-05. Time per call", 1e12, None, str(tmp_path / "b.json"))
    assert bench.main(["--plot", str(tmp_path / "b.json"), "--page", str(tmp_path / "perf.md")]) == 0
    page = (tmp_path / "perf.md").read_text()
    assert page.index("## Plots") < page.index("## Runs") < page.index("## inv")  # summary and plots first
    assert "faster in 1 of 2 measured cases" in page
    assert "| [inv](#inv) | Some GPU | 1 | 1 | 4x | 4x (1000 x 4x4 float32) |" in page
    assert "| inv, svd | Some GPU | 2026-12-05 | cuda |" in page
    assert "| 1000 x 4x4 float32 | `inv_ex` | 4x | 8x | 1 | 0% | cupy.linalg.inv 2 ms |" in page
    assert "| `svd` | 1024x1024 float32 | 0.025x | 2,000 | 50 |" in page  # torch is faster; no exponents
    assert "Not measured on a GPU yet: triangular, lu, qr, cholesky, eigh, eig, matrix_exp, large." in page
    for family in ("inv", "svd"):
        assert f"](perf/{family}.svg)" in page and (tmp_path / "perf" / f"{family}.svg").read_text().startswith("<?xml")


def test_performance_page_is_generated_from_the_report():
    """docs/performance.md is what --plot makes of docs/benchmark-report.json (its figures
    beside it), not a hand-written table."""
    from mpslinalg import bench

    docs = pathlib.Path(__file__).parent.parent / "docs"
    (run,), results = bench.load([str(docs / "benchmark-report.json")])
    assert (docs / "performance.md").read_text() == bench.performance_page(results, run["header"], run["peak"], "performance",
                                                                           run.get("runs"))
    for family in dict.fromkeys(c.family for c in bench.comparisons(results)):  # the families the page shows
        assert (docs / "performance" / f"{family}.svg").exists()


def test_eager_calls_skip_the_custom_op_only_when_nothing_needs_it():
    from torch.utils._python_dispatch import TorchDispatchMode

    x = torch.ones(2, 2)
    assert _dispatch._plain((x, 3))
    assert not _dispatch._plain((x.requires_grad_(),))
    with torch.no_grad():
        assert _dispatch._plain((x,))

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Mode():
        assert not _dispatch._plain((x,))
    seen = []
    torch.func.vmap(lambda row: seen.append(_dispatch._plain((row,))) or row)(torch.ones(3, 2))
    assert seen == [False]



def test_opencl_threadgroup_limit_before_any_launch():
    # fits() may be the first thing a runtime is asked: it must set itself up.
    require("opencl")
    from mpslinalg.runtimes.opencl import OpenCLRuntime

    fresh = OpenCLRuntime()
    instance = LU_FACTOR_PANEL.instance(torch.float32, GROUP=1024, ROWS=1)
    assert fresh.usable(instance, torch.device("cpu"))


def test_ptx_cache_writes_whole_files_and_leaves_no_partial_one(tmp_path, monkeypatch):
    from mpslinalg.runtimes import cuda

    target = tmp_path / "cuda" / "kernel.ptx"
    cuda._write_whole(target, b"first")
    cuda._write_whole(target, b"second")
    assert target.read_bytes() == b"second" and [p.name for p in target.parent.iterdir()] == ["kernel.ptx"]

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cuda.os, "replace", full_disk)
    with pytest.raises(OSError):
        cuda._write_whole(target, b"third")
    assert target.read_bytes() == b"second" and [p.name for p in target.parent.iterdir()] == ["kernel.ptx"]
    monkeypatch.setenv("MPSLINALG_CACHE_DIR", str(tmp_path))
    assert cuda._cache_dir() == tmp_path / "cuda"


def test_kernel_sources_found_without_the_metal_subpackage(monkeypatch):
    """A checkout imported from its root (or an editable install made without setuptools'
    finder) has no ``mpslinalg.metal``: the sources come from ``metal/`` beside the
    package, not a failed compile on every kernel (which fell back to torch)."""
    from mpslinalg import _kernel

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(_kernel.resources, "files", missing)
    _kernel._metal_sources.cache_clear()
    _kernel.metal_file.cache_clear()
    try:
        assert "eigh_pairs" in _kernel.metal_file("eigh.metal")
    finally:
        monkeypatch.undo()
        _kernel._metal_sources.cache_clear()
        _kernel.metal_file.cache_clear()
