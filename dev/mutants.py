"""Hand-written mutants of the GRPO core, and the test that kills each.

A test earns its place by failing when the code it guards is broken. Each mutant below is one
classic RL bug planted in `rewards/units.py`, `rl/advantages.py`, `rl/loss.py`, `rl/prepare.py`,
`rl/update.py` or the batching and scoring they use (`models/batching.py`, `models/scoring.py`);
the script plants it, runs the GRPO tests until the first failure, restores the file, and prints
which test killed it. A mutant that survives is a hole in the suite. It edits the sources of
the tree it lives in, so run it in a checkout nobody else is using (`git worktree add`).

    .venv/bin/python dev/mutants.py            # all mutants
    .venv/bin/python dev/mutants.py clip kl    # those whose name contains a word
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "honed"
# fastest first: the first failure names the killer
TESTS = [
    "tests/test_grpo_math.py",
    "tests/test_kl.py",
    "tests/test_distributed_local.py",
    "tests/test_training.py",
    "tests/test_resume.py",
]


@dataclass
class Mutant:
    name: str
    path: str
    old: str
    new: str


MUTANTS = [
    # ---------------------------------------------------------------- advantages
    Mutant("no group baseline", "rl/advantages.py", "centred = t - t.mean()", "centred = t"),
    Mutant(
        "baseline over the batch, not the group",
        "rl/advantages.py",
        "centred = t - t.mean()",
        "centred = t - torch.cat(tensors).mean()",
    ),
    Mutant(
        "std over the batch under scale_rewards=group",
        "rl/advantages.py",
        "centred = centred / (std + STD_EPS)",
        "centred = centred / (float(group_std(torch.cat(tensors))) + STD_EPS)",
    ),
    Mutant(
        "population std instead of TRL's sample std",
        "rl/advantages.py",
        "return rewards.std() if",
        "return rewards.std(correction=0) if",
    ),
    Mutant("no std epsilon", "rl/advantages.py", "STD_EPS = 1e-4", "STD_EPS = 0.0"),
    Mutant(
        "scale_rewards=none still divides",
        "rl/advantages.py",
        'elif scale_rewards != "none":',
        'elif scale_rewards == "none":\n            centred = centred / (std + STD_EPS)\n'
        "        else:",
    ),
    Mutant(
        "segment rewards ignored",
        "rewards/units.py",
        "per_segment = any(",
        "per_segment = False and any(",
    ),
    Mutant(
        "segment without its own reward gets 0",
        "rewards/units.py",
        "float(traj.reward if seg.reward is None else seg.reward)",
        "float(seg.reward or 0.0)",
    ),
    # ---------------------------------------------------------------- loss
    Mutant(
        "grpo: no mean over sequences",
        "rl/loss.py",
        "weights.append(m / (c * n_seq))",
        "weights.append(m / c)",
    ),
    Mutant(
        "dr_grpo: divides by tokens",
        "rl/loss.py",
        "weights.append(m / (n_seq * max_completion_length))",
        "weights.append(m / n_tok)",
    ),
    Mutant(
        "dapo/bnpo: per-sequence mean",
        "rl/loss.py",
        "            weights.append(m / n_tok)",
        "            weights.append(m / (c * n_seq))",
    ),
    Mutant(
        "empty sequences count in N",
        "rl/loss.py",
        "n_seq = sum(1 for c in counts if c > 0)",
        "n_seq = len(counts)",
    ),
    Mutant(
        "k1 sign", "rl/loss.py", "        return logp - ref_logp", "        return ref_logp - logp"
    ),
    Mutant(
        "k2 as absolute value",
        "rl/loss.py",
        "return 0.5 * (logp - ref_logp) ** 2",
        "return 0.5 * (logp - ref_logp).abs()",
    ),
    Mutant("k3 sign", "rl/loss.py", "delta = ref_logp - logp", "delta = logp - ref_logp"),
    Mutant(
        "KL reward penalty sign",
        "rl/loss.py",
        "return beta * ((logp - ref_logp).detach() * mask).sum(-1)",
        "return beta * ((ref_logp - logp).detach() * mask).sum(-1)",
    ),
    Mutant(
        "KL reward penalty ignores the mask",
        "rl/loss.py",
        "return beta * ((logp - ref_logp).detach() * mask).sum(-1)",
        "return beta * (logp - ref_logp).detach().sum(-1)",
    ),
    Mutant(
        "no PPO clip",
        "rl/loss.py",
        "clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv",
        "clipped = ratio * adv",
    ),
    Mutant(
        "max instead of min",
        "rl/loss.py",
        "per_token = -torch.minimum(unclipped, clipped)",
        "per_token = -torch.maximum(unclipped, clipped)",
    ),
    Mutant(
        "symmetric clip (epsilon_high ignored)",
        "rl/loss.py",
        "torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)",
        "torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low)",
    ),
    Mutant(
        "clip flag of negative advantages",
        "rl/loss.py",
        "low = (ratio < 1 - epsilon_low) & (adv < 0)",
        "low = (ratio < 1 - epsilon_low) & (adv > 0)",
    ),
    Mutant(
        "importance weight not capped",
        "rl/loss.py",
        "weights = torch.exp(log_ratio.clamp(max=math.log(cap)))",
        "weights = torch.exp(log_ratio)",
    ),
    Mutant(
        "importance weight inverted",
        "rl/loss.py",
        "log_ratio = (proximal_logp - behaviour_logp)",
        "log_ratio = (behaviour_logp - proximal_logp)",
    ),
    # ---------------------------------------------------------------- update
    Mutant(
        "overlong penalty rewards length",
        "rewards/units.py",
        "return -factor * min(",
        "return factor * min(",
    ),
    Mutant(
        "normaliser not applied",
        "rl/prepare.py",
        "        rewards = normalize(group.env, rewards)",
        "        pass",
    ),
    Mutant(
        "KL penalty added to the reward",
        "rl/prepare.py",
        "r - sum(penalty[ti][si] for ti, si in unit)",
        "r + sum(penalty[ti][si] for ti, si in unit)",
    ),
    Mutant(
        "zero-spread groups not filtered",
        "rl/prepare.py",
        "        if is_zero and settings.filter_zero_std:\n            continue",
        "        if is_zero and settings.filter_zero_std:\n            pass",
    ),
    Mutant(
        "truncated completions not masked",
        "rl/prepare.py",
        "                    mask = [0] * len(mask)",
        "                    pass",
    ),
    Mutant(
        "last micro-batch dropped",
        "models/batching.py",
        "return [list(range(s, min(n, s + size))) for s in range(0, n, size)]",
        "return [list(range(s, min(n, s + size))) for s in range(0, n - size, size)] or [[0]]",
    ),
    Mutant(
        "token weights of the wrong rows",
        "rl/update.py",
        "right_pad(weights, 0.0, width, torch.float32, device),",
        "right_pad(weights[:1] * len(weights), 0.0, width, torch.float32, device),",
    ),
    Mutant(
        "no gradient clipping",
        "rl/update.py",
        "max_norm = self.settings.max_grad_norm if self.settings.max_grad_norm else math.inf",
        "max_norm = math.inf",
    ),
    Mutant(
        "gradients accumulate across iterations",
        "rl/update.py",
        "        model.train()\n        self.optimizer.zero_grad(set_to_none=True)",
        "        model.train()",
    ),
    Mutant(
        "pi_old re-taken at every iteration (ratio always 1)",
        "rl/update.py",
        "grpo_loss(\n            logp,\n            state.old,",
        "grpo_loss(\n            logp,\n            logp.detach(),",
    ),
    Mutant(
        "pi_old from the sampler's log-probs",
        "rl/update.py",
        "grpo_loss(\n            logp,\n            state.old,",
        "grpo_loss(\n            logp,\n            torch.where(\n"
        "                off[:, None],\n"
        "                state.old,\n"
        "                right_pad(\n"
        "                    [s.old_logprobs for s in chunk], 0.0, width, torch.float32, device\n"
        "                ),\n"
        "            ),",
    ),
    Mutant(
        "epsilon_low and epsilon_high swapped",
        "rl/update.py",
        "epsilon_low=settings.epsilon,\n            epsilon_high=settings.clip_high,",
        "epsilon_low=settings.clip_high,\n            epsilon_high=settings.epsilon,",
    ),
    Mutant(
        "KL sign in the loss",
        "rl/loss.py",
        "per_token = per_token + beta * kl",
        "per_token = per_token - beta * kl",
    ),
    Mutant(
        "reference scored with the policy",
        "rl/update.py",
        "return frozen_logprobs(self.reference, batch, self.settings.temperature)",
        "return frozen_logprobs(self.policy.model, batch, self.settings.temperature)",
    ),
    Mutant(
        "reward penalty's reference is the policy",
        "rl/prepare.py",
        "ref = frozen_logprobs(reference, batch, settings.temperature)",
        "ref = frozen_logprobs(policy.model, batch, settings.temperature)",
    ),
    Mutant(
        "pi_old scored with dropout on",
        "models/scoring.py",
        "with _scope(target) as model, eval_mode(model), torch.inference_mode():",
        "with _scope(target) as model, torch.inference_mode():",
    ),
    Mutant(
        "importance weights not applied",
        "rl/loss.py",
        "        per_token = per_token * is_weight",
        "        pass",
    ),
    Mutant(
        "learning-rate schedule never advances",
        "rl/update.py",
        '        stats["learning_rate"] = self.optimizer.param_groups[0]["lr"]\n'
        "        self.scheduler.step()",
        '        stats["learning_rate"] = self.optimizer.param_groups[0]["lr"]',
    ),
]


def run(mutant: Mutant) -> str:
    path = SRC / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return f"NOT APPLIED: the text occurs {original.count(mutant.old)} times"
    path.write_text(original.replace(mutant.old, mutant.new))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
            cwd=ROOT,
            # this tree's sources, whichever checkout the environment was installed from
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        path.write_text(original)
    failed = re.search(r"^FAILED (\S+)", proc.stdout, re.MULTILINE)
    if failed:
        return "killed by " + failed.group(1)
    error = re.search(r"^ERROR (\S+)", proc.stdout, re.MULTILINE)
    return "killed (error in " + error.group(1) + ")" if error else "SURVIVED"


def main(words: list[str]) -> int:
    chosen = [m for m in MUTANTS if not words or any(w in m.name for w in words)]
    survived = 0
    for mutant in chosen:
        verdict = run(mutant)
        survived += verdict == "SURVIVED"
        print(f"{mutant.path:18} {mutant.name:55} {verdict}", flush=True)
    print(f"{len(chosen) - survived} of {len(chosen)} mutants killed")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
