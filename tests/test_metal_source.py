"""The Metal compile check: clang parses the generated Metal source of every
kernel instantiation against the MSL stub in metal_stub/ (see metal/README.md)."""

import os

import pytest

import mpslinalg  # noqa: F401  (declares every kernel)
from mpslinalg._kernel import KERNELS, metal_file
from mpslinalg.runtimes import RUNTIMES

try:
    import clang.cindex  # noqa: F401
except ImportError:  # the CUDA machine has no libclang; CI must
    if os.environ.get("CI"):
        raise
    pytest.skip("libclang missing", allow_module_level=True)

from metal_check import metal_errors

METAL = RUNTIMES["metal"]
INSTANCES = METAL.instances()


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda i: i.host_name)
def test_generated_metal_source_parses(instance):
    errors = metal_errors(METAL.source(instance), {instance.host_name})
    assert not errors, "\n".join(errors)


def entry(body: str) -> str:
    """A Metal kernel around ``body``, after the real prelude and shared header."""
    instance = INSTANCES[0]
    return METAL.source(instance) + (
        "\n[[kernel]] void planted(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        + body
        + "\n}\n"
    )


PLANTED = {
    "device pointer where threadgroup expected": (
        "void takes_threadgroup(threadgroup float* p) { p[0] = 1; }\n",
        "takes_threadgroup(out);",
        "no matching function",
    ),
    "method without address space on a device object": (
        "struct counter { float value; float get() { return value; } };\n",
        "device counter* c = reinterpret_cast<device counter*>(out); out[1] = c->get();",
        "cannot initialize object parameter",
    ),
    "name MSL does not have": ("", "out[0] = expf(1.0f);", "undeclared identifier 'expf'"),
    "double": ("", "double x = 1; out[0] = float(x);", "unknown type name 'metal_has_no_double'"),
    "lambda": ("", "auto twice = [](float x) { return 2 * x; }; out[0] = twice(out[0]);", "lambda"),
    "function pointer": (
        "METAL_FUNC float twice(float x) { return 2 * x; }\n",
        "float (*f)(float) = twice; out[0] = f(out[0]);",
        "function pointer",
    ),
    "function pointer type": ("typedef float (*unary)(float);\n", "out[0] = 1;", "function pointer"),
    "direct recursion": (
        "METAL_FUNC int depth(int n) { return n == 0 ? 0 : 1 + depth(n - 1); }\n",
        "out[0] = depth(3);",
        "recursion through depth",
    ),
    "recursion through another function in a template": (
        "template <typename R> R ping(R x);\n"
        "template <typename R> R pong(R x) { return x > R(0) ? ping(x - R(1)) : x; }\n"
        "template <typename R> R ping(R x) { return pong(x); }\n",
        "out[0] = ping(out[0]);",
        "recursion through ping",
    ),
    "goto": ("", "if (i > 0) goto done; out[0] = 1; done: out[1] = 2;", "goto"),
    "static data member outside constant": (
        "template <int N> struct tile { static const int SIZE = N * N; };\n",
        "out[0] = tile<4>::SIZE;",
        "program scope variable 'SIZE' must reside in constant address space",
    ),
    "namespace-scope variable outside constant": (
        "const float half_of = 0.5f;\n",
        "out[0] = half_of;",
        "program scope variable 'half_of' must reside in constant address space",
    ),
    "static local variable": ("", "static int calls = 0; out[0] = calls++;", "program scope variable 'calls'"),
    "non-ASCII text": ("// \u03c3 = sqrt(\u03bb)\n", "out[0] = 1;", "non-ASCII"),
    "C++ standard library header": ("#include <cmath>\n", "out[0] = 1;", "'cmath' file not found"),
    "derived class": ("struct base { float x; };\nstruct derived : base { float y; };\n", "derived d; out[0] = d.y;", "derived class"),
    "new and delete": ("", "device float* p = new float; delete p;", "dynamic allocation"),
    "dynamic_cast": ("", "(void)dynamic_cast<device float*>(out);", "dynamic_cast"),
    "type identification": ("", "(void)typeid(out);", "type identification"),
    "noexcept": ("METAL_FUNC float one() noexcept { return 1; }\n", "out[0] = one();", "noexcept"),
    "register storage": ("", "register int r = 1; out[0] = r;", "register storage"),
    "thread_local storage": ("", "thread_local int r = 1; out[0] = r;", "thread_local"),
    "a function named main": ("int main() { return 0; }\n", "out[0] = 1;", "function named main"),
    "virtual function": ("struct shape { virtual float area() { return 0; } };\n", "out[0] = 1;", "virtual function"),
    "exceptions": ("", "try { out[0] = 1; } catch (...) { out[0] = 2; }", "exceptions"),
    "error in a body called by a kernel with threadgroup arrays": (
        "template <typename T> METAL_FUNC void fill(threadgroup T* s, device T* o) { s[0] = o[0]; o[1] = undeclared(s[0]); }\n",
        "threadgroup float scratch[4]; fill<float>(scratch, out);",
        "undeclared identifier 'undeclared'",
    ),
    "pointer into another address space in a body called by a kernel with threadgroup arrays": (
        "template <typename T> METAL_FUNC void keep(thread T* p, threadgroup T* s) { s[0] = p[0]; }\n",
        "threadgroup float scratch[4]; keep<float>(scratch, scratch);",
        "no matching function",
    ),
    "SIMD-group function behind a short circuit": (
        "template <int H> METAL_FUNC float team_sum(float x) { return lanes_sum<H>(x); }\n"
        "template <int H> METAL_FUNC bool usable(float largest, bool seen) {\n"
        "  return isfinite(largest) && lanes_sum<H>(seen ? 1.0f : 0.0f) == 0.0f;\n}\n",
        "out[0] = usable<8>(out[1], out[2] > 0) ? 1 : 0;",
        "SIMD-group function behind &&",
    ),
    "threadgroup variable outside kernel scope": (
        "void helper(device float* out) { threadgroup float scratch[4]; scratch[0] = out[0]; }\n",
        "helper(out);",
        "automatic variable qualified with an address space",
    ),
}


@pytest.mark.parametrize("name", PLANTED)
def test_check_catches_planted_error(name):
    helpers, body, expected = PLANTED[name]
    source = entry(body).replace("\n[[kernel]] void planted", "\n" + helpers + "[[kernel]] void planted")
    errors = metal_errors(source, {"planted", INSTANCES[0].host_name})
    assert any(expected in e for e in errors), errors


def test_threadgroup_array_at_kernel_scope_is_accepted():
    assert metal_errors(entry("threadgroup float scratch[4]; scratch[i % 4] = out[i];"), {"planted", INSTANCES[0].host_name}) == []


def test_what_msl_allows_is_accepted():
    """Constants as MSL allows them at program scope, and complex_t copied between
    address spaces (MSL's implicit copy and assignment serve every address space)."""
    helpers = (
        "template <int N> struct tile { enum : int { SIZE = N * N }; static constant constexpr const int ROWS = N; };\n"
        "constant float half_of = 0.5f;\n"
        "template <typename T> METAL_FUNC void swap_through(threadgroup T* s, device T* o) { T x = s[0]; s[0] = o[0]; o[0] = x; }\n"
    )
    body = (
        "threadgroup complex_t<float> scratch[4]; device complex_t<float>* z = reinterpret_cast<device complex_t<float>*>(out);\n"
        "swap_through<complex_t<float>>(scratch, z); static constant constexpr const int k = 2;\n"
        "out[0] = tile<4>::SIZE + tile<4>::ROWS + half_of + k;"
    )
    source = entry(body).replace("\n[[kernel]] void planted", "\n" + helpers + "[[kernel]] void planted")
    assert metal_errors(source, {"planted", INSTANCES[0].host_name}) == []


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda i: i.host_name)
def test_instance_within_metal_limits(instance):
    """What the parse cannot see: at most 31 buffer arguments, 32 KiB of threadgroup
    memory, 1024 threads a threadgroup (a pipeline may allow fewer: runtimes.fits and
    the fallback handle that at run time) in whole SIMD groups of 32, but for kernels
    that call no SIMD-group function."""
    assert len(instance.kernel.args) <= 31
    values = dict(instance.values)
    assert instance.kernel.shared_bytes(instance.scalar.dtype, **values) <= 32 * 1024
    assert instance.group_size <= 1024
    assert instance.group_size % 32 == 0 or instance.kernel.function in WITHOUT_SIMD_FUNCTIONS


# Kernels whose threadgroup may be a part of a SIMD group (trsm_rows: a thread a row of
# 16): their bodies call no simd_* function, which the test below checks.
WITHOUT_SIMD_FUNCTIONS = {"trsm_rows"}


@pytest.mark.parametrize("function", sorted(WITHOUT_SIMD_FUNCTIONS))
def test_kernels_of_part_simd_groups_call_no_simd_function(function):
    import re

    source = metal_file(next(k.source for k in KERNELS if k.function == function))
    body = source[source.index(f"METAL_FUNC void {function}("):]
    body = body[: body.index("\n}\n") + 3]
    called = set(re.findall(r"\b(\w+)(?:<[^>]*>)?\(", body))
    assert not any(name.startswith("simd") for name in called), called
    # Helpers it calls must not either: none of them may use a SIMD-group function.
    for name in called:
        helper = re.search(rf"METAL_FUNC \w[\w<>, ]* {name}\((.|\n)*?\n}}\n", source)
        assert helper is None or "simd_" not in helper.group(0), name
