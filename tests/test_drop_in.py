"""mpslinalg put in torch.linalg's place, the obvious way (``torch.linalg.qr = LA.qr``):
every function, on every route, gives what it gives unpatched (no RecursionError from a
fallback or an argument check that looks torch.linalg up at call time), forward and
backward."""

import pytest
import torch

import mpslinalg as LA
from conftest import require
from test_hardening import CALLS, NOT_DIFFERENTIABLE, inputs

# torch's names for mpslinalg's functions outside torch.linalg.
TORCH_NAMESPACE = ("geqrf", "ormqr", "logdet", "lu_unpack", "cholesky_solve", "cholesky_inverse")
# route -> (the backend CPU tensors take, the device, the dtype)
ROUTES = {
    "kernels": ("opencl", "cpu", torch.float32),
    "torch.linalg": ("torch", "cpu", torch.float32),
    "meta": ("opencl", "meta", torch.float32),
    "float16": ("opencl", "cpu", torch.float16),  # no kernels: torch.linalg's result or error
}


def patch_torch_linalg(monkeypatch) -> list[str]:
    patched = []
    for name in LA.__all__:
        for namespace in (torch.linalg, torch) if name in TORCH_NAMESPACE else (torch.linalg,):
            if hasattr(namespace, name):
                monkeypatch.setattr(namespace, name, getattr(LA, name))
                patched.append(name)
    return patched


def outcome(name: str, route: str):
    """The function's outputs and gradient on the route, or the type of its error."""
    backend, device, dtype = ROUTES[route]
    A, B = inputs("cpu")
    A, B = A.to(device, dtype), B.to(device, dtype)
    differentiable = name not in NOT_DIFFERENTIABLE and route in ("kernels", "torch.linalg")
    A.requires_grad_(differentiable)
    try:
        with LA.use_backend(backend):
            result = CALLS[name](A, B)
            grad = torch.autograd.grad(result.sum(), A)[0] if differentiable else None
    except RecursionError:
        raise
    except Exception as error:  # torch's own error for what it does not support
        return type(error)
    return result.detach(), grad


def test_every_exported_torch_name_is_patched(monkeypatch):
    patched = patch_torch_linalg(monkeypatch)
    expected = {n for n in LA.__all__ if hasattr(torch.linalg, n) or (n in TORCH_NAMESPACE and hasattr(torch, n))}
    assert set(patched) == expected and len(expected) >= 20


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_function_with_torch_linalg_patched(monkeypatch, name, route):
    if ROUTES[route][0] == "opencl":
        require("opencl")
    expected = outcome(name, route)
    patch_torch_linalg(monkeypatch)
    got = outcome(name, route)
    if isinstance(expected, type):
        assert got is expected
        return
    (result, grad), (expected_result, expected_grad) = got, expected
    if route == "meta":
        assert result.shape == expected_result.shape and result.dtype == expected_result.dtype
        return
    # torch's CPU lstsq (gelsy) before pytorch/pytorch#187436 leaves its pivot array
    # uninitialised: two calls may differ in the last bits (torch 2.7.1 does).
    exact = {} if (name, route) == ("lstsq", "torch.linalg") else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(result, expected_result, **exact)
    if grad is not None or expected_grad is not None:
        torch.testing.assert_close(grad, expected_grad, rtol=0, atol=0)
