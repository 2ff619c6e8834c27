"""honed's GRPO objective against TRL's own `GRPOTrainer._compute_loss`, on the same tensors.

Both are given the same per-token log-probs (a float64 leaf tensor, so the gradient with respect
to each token's log-prob is compared, not a model's), the same π_old, reference log-probs,
advantages and completion masks. TRL's method runs unchanged on a stand-in for its trainer
object that holds only the attributes the method reads (single process, one micro-batch, no
gradient accumulation, no vLLM); honed's side is `honed.rl.loss.grpo_loss` with the token
weights of `token_weights`, as `honed train` calls them.

Every configuration is one of: the same objective on both sides (expected to agree to float64
rounding), or a difference the README documents ("Where honed differs from TRL"): fully masked
completions in `grpo` / `dr_grpo`'s sequence count, and TRL's default bias-corrected KL against
honed's default plain k3. Anything else that differs is printed as UNEXPECTED and the script
exits 1.

    pip install -e ".[bench]"     # TRL
    PYTHONPATH=src python bench/trl_parity.py
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from types import SimpleNamespace

import torch

from honed.rl.loss import grpo_loss, token_weights

TOLERANCE = 1e-12  # float64 on both sides; only the order of summation differs
MAX_LEN = 6


class _Accelerator:
    """What `_compute_loss` asks of accelerate on one process: identities."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x

    gather_for_metrics = gather

    def reduce(self, x: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return x


def _trl_loss(case: dict, inputs: dict, logp: torch.Tensor) -> torch.Tensor:
    from trl import GRPOTrainer

    args = SimpleNamespace(
        use_bias_correction_kl=case["bias_correction"], delta=None, steps_per_generation=1
    )
    stand_in = SimpleNamespace(
        args=args,
        beta=case["beta"],
        loss_type=case["loss_type"],
        epsilon_low=0.2,
        epsilon_high=case["epsilon_high"],
        importance_sampling_level="token",
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_LEN,
        accelerator=_Accelerator(),
        model=SimpleNamespace(training=True),
        _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
    )
    return GRPOTrainer._compute_loss(stand_in, None, inputs)


def _inputs(case: dict, gen: torch.Generator) -> tuple[dict, torch.Tensor]:
    batch = 4
    lengths = [6, 3, 5, 0 if case["masked_row"] else 2]
    mask = torch.zeros(batch, MAX_LEN, dtype=torch.float64)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    logp = -torch.rand(batch, MAX_LEN, generator=gen, dtype=torch.float64) * 3
    drift = torch.randn(batch, MAX_LEN, generator=gen, dtype=torch.float64) * 0.3
    old = logp + drift if case["second_iteration"] else logp.clone()
    ref = logp + torch.randn(batch, MAX_LEN, generator=gen, dtype=torch.float64) * 0.5
    inputs = {
        "prompt_ids": torch.zeros(batch, 1, dtype=torch.long),
        "prompt_mask": torch.ones(batch, 1, dtype=torch.long),
        "completion_ids": torch.zeros(batch, MAX_LEN, dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.randn(batch, generator=gen, dtype=torch.float64),
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    return inputs, logp


def _honed_loss(case: dict, inputs: dict, logp: torch.Tensor) -> torch.Tensor:
    mask = inputs["completion_mask"]
    weights = torch.stack(token_weights(list(mask), case["loss_type"], MAX_LEN))
    return grpo_loss(
        logp,
        inputs["old_per_token_logps"],
        inputs["advantages"],
        weights,
        epsilon_low=0.2,
        epsilon_high=case["epsilon_high"],
        ref_logp=inputs["ref_per_token_logps"] if case["beta"] > 0 else None,
        beta=case["beta"],
        kl_bias_correction=case["honed_bias_correction"],
    ).loss


def _loss_and_grad(fn, case: dict, inputs: dict, logp: torch.Tensor):
    leaf = logp.clone().requires_grad_(True)
    if not case["second_iteration"]:  # π_old is the first forward itself, as in both trainers
        inputs = {**inputs, "old_per_token_logps": leaf.detach()}
    loss = fn(case, inputs, leaf)
    (grad,) = torch.autograd.grad(loss, leaf)
    return float(loss.detach()), grad


def _expected(case: dict) -> str:
    """'same', or the README's reason why the two must differ."""
    if case["masked_row"] and case["loss_type"] in ("grpo", "dr_grpo"):
        return "fully masked completion: TRL counts it in N, honed does not"
    if case["beta"] > 0 and case["bias_correction"] != case["honed_bias_correction"]:
        return "TRL's default bias-corrected KL against honed's default plain k3"
    return "same"


def cases() -> list[dict]:
    out = []
    grid = itertools.product(
        ("grpo", "dapo", "bnpo", "dr_grpo"), (0.0, 0.04), (False, True), (False, True), (0.2, 0.28)
    )
    for loss_type, beta, second, masked, eps_high in grid:
        corrections = [(True, True), (False, False), (True, False)] if beta > 0 else [(True, True)]
        for trl_bc, honed_bc in corrections:
            out.append(
                {
                    "loss_type": loss_type,
                    "beta": beta,
                    "second_iteration": second,
                    "masked_row": masked,
                    "epsilon_high": eps_high,
                    "bias_correction": trl_bc,
                    "honed_bias_correction": honed_bc,
                }
            )
    return out


def main() -> int:
    try:
        import trl
    except ImportError:
        print('TRL is not installed: pip install -e ".[bench]"')
        return 0
    gen = torch.Generator().manual_seed(0)
    rows, unexpected, agree = [], 0, 0
    for case in cases():
        inputs, logp = _inputs(case, gen)
        trl_loss, trl_grad = _loss_and_grad(_trl_loss, case, inputs, logp)
        honed_loss, honed_grad = _loss_and_grad(_honed_loss, case, inputs, logp)
        d_loss = abs(trl_loss - honed_loss)
        d_grad = float((trl_grad - honed_grad).abs().max())
        same = d_loss <= TOLERANCE and d_grad <= TOLERANCE
        expected = _expected(case)
        verdict = "agree" if same else "differs"
        if same != (expected == "same"):
            verdict, unexpected = "UNEXPECTED", unexpected + 1
        agree += same
        rows.append((case, d_loss, d_grad, verdict, expected))
    print(f"TRL {trl.__version__}, torch {torch.__version__}; tolerance {TOLERANCE:g} (float64)")
    print("| configurations | count | largest abs. difference: loss | gradient |")
    print("|---|---|---|---|")
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for case, d_loss, d_grad, verdict, expected in rows:
        label = "same objective: agree" if verdict == "agree" else f"{verdict}: {expected}"
        groups[label].append((d_loss, d_grad))
        if verdict == "UNEXPECTED":
            print(f"UNEXPECTED: {case} loss {d_loss:.2e} grad {d_grad:.2e}")
    for label, diffs in groups.items():
        d_loss, d_grad = (max(d[i] for d in diffs) for i in (0, 1))
        print(f"| {label} | {len(diffs)} | {d_loss:.1e} | {d_grad:.1e} |")
    print(
        f"{agree} of {len(rows)} configurations agree; {len(rows) - agree - unexpected} differ "
        f"as documented; {unexpected} unexpectedly"
    )
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
