"""`trainer.parallel: fsdp`: the learner's weights, gradients and optimizer state sharded over
the learner processes with FSDP2 (`torch.distributed.fsdp.fully_shard`).

Each decoder layer (the classes a `transformers` model names in `_no_split_modules`) is one
FSDP unit, and the root (embeddings, final norm, output head, whatever is left) another: a
process holds 1/N of every parameter, of its gradient and of its AdamW moments, and gathers a
layer's full weights only while that layer runs. What the trainer needs on top of `fully_shard`:

- **Gradients are summed, not averaged.** The loss's token weights are global (each process
  backpropagates its own groups' share of the one loss), so the sum over processes is the
  gradient of the single-process loss, as in `ddp` (`set_gradient_divide_factor(1.0)`, with
  sum-only collectives).
- **Scoring runs inside the root's forward.** honed's scoring projects only completion
  positions through the output head, a chunk at a time, outside the model's own `forward`;
  with FSDP the root's parameters (the head among them) are gathered only around a forward of
  the root. The scoring function is therefore registered as a forward method of the root
  (`register_fsdp_forward_method`, `honed.models.scoring.ROOT_SCORE`), so the head's chunks
  see gathered weights and their gradients are reduced like every other.
- **Every process makes the same collective calls.** A forward gathers parameters from all
  processes, so all must run as many forwards and backwards as the others: the update pads a
  process's micro-batches with zero-weight ones up to the most any process has
  (`honed.rl.update`), and rollouts and evaluations run on gathered weights (`gathered`), where
  generation makes no collective call at all (each process generates its own groups, of
  whatever length, at its own pace).
- **Checkpoints hold full tensors.** `full_model_state` and `optimizer_state` gather the whole
  model and optimizer state onto rank 0 (`torch.distributed.checkpoint.state_dict`, the
  optimizer's keyed by parameter name), which writes the Hugging Face policy once; rank 0
  alone loads the policy whole (on the CPU) and sends every other process its shard
  (`shard`), and `load_optimizer_state` gives each its shard of the moments. A checkpoint from N processes therefore resumes on any M,
  sharded or not (the optimizer state is keyed by name in every mode).

Weights are gathered whole for generation (as TRL and verl gather them for their rollout
engines): FSDP makes a model fit whose weights fit one device but whose weights, gradients and
AdamW moments (four times as much in bfloat16, eight in float32) do not.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

from honed.errors import HonedError
from honed.models.scoring import ROOT_SCORE, causal_lm, enable_root_scoring

# Full (unsharded) tensors, gathered to rank 0's CPU: what a checkpoint holds.
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: modules of the classes its `_no_split_modules` names (the
    blocks `transformers` never splits across devices, one per layer)."""
    names = set(getattr(causal_lm(model), "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise HonedError(
            f"trainer.parallel: fsdp: {type(causal_lm(model)).__name__} does not name its "
            "decoder layer class (_no_split_modules); use trainer.parallel: ddp"
        )
    return layers


def shard(model: torch.nn.Module, device: torch.device) -> None:
    """Shard `model` in place over all learner processes, onto `device`: one FSDP unit per
    decoder layer and one for the root; gradients summed; scoring through the root.

    Rank 0's `model` holds the weights; on every other process it is the same model's
    structure on the meta device (`Policy.skeleton`). The shards are made there, empty, and
    rank 0 sends each process its shard of every parameter, one tensor at a time, and its
    buffers (those a state dict leaves out, such as rotary frequencies, too): no process but
    rank 0 holds the whole model, so memory at the start grows with the model once, not once
    per process."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    whole = model.state_dict() if dist.get_rank() == 0 else {}
    units = decoder_layers(model)
    for layer in units:
        fully_shard(layer, mesh=mesh)
    enable_root_scoring(model)
    fully_shard(model, mesh=mesh)
    register_fsdp_forward_method(model, ROOT_SCORE)
    for unit in [*units, model]:
        # a plain SUM (gloo has no pre-multiplied sum; a factor of 1 then divides by nothing)
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    if any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
        model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, whole, options=options)
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


def is_sharded(model: torch.nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Every parameter of a sharded `model` gathered whole for the duration (and nothing to
    do for a model that is not sharded).

    Each process gathers every unit once, here, together with the others; inside, the model
    computes without any collective call (no unit reshards after its forward), so processes
    may generate different numbers of tokens. Used around rollouts and evaluations.
    """
    if not is_sharded(model):
        yield
        return
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    layers = [m for m in units if m is not model]
    for unit in units:
        unit.unshard()
    for layer in layers:
        layer.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for layer in layers:
            layer.set_reshard_after_forward(True, recurse=False)
        for unit in units:
            unit.reshard()


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A sharded model's whole state as CPU tensors on rank 0 (empty on the other processes,
    which must all call this together), for `Policy.save` to write once.

    A tied parameter (the output head sharing the embeddings) is kept under its first name
    only, as `save_pretrained` writes an unsharded model: the gathered copies share no
    storage, from which `transformers` would otherwise tell they are one.
    """
    state = get_model_state_dict(model, options=FULL)
    first = {name for name, _ in model.named_parameters()}
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - first
    return {k: v for k, v in state.items() if k not in tied}


def whole_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A sharded model's whole state on every process (which must all call this together), for
    rollout workers that each process feeds with the weights (Ray actors): `full_model_state`
    gives it to rank 0 alone."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state as a checkpoint holds it: whole, and keyed by parameter name
    (`{"state": {name: ...}, "param_groups": [{..., "params": [name, ...]}]}`), the form
    `torch.distributed.checkpoint` uses, so that it loads sharded or not, on any number of
    processes. With a sharded model every process must call this together (rank 0 gets it)."""
    if is_sharded(model):
        return get_optimizer_state_dict(model, optimizer, options=FULL)
    return _by_name(optimizer.state_dict(), _param_names(model, optimizer))


def load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Put a checkpoint's optimizer state back: keyed by name (`optimizer_state`) or by index
    (`Optimizer.state_dict()`, as checkpoints before this one held it), into a sharded model's
    shards or into a plain optimizer."""
    names = _param_names(model, optimizer)
    if is_sharded(model):
        state = _by_name(state, names)
        # the groups' settings this optimizer has (the saved ones may hold the schedule's
        # `initial_lr`; settings come from the config anyway: `apply_optimizer_settings`)
        known = set(optimizer.param_groups[0])
        groups = [{k: v for k, v in g.items() if k in known} for g in state["param_groups"]]
        state = {"state": state["state"], "param_groups": groups}
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(model, optimizer, state, options=options)
    else:
        optimizer.load_state_dict(_by_index(state, names))


def _param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each of the optimizer's parameters, in its order."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def _by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer state keyed by index, rekeyed by parameter name (one so keyed as is)."""
    if all(isinstance(k, str) for k in state["state"]) and all(
        isinstance(p, str) for g in state["param_groups"] for p in g["params"]
    ):
        return state
    return {
        "state": {names[i]: v for i, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]
        ],
    }


def _by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name, rekeyed by index (one so keyed as is); a
    name this model does not have is an error naming it."""
    index = {name: i for i, name in enumerate(names)}

    def at(key: int | str) -> int:
        if isinstance(key, int):
            return key
        if key not in index:
            raise HonedError(
                f"the checkpoint's optimizer state names a parameter {key!r} that "
                "this model does not train"
            )
        return index[key]

    return {
        "state": {at(k): v for k, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [at(p) for p in g["params"]]} for g in state["param_groups"]
        ],
    }
