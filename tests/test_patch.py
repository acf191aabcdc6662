"""mpslinalg.patch_torch: torch's linear algebra routed to mpslinalg for code we do not
own (kornia), restored exactly, nested safely, and TorchScript's view of torch kept."""

from unittest import mock

import pytest
import torch

import mpslinalg as LA
import mpslinalg.patch as patch_module
from conftest import require
from mpslinalg import runtimes

kornia = pytest.importorskip("kornia")
import kornia.geometry as KG  # noqa: E402
from kornia.core.utils import _torch_svd_cast  # noqa: E402  (kornia scripts it, via zca_mean)

CPU = torch.device("cpu")


def torch_attributes() -> dict:
    """(owner, name) -> (the attribute, whether the owner's own __dict__ holds it) for
    everything patch_torch may replace."""
    names = [(torch.linalg, n) for n in dir(torch.linalg)]
    names += [(torch, n) for n in patch_module._TORCH_FUNCTIONS]
    names += [(torch.Tensor, n) for n in patch_module._TENSOR_METHODS if hasattr(torch.Tensor, n)]
    return {(owner, name): (getattr(owner, name), name in vars(owner)) for owner, name in names}


class Launches:
    """Counts mpslinalg's kernel launches on the CPU's OpenCL runtime, as test_launches."""

    def __init__(self):
        self.count = 0

    def __enter__(self):
        runtime = runtimes.for_device(CPU)
        launch = runtime.launch

        def counted(*args, **kwargs):
            self.count += 1
            return launch(*args, **kwargs)

        self._patcher = mock.patch.object(runtime, "launch", counted)
        self._patcher.start()
        return self

    def __exit__(self, *exc_info):
        self._patcher.stop()


@pytest.fixture(autouse=True)
def nothing_left_patched():
    """A failed test must not leave torch patched for the next one."""
    before = torch_attributes()
    yield
    LA.unpatch_torch()
    assert torch_attributes() == before


def test_patch_replaces_every_name_and_restore_puts_back_the_originals():
    before = torch_attributes()
    handle = LA.patch_torch()
    try:
        linalg_names = {n for n in LA.__all__ if hasattr(torch.linalg, n)}
        assert len(linalg_names) >= 20
        for name in linalg_names:
            assert getattr(torch.linalg, name).replaces is before[(torch.linalg, name)][0], name
        for name in patch_module._TORCH_FUNCTIONS:
            assert getattr(torch, name).replaces is before[(torch, name)][0], name
        for name in set(patch_module._TENSOR_METHODS) - {"lu_unpack"}:  # torch has no Tensor.lu_unpack
            assert getattr(torch.Tensor, name).replaces is before[(torch.Tensor, name)][0], name
        untouched = [key for key in before if hasattr(torch.linalg, key[1]) and key[0] is torch.linalg
                     and key[1] not in linalg_names]
        assert untouched and all(getattr(o, n) is before[(o, n)][0] for o, n in untouched)  # e.g. LinAlgError, common_notes
        assert handle.active
    finally:
        handle.restore()
    assert not handle.active
    after = torch_attributes()
    for key, (original, own) in before.items():
        assert after[key][0] is original, key
        assert after[key][1] == own, key  # Tensor methods are TensorBase's again, not copies in Tensor's __dict__
    handle.restore()  # a second restore does nothing
    assert torch_attributes() == before


def test_context_manager_restores_on_exception():
    before = torch_attributes()
    with pytest.raises(ZeroDivisionError):
        with LA.patch_torch() as handle:
            assert torch.linalg.svd is not before[(torch.linalg, "svd")][0]
            1 / 0
    assert not handle.active and torch_attributes() == before


def test_patch_inside_patch():
    before = torch_attributes()
    original_inv = before[(torch.linalg, "inv")][0]
    A = torch.randn(3, 4, 4) + 4 * torch.eye(4)
    with LA.patch_torch():
        outer_inv = torch.linalg.inv
        with LA.patch_torch():
            assert torch.linalg.inv.replaces is outer_inv
            with LA.use_backend("opencl"), Launches() as launches:
                torch.testing.assert_close(torch.linalg.inv(A), original_inv(A))  # no recursion through the outer one
            assert launches.count > 0
        assert torch.linalg.inv is outer_inv  # the inner restore puts the outer patch back
    assert torch_attributes() == before
    # Restoring the outer handle first restores the inner one with it; unpatch_torch restores all.
    outer = LA.patch_torch()
    inner = LA.patch_torch()
    outer.restore()
    assert not inner.active and torch_attributes() == before
    LA.patch_torch(), LA.patch_torch()
    LA.unpatch_torch()
    assert torch_attributes() == before


def test_fallbacks_call_torchs_own_functions_under_the_patch():
    # CPU tensors without the OpenCL backend, and float16 on it: mpslinalg hands them to
    # torch's implementations bound at import, not to the (patched) torch.linalg.
    A = torch.randn(2, 5, 5, dtype=torch.float64) + 5 * torch.eye(5, dtype=torch.float64)
    expected = (torch.linalg.inv(A), torch.linalg.svd(A).S, torch.det(A), torch.slogdet(A).logabsdet)
    with LA.patch_torch():
        got = (torch.linalg.inv(A), torch.linalg.svd(A).S, torch.det(A), torch.slogdet(A).logabsdet)
        with LA.use_backend("opencl"), pytest.raises(RuntimeError) as error:
            torch.linalg.cholesky(A.half())
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    with pytest.raises(RuntimeError) as unpatched_error:
        torch.linalg.cholesky(A.half())
    assert str(error.value) == str(unpatched_error.value)


def spd(*shape):
    A = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    return A @ A.mT + shape[-1] * torch.eye(shape[-1])


# torch's names outside torch.linalg and the Tensor methods: name -> f() on float32 batches.
A5, B5, S5 = spd(3, 5, 5) - 2 * torch.eye(5), torch.randn(3, 5, 2), spd(3, 5, 5)
QR_REFLECTORS = torch.geqrf(A5)
TORCH_CALLS = {
    "torch.inverse": lambda: torch.inverse(A5),
    "Tensor.inverse": lambda: A5.inverse(),
    "torch.det": lambda: torch.det(A5),
    "Tensor.det": lambda: A5.det(),
    "torch.slogdet": lambda: torch.slogdet(A5),
    "Tensor.slogdet": lambda: A5.slogdet(),
    "torch.logdet": lambda: torch.logdet(S5),
    "Tensor.logdet": lambda: S5.logdet(),
    "torch.lu_unpack": lambda: torch.lu_unpack(*torch.linalg.lu_factor(A5)),
    "torch.cholesky_solve": lambda: torch.cholesky_solve(B5, torch.linalg.cholesky(S5)),
    "Tensor.cholesky_solve": lambda: B5.cholesky_solve(torch.linalg.cholesky(S5)),
    "torch.cholesky_inverse": lambda: torch.cholesky_inverse(torch.linalg.cholesky(S5)),
    "Tensor.cholesky_inverse": lambda: torch.linalg.cholesky(S5).cholesky_inverse(),
    "torch.geqrf": lambda: torch.geqrf(A5),
    "Tensor.geqrf": lambda: A5.geqrf(),
    "torch.ormqr": lambda: torch.ormqr(*QR_REFLECTORS, B5),
    "Tensor.ormqr": lambda: QR_REFLECTORS[0].ormqr(QR_REFLECTORS[1], B5),
    "torch.orgqr": lambda: torch.orgqr(*QR_REFLECTORS),
    "Tensor.orgqr": lambda: QR_REFLECTORS[0].orgqr(QR_REFLECTORS[1]),
    "torch.matrix_exp": lambda: torch.matrix_exp(A5 / 8),
    "Tensor.matrix_exp": lambda: (A5 / 8).matrix_exp(),
    "torch.matrix_power": lambda: torch.matrix_power(A5, -2),  # n < 0 runs mpslinalg's inv
    "Tensor.matrix_power": lambda: A5.matrix_power(-2),
    "torch.linalg.inv_ex": lambda: torch.linalg.inv_ex(A5),
    "torch.linalg.eigh": lambda: torch.linalg.eigh(S5).eigenvalues,
}


def run(call, patched: bool):
    """(the result, mpslinalg's launches) of ``call`` on the OpenCL backend, with or without the patch."""
    with LA.use_backend("opencl"), Launches() as launches:
        if not patched:
            return call(), launches.count
        with LA.patch_torch():
            return call(), launches.count


def assert_float32_close(got, expected):
    as_tuple = lambda result: (result,) if isinstance(result, torch.Tensor) else tuple(result)
    got, expected = as_tuple(got), as_tuple(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        if e.is_floating_point():
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4 * max(e.abs().max().item(), 1.0))
        else:
            assert torch.equal(g, e)


@pytest.mark.parametrize("name", sorted(TORCH_CALLS))
def test_torch_functions_and_tensor_methods_run_on_mpslinalg(name):
    require("opencl")
    expected, unpatched_launches = run(TORCH_CALLS[name], patched=False)
    got, launches = run(TORCH_CALLS[name], patched=True)
    assert unpatched_launches == 0 and launches > 0
    assert type(got) is type(expected)  # torch.return_types.slogdet from torch.slogdet, as torch's
    assert_float32_close(got, expected)


def test_gradients_through_the_patch():
    require("opencl")
    A = A5.clone().requires_grad_()
    expected = torch.autograd.grad(A.inverse().sum() + torch.det(A).sum(), A)[0]
    with LA.use_backend("opencl"), LA.patch_torch(), Launches() as launches:
        got = torch.autograd.grad(A.inverse().sum() + torch.det(A).sum(), A)[0]
    assert launches.count > 0
    assert_float32_close(got, expected)


def test_torch_compile_traces_into_the_replacements():
    require("opencl")
    torch._dynamo.reset()
    A = A5.clone()
    expected = torch.linalg.inv(A) + A.inverse() + torch.det(A)[:, None, None]
    with LA.use_backend("opencl"), LA.patch_torch(), Launches() as launches:
        compiled = torch.compile(lambda A: torch.linalg.inv(A) + A.inverse() + torch.det(A)[:, None, None],
                                 fullgraph=True, backend="aot_eager")
        got = compiled(A)
    torch._dynamo.reset()  # the compiled code holds the replacements
    assert launches.count > 0
    assert_float32_close(got, expected)


# --- kornia: geometry that calls torch.linalg itself ---


def two_views(batch=4, points=20):
    """Points seen by two cameras (K [I | 0] and K [R | t]), float32: their correspondences
    and the second camera's projection matrix."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(batch, points, 3, generator=g) + torch.tensor([0.0, 0.0, 6.0])  # in front of both cameras
    K = torch.tensor([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]]).expand(batch, 3, 3)
    R = KG.conversions.axis_angle_to_rotation_matrix(0.2 * torch.randn(batch, 3, generator=g))
    t = torch.randn(batch, 3, 1, generator=g)
    P2 = KG.epipolar.projection_from_KRt(K, R, t)
    x1 = KG.conversions.convert_points_from_homogeneous(X @ K.mT)
    x2 = KG.conversions.convert_points_from_homogeneous(X @ P2[:, :3, :3].mT + P2[:, None, :3, 3])
    return X, K, x1, x2, P2


def homography_pairs(batch=4, points=8):
    g = torch.Generator().manual_seed(2)
    p1 = torch.rand(batch, points, 2, generator=g)
    H = torch.eye(3) + 0.1 * torch.randn(batch, 3, 3, generator=g)
    return p1, KG.linalg.transform_points(H, p1) + 1e-3 * torch.randn(batch, points, 2, generator=g)


def unit_scale(F):
    """F up to its scale and sign, which the 8-point algorithm leaves free."""
    F = F / F.flatten(1).norm(dim=1)[:, None, None]
    return F * F[:, 2:3, 2:3].sign()


X3, K3, X1, X2, P2 = two_views()
H1, H2 = homography_pairs()
IMAGE = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
KORNIA_CALLS = {
    # torch.linalg.svd (kornia's _torch_svd_cast, in float64)
    "find_homography_dlt(svd)": lambda: KG.homography.find_homography_dlt(H1, H2, solver="svd"),
    # torch.linalg.lu_factor_ex, solve_ex
    "find_homography_dlt(lu)": lambda: KG.homography.find_homography_dlt(H1, H2, solver="lu"),
    # svd, det
    "find_fundamental(8POINT)": lambda: unit_scale(KG.epipolar.find_fundamental(X1, X2, method="8POINT")),
    # torch.linalg.qr and solve
    "KRt_from_projection": lambda: KG.epipolar.KRt_from_projection(P2),
    # torch.inverse, svd, qr
    "solve_pnp_dlt": lambda: KG.calibration.solve_pnp_dlt(X3, X2, K3),
    # torch.linalg.solve of a 3 x 3 system per pixel
    "guided_blur": lambda: kornia.filters.guided_blur(IMAGE, IMAGE.flip(1), 3, 0.01),
}


@pytest.mark.parametrize("name", sorted(KORNIA_CALLS))
def test_kornia_runs_on_mpslinalg_under_the_patch(name):
    require("opencl")
    expected, unpatched_launches = run(KORNIA_CALLS[name], patched=False)
    got, launches = run(KORNIA_CALLS[name], patched=True)
    assert unpatched_launches == 0, "mpslinalg ran without the patch"
    assert launches > 0, "kornia's torch.linalg calls did not reach mpslinalg"
    assert_float32_close(got, expected)


# --- TorchScript: scripted callers see torch's ops ---


def linalg_calls(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    inverse, info = torch.linalg.inv_ex(A)
    U, S, Vh = torch.linalg.svd(A)
    return inverse + torch.linalg.solve(A, B).sum() + S.sum() + torch.inverse(A) + torch.det(A).sum()


SCRIPTED_BEFORE_THE_PATCH = torch.jit.script(linalg_calls)


def test_torchscript_before_and_under_the_patch():
    require("opencl")
    A, B = A5, B5
    expected = linalg_calls(A, B)
    with LA.use_backend("opencl"), LA.patch_torch(), Launches() as launches:
        scripted = torch.jit.script(linalg_calls)  # would raise NotSupportedError on mpslinalg's keyword-only args
        got_after, got_before = scripted(A, B), SCRIPTED_BEFORE_THE_PATCH(A, B)
        svd_cast = torch.jit.script(_torch_svd_cast)  # kornia's own scripted helper
        S = svd_cast(A)[1]
    assert launches.count == 0  # scripted code runs torch's aten ops, as unpatched
    graph = str(scripted.graph)
    assert all(f"aten::{op}(" in graph for op in ("linalg_inv_ex", "linalg_svd", "linalg_solve")), graph
    torch.testing.assert_close(got_after, expected, rtol=0, atol=0)
    torch.testing.assert_close(got_before, expected, rtol=0, atol=0)
    torch.testing.assert_close(S, torch.linalg.svdvals(A), rtol=1e-5, atol=1e-5)


def test_restore_removes_the_torchscript_entries():
    table = torch.jit._builtins._get_builtin_table()
    size = len(table)
    with LA.patch_torch():
        replacement = torch.linalg.inv_ex
        assert torch.jit._builtins._find_builtin(replacement) == "aten::linalg_inv_ex"
        assert torch.jit._builtins._find_builtin(torch.det) == "aten::det"  # torch.det's op, not linalg_det's
        assert torch.jit._builtins._find_builtin(torch.linalg.det) == "aten::linalg_det"
    assert len(table) == size and torch.jit._builtins._find_builtin(replacement) is None
