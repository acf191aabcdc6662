"""``patch_torch``: torch's linear algebra routed to mpslinalg, for code you do not own.

A library that calls ``torch.linalg.svd`` or ``A.inverse()`` itself (kornia, a model
zoo) cannot be edited to call ``mpslinalg.svd``; patching puts mpslinalg's functions in
torch's places, and a handle (or the ``with`` block's end) puts torch's back.

mpslinalg's own fallbacks and argument checks call torch's implementations bound at
import (``_dispatch.TORCH``), never ``torch.linalg.<name>`` looked up at call time, so a
patched torch does not make mpslinalg call itself.

TorchScript: ``torch.jit.script`` resolves a Python object that a scripted function
calls by its id in ``torch.jit._builtins``' table of builtins (``_find_builtin``); a
Python function found there is the aten op it names, anything else is compiled as
TorchScript, which mpslinalg's functions (keyword-only arguments, custom ops) are not.
Each replacement is therefore a function object of its own, entered in that table as
the aten op of the function it replaces (``aten::linalg_inv_ex`` for
``torch.linalg.inv_ex``) while the patch is active: scripted code compiled under the
patch calls torch's op, as it would unpatched, and code scripted before the patch
holds the op already. The entries are removed on restore.
"""

from __future__ import annotations

import functools
import threading

import torch
import torch.jit._builtins as _jit_builtins

import mpslinalg

# What is patched besides torch.linalg: torch's functions of these names, and the Tensor
# methods (where torch has them: Tensor.lu_unpack does not exist). ``_implementation``
# maps each to mpslinalg's function. (torch.cholesky, torch.svd, torch.lu_solve and
# torch.pinverse, torch's deprecated spellings with other signatures or results, stay
# torch's.)
_TORCH_FUNCTIONS = ("inverse", "det", "slogdet", "logdet", "lu_unpack", "cholesky_solve", "cholesky_inverse", "geqrf",
                    "ormqr", "orgqr", "matrix_exp", "matrix_power")
_TENSOR_METHODS = _TORCH_FUNCTIONS


def _slogdet(A: torch.Tensor, *, out=None):
    """mpslinalg.slogdet, as ``torch.slogdet`` returns it (torch.return_types.slogdet)."""
    return torch.return_types.slogdet(tuple(mpslinalg.slogdet(A, out=out)))


def _inverse(A: torch.Tensor, *, out=None):
    """mpslinalg.inv: ``torch.inverse`` is ``torch.linalg.inv`` under another name."""
    return mpslinalg.inv(A, out=out)


def _orgqr(A: torch.Tensor, tau: torch.Tensor, *, out=None):
    """mpslinalg.householder_product: ``torch.orgqr`` is its other name."""
    return mpslinalg.householder_product(A, tau, out=out)


def _implementation(torch_name: str):
    """mpslinalg's function for ``torch.<torch_name>`` and ``Tensor.<torch_name>``."""
    return {"inverse": _inverse, "slogdet": _slogdet, "orgqr": _orgqr}.get(torch_name) or getattr(mpslinalg, torch_name)


def _replacement(implementation, original):
    """A new function object that calls ``implementation``: one per patched attribute,
    so that each has its own id in TorchScript's table of builtins (torch.det and
    torch.linalg.det are two aten ops)."""

    @functools.wraps(implementation)
    def replacement(*args, **kwargs):
        return implementation(*args, **kwargs)

    replacement.replaces = original  # torch's function, for introspection
    return replacement


def _targets() -> list[tuple[object, str, object]]:
    """(owner, attribute, mpslinalg's implementation) of everything patch_torch replaces."""
    targets = [(torch.linalg, name, getattr(mpslinalg, name)) for name in mpslinalg.__all__ if hasattr(torch.linalg, name)]
    targets += [(torch, name, _implementation(name)) for name in _TORCH_FUNCTIONS if hasattr(torch, name)]
    targets += [(torch.Tensor, name, _implementation(name)) for name in _TENSOR_METHODS if hasattr(torch.Tensor, name)]
    return targets


_MISSING = object()  # the owner's own __dict__ had no such attribute (a Tensor method of TensorBase)
_lock = threading.RLock()
_active: list["TorchPatch"] = []  # handles in the order they were applied


class TorchPatch:
    """The handle ``patch_torch`` returns: ``restore()`` puts torch's functions back;
    as a context manager, the block's end (normal or by an exception) restores."""

    def __init__(self):
        # (owner, attribute, what the owner's __dict__ held or _MISSING, the replacement)
        self._replaced: list[tuple[object, str, object, object]] = []
        self.active = False

    def _apply(self) -> None:
        for owner, name, implementation in _targets():
            own = vars(owner).get(name, _MISSING)
            original = getattr(owner, name)
            replacement = _replacement(implementation, original)
            builtin = _jit_builtins._find_builtin(original)
            setattr(owner, name, replacement)
            if builtin is not None:
                _jit_builtins._register_builtin(replacement, builtin)
            self._replaced.append((owner, name, own, replacement))
        self.active = True

    def _undo(self) -> None:
        table = _jit_builtins._get_builtin_table()
        for owner, name, own, replacement in reversed(self._replaced):
            if own is _MISSING:
                delattr(owner, name)  # the attribute is TensorBase's again
            else:
                setattr(owner, name, own)
            table.pop(id(replacement), None)
        self._replaced.clear()
        self.active = False

    def restore(self) -> None:
        """Put back what was there before this patch; patches applied after this one,
        still active, are restored first (they replaced this one's functions). A second
        call does nothing."""
        with _lock:
            if self not in _active:
                return
            while _active:
                handle = _active.pop()
                handle._undo()
                if handle is self:
                    return

    def __enter__(self) -> "TorchPatch":
        return self

    def __exit__(self, *exc_info) -> None:
        self.restore()

    def __repr__(self) -> str:
        return f"<mpslinalg.TorchPatch {'active' if self.active else 'restored'}, {len(self._replaced)} attributes>"


def patch_torch() -> TorchPatch:
    """Routes torch's linear algebra to mpslinalg, for code that calls torch itself.

    Replaced: ``torch.linalg.<name>`` for every name mpslinalg exports that torch.linalg
    has; ``torch.inverse`` (as ``torch.linalg.inv``), ``torch.det``, ``torch.slogdet``,
    ``torch.logdet``, ``torch.lu_unpack``, ``torch.cholesky_solve``,
    ``torch.cholesky_inverse``, ``torch.geqrf``, ``torch.ormqr``, ``torch.orgqr`` (as
    ``torch.linalg.householder_product``), ``torch.matrix_exp``, ``torch.matrix_power``;
    and the Tensor methods of those names (``A.inverse()``, ``A.det()``, ...). Calls then
    take mpslinalg's route: its kernels where it has them (MPS, CUDA, CPU with the OpenCL
    backend), torch's own functions elsewhere. Functions compiled by ``torch.jit.script``
    while patched call torch's aten ops, as they would unpatched (see ``mpslinalg.patch``).

    The patch is process-wide (every thread sees it). Patching twice is safe: the
    inner handle puts the outer patch back, the outer one torch's originals
    (restoring the outer one first restores both).

    Returns:
        A ``TorchPatch``: ``.restore()`` (or ``mpslinalg.unpatch_torch()``, or the end
        of a ``with`` block) puts every original back, identical (``is``) to before.

    Example:
        >>> original = torch.linalg.inv
        >>> with LA.patch_torch():
        ...     torch.linalg.inv.replaces is original  # mpslinalg's inv in its place
        ...     torch.linalg.inv(torch.tensor([[2.0, 0.0], [0.0, 4.0]]))
        True
        tensor([[0.5000, 0.0000],
                [0.0000, 0.2500]])
        >>> torch.linalg.inv is original  # torch's own again
        True
    """
    with _lock:
        handle = TorchPatch()
        try:
            handle._apply()
        except BaseException:
            handle._undo()
            raise
        _active.append(handle)
        return handle


def unpatch_torch() -> None:
    """Restores every active ``patch_torch``: torch's own functions are back.

    Example:
        >>> handle = LA.patch_torch()
        >>> LA.unpatch_torch()
        >>> handle.active
        False
    """
    with _lock:
        if _active:
            _active[0].restore()
