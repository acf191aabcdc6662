"""DTensor sharding rules for mpslinalg's custom ops: a batch of matrices sharded over a
device mesh is decomposed where it lies, with no communication.

Every op takes batches of matrices (vectors, for tau and pivots) in its trailing dims and
treats each batch element alone, so a shard on a batch dim is a shard of independent
problems: the outputs' batch dims keep it. A shard on a matrix dim cannot stay (a
factorization reads the whole matrix): its only rule is Replicate everywhere, and
DTensor gathers such an input first (an all-gather of it, the documented cost).

The rules are registered the first time a DTensor reaches ``_dispatch.call``
(``ensure_registered``): importing DTensor costs about half a second, which a user
without it should not pay.
"""

from __future__ import annotations

import functools
import threading

import torch

# op -> the trailing (core) dims of each argument: a matrix 2, a vector 1, None for an
# argument that is not a batched tensor (flags, and pinv's tolerances, which are
# replicated). An output's batch dims are found from the op's fake implementation:
# those whose leading dims are the inputs' batch (an empty placeholder output has none).
CORE_DIMS = {
    "cholesky_ex": (2, None, None),
    "cholesky_inverse": (2, None),
    "cholesky_solve": (2, 2, None),
    "det_lu": (2,),
    "det_small": (2,),
    "eig": (2, None),
    "eigh": (2, None),
    "eigvalsh": (2, None),
    "geqrf": (2,),
    "householder_product": (2, 1),
    "inv_small_ex": (2, None),
    "lu_factor_ex": (2, None, None),
    "lu_permutation": (1, None),
    "lu_solve_small": (2, 1, 2, None, None),
    "matrix_exp": (2,),
    "pinv": (2, None, None),
    "qr": (2, None),
    "slogdet": (2,),
    "solve_small": (2, 2, None, None),
    "solve_triangular": (2, 2, None, None, None),
    # FLA's layout [B, T, H, BT]: the sequences B are independent, unless a chunk table
    # (cu_seqlens) indexes rows of one packed sequence (then replicated: see the rule).
    "solve_tril": (3, None),
    "svd": (2, None),
    "tril_inverse": (2, None),
}

_lock = threading.Lock()
_registered = False


def is_dtensor(t: object) -> bool:
    """Whether ``t`` is a DTensor, without importing DTensor (see the module's docstring)."""
    return type(t).__name__ == "DTensor" and type(t).__module__.startswith("torch.distributed")


def _batch_rule(op_name: str):
    """The acceptable (outputs, inputs) placements of ``op_name`` for register_sharding."""
    from torch.distributed.tensor import Replicate, Shard

    core_dims = CORE_DIMS[op_name]
    op = getattr(torch.ops.mpslinalg, op_name).default

    def rule(*args):
        specs = [(a, c) for a, c in zip(args, core_dims) if c is not None and a is not None]
        outputs = len(op._schema.returns)
        replicate_inputs = [Replicate() if hasattr(a, "placements") else None for a in args]
        rules = [([Replicate()] * outputs, replicate_inputs)]
        batch_dims = {a.ndim - c for a, c in specs}
        if len(batch_dims) != 1 or (batch := batch_dims.pop()) < 1:
            return rules
        shapes = [tuple(a.shape) for a, _ in specs]
        if op_name == "solve_tril" and args[1].shape[0]:
            return rules  # a chunk table addresses rows of the whole packed sequence
        # The outputs' shapes, from the op's fake implementation on meta tensors.
        meta = [torch.empty(a.shape, dtype=a.tensor_meta.dtype, device="meta") if hasattr(a, "placements") else a
                for a in args]
        results = op(*meta)
        results = results if isinstance(results, tuple) else (results,)
        for d in range(batch):
            if len({s[d] for s in shapes}) != 1:
                continue  # broadcast along d: its shards would not line up
            size = shapes[0][d]
            out_placements = [Shard(d) if r.dim() > d and r.shape[:batch] == shapes[0][:batch] else Replicate()
                              for r in results]
            in_placements = [(Shard(d) if c is not None else Replicate()) if hasattr(a, "placements") else None
                             for a, c in zip(args, core_dims)]
            if size:
                rules.append((out_placements, in_placements))
        return rules

    return op, rule


def with_replicated_tensors(args: tuple) -> tuple:
    """``args`` with every plain tensor beside a DTensor made a replicated DTensor on its
    mesh (the small tensors the public functions make: pinv's tolerances, solve_tril's
    chunk table), which DTensor will not mix with its own."""
    from torch.distributed.tensor import DTensor, Replicate

    mesh = next(a.device_mesh for a in args if is_dtensor(a))
    return tuple(DTensor.from_local(a, mesh, [Replicate()] * mesh.ndim, run_check=False)
                 if isinstance(a, torch.Tensor) and not is_dtensor(a) else a for a in args)


def mixable(function):
    """``function`` (a public function, or an op's backward) run under DTensor's implicit
    replication where a DTensor is among its arguments: the plain tensors it makes from
    global shapes (identities, masks, index ranges) then meet the DTensors as replicated
    ones, which they are. Without a DTensor, one check of the arguments and the call."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if not any(map(is_dtensor, args)) and not any(map(is_dtensor, kwargs.values())):
            return function(*args, **kwargs)
        from torch.distributed.tensor.experimental import implicit_replication

        with implicit_replication():
            return function(*args, **kwargs)

    return wrapper


def on_local_shards(function):
    """``function`` of tensors, the first a batch laid out as its result will be (an op's
    backward whose work is per batch element but takes ops DTensor has no rule for, such
    as index_put): on DTensors, run on each rank's shard (the other DTensors laid out as
    the first first) and the result put together as the first is."""

    @functools.wraps(function)
    def wrapper(first, *others):
        if not is_dtensor(first):
            return function(first, *others)
        from torch.distributed.tensor import DTensor

        mesh, placements = first.device_mesh, first.placements
        local = [t.redistribute(mesh, placements).to_local() if is_dtensor(t) else t for t in others]
        result = function(first.to_local(), *local)
        return DTensor.from_local(result, mesh, placements, run_check=False, shape=first.shape, stride=first.stride())

    return wrapper


def expanded_like(small: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``small`` (a matrix made on the host's side, such as an identity) expanded to
    ``reference``'s shape, laid out as ``reference`` where that is a DTensor (each rank
    its shard's part), so that it can meet reference in an op."""
    if not is_dtensor(reference):
        return small.expand_as(reference)
    from torch.distributed.tensor import DTensor

    local = small.expand(reference.to_local().shape)
    return DTensor.from_local(local, reference.device_mesh, reference.placements, run_check=False,
                              shape=reference.shape, stride=reference.stride())


def ensure_registered() -> None:
    """Registers every op's rule with DTensor, once per process."""
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.experimental import register_sharding

        propagator = DTensor._op_dispatcher.sharding_propagator
        for name in CORE_DIMS:
            op, rule = _batch_rule(name)
            register_sharding(op)(rule)
            # register_sharding keys its cache on the tensors and int arguments only;
            # eig's vectors and qr's mode change the outputs' shapes, so every argument
            # is part of the key.
            schema_info = propagator.op_to_schema_info.get(op)
            if schema_info is not None:
                schema_info.static_argnum = 1
        _registered = True
