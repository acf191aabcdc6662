"""The Metal compile check: clang parses the generated Metal source of every
kernel instantiation against the MSL stub in metal_stub/ (see metal/README.md)."""

import os

import pytest

from mpslinalg._kernel import KERNELS
from mpslinalg.runtimes import RUNTIMES

try:
    import clang.cindex  # noqa: F401
except ImportError:  # the CUDA machine has no libclang; CI must
    if os.environ.get("CI"):
        raise
    pytest.skip("libclang missing", allow_module_level=True)

from metal_check import metal_errors

METAL = RUNTIMES["metal"]
INSTANCES = [i for k in KERNELS for i in k.all_instances() if i.scalar.dtype in METAL.dtypes]


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
