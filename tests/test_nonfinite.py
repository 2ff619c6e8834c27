"""NaN is never trained on: a NaN or infinity injected at each place a step makes one (the
sampler's logits, a reward, the reference's or the policy's log-probs, an advantage, the loss,
a gradient) stops the run at that step with one line naming it, the step and the environment,
exit code 2, the last checkpoint as it was; `trainer.on_nonfinite: skip_step` drops the step
(weights and optimizer moments untouched) and goes on; non-finite weights stop a run at once."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_run import DigitShareEnv, spread_env_data, write_config

from honed.cli import main
from honed.models import generation
from honed.rewards.normalizer import RewardNormalizer
from honed.rl import prepare, update
from honed.rl.trainer import STATE_FILE, GRPOTrainer
from honed.runs.rundir import RunDir
from honed.types import Score

BAD_STEP = 3  # steps 1 and 2 train and step 2 is checkpointed (checkpoint.every: 2)


def _config(tmp_path: Path, **trainer) -> Path:
    data = spread_env_data(tmp_path)
    data["trainer"].update(trainer)
    return write_config(tmp_path, data)


def _inject_at(
    monkeypatch, step: int, patch: Callable[[pytest.MonkeyPatch, GRPOTrainer], Any]
) -> dict[str, bytes]:
    """Apply `patch` (given a monkeypatch and the trainer; it may return a hook to remove) for
    the training step `step` only. Returns the files of the latest checkpoint as they were when
    that step began (filled in then)."""
    before: dict[str, bytes] = {}
    original = GRPOTrainer._train_step

    def train_step(self: GRPOTrainer) -> dict[str, float]:
        if self.step + 1 != step:
            return original(self)
        saved = self.saved()
        if saved is not None:
            before.update({p.name: p.read_bytes() for p in sorted(saved.iterdir())})
        with monkeypatch.context() as m:
            hook = patch(m, self)
            try:
                return original(self)
            finally:
                if hook is not None:
                    hook.remove()

    monkeypatch.setattr(GRPOTrainer, "_train_step", train_step)
    return before


def _nan_reward(m, trainer):
    def nan_score(self, item, completion):
        return Score(reward=math.nan, components={"share": math.nan, "length": 0.1})

    m.setattr(DigitShareEnv, "score", nan_score)


def _nan_logits(m, trainer):
    pick = generation.pick
    m.setattr(
        generation,
        "pick",
        lambda logits, uniforms, params: pick(torch.full_like(logits, math.nan), uniforms, params),
    )


def _nan_weight(m, trainer):
    with torch.no_grad():
        trainer.policy.model.model.layers[0].mlp.up_proj.weight[0, 0] = math.nan


def _nan_reference(m, trainer):
    """The reference scores NaN wherever it is scored: in the KL reward penalty
    (`rl/prepare.py`) and in the loss's KL term (`rl/update.py`)."""
    reference = trainer.update.reference
    for module in (prepare, update):

        def nan_reference(model, batch, temperature, original=module.frozen_logprobs):
            out = original(model, batch, temperature)
            return out * math.nan if model is reference else out

        m.setattr(module, "frozen_logprobs", nan_reference)


def _nan_policy_logprobs(m, trainer):
    score = update.score

    def nan_current(model, batch, temperature, with_entropy=False):
        out = score(model, batch, temperature, with_entropy=with_entropy)
        return replace(out, logprobs=out.logprobs * math.nan)

    m.setattr(update, "score", nan_current)


def _nan_advantage(m, trainer):
    m.setattr(RewardNormalizer, "apply", lambda self, scores: [math.nan] * len(scores))


def _nan_loss(m, trainer):
    loss = update.grpo_loss

    def nan_loss(*args, **kwargs):
        out = loss(*args, **kwargs)
        return replace(out, loss=out.loss * math.nan)

    m.setattr(update, "grpo_loss", nan_loss)


def _inf_gradient(m, trainer):
    weight = trainer.policy.model.model.layers[0].mlp.up_proj.weight
    return weight.register_hook(lambda grad: grad * math.inf)


# (injection, config overrides, the message's words after "non-finite", and its detail)
FAULTS = {
    "sampling logit": (_nan_logits, {}, "sampling log-prob", "a NaN or infinite logit"),
    "policy weight": (_nan_weight, {}, "sampling log-prob", "a NaN or infinite logit"),
    "reward": (_nan_reward, {}, "reward", "scored nan (share nan)"),
    "reference, KL in the reward": (
        _nan_reference,
        {"beta": 0.04, "kl_in_reward": True},
        "log-prob",
        "the reference's log-probs, in the KL reward penalty",
    ),
    "reference, KL in the loss": (
        _nan_reference,
        {"beta": 0.04},
        "log-prob",
        "the reference's log-probs",
    ),
    "policy log-probs": (_nan_policy_logprobs, {}, "log-prob", "the policy's log-probs"),
    "advantage": (_nan_advantage, {}, "advantage", "item 'digits:train"),
    "loss": (_nan_loss, {}, "loss", "the clipped surrogate"),
    "gradient": (_inf_gradient, {}, "gradient norm", "the optimizer step was not applied"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_nonfinite_value_stops_the_run_at_its_step(tmp_path, monkeypatch, capsys, fault):
    inject, trainer, quantity, detail = FAULTS[fault]
    before = _inject_at(monkeypatch, BAD_STEP, inject)
    code = main(["train", str(_config(tmp_path, **trainer)), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(
        f"honed: error: non-finite {quantity} at step {BAD_STEP} (environment 'digits'): "
    ), lines[0]
    assert detail in lines[0]
    run = RunDir(tmp_path / "run")
    last = run.checkpoints / "step_2"
    assert f"the state after step 2 is saved in {last}" in lines[0]
    # nothing of the bad step was written; the last checkpoint is as it was
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_2"]
    assert {p.name: p.read_bytes() for p in sorted(last.iterdir())} == before
    assert [r["step"] for r in run.read_jsonl(run.metrics_path) if "loss" in r] == [1, 2]
    assert not run.summary_path.exists()


def _moments(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path / STATE_FILE, weights_only=False)["optimizer"]["state"]
    return {f"{k}.{name}": v for k, s in state.items() for name, v in s.items()}


@pytest.mark.parametrize("fault", ["reward", "reference, KL in the loss", "gradient"])
def test_skip_step_drops_the_step_and_goes_on(tmp_path, monkeypatch, capsys, fault):
    inject, trainer, _, _ = FAULTS[fault]
    _inject_at(monkeypatch, BAD_STEP, inject)
    config = _config(tmp_path, on_nonfinite="skip_step", **trainer)
    # the curricula score items by reward: a NaN one reaching them would stop the run
    overrides = ["-o", "checkpoint.every=1", "-o", "reward_norm.mode=zscore"]
    overrides += ["-o", "curriculum.score=reward"]
    assert main(["train", str(config), "--quiet", *overrides]) == 0
    run = RunDir(tmp_path / "run")
    rows = [r for r in run.read_jsonl(run.metrics_path) if "learning_rate" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    key = "nonfinite/" + {"reward": "reward", "gradient": "grad_norm"}.get(fault, "logprob")
    assert rows[2]["nonfinite/skipped"] == 1.0 and rows[2][key] == 1.0
    assert rows[2]["update/skipped"] == 1.0 and "loss" not in rows[2]
    assert all("nonfinite/skipped" not in r and math.isfinite(r["loss"]) for r in rows[3:])
    assert run.read_summary()["nonfinite_skipped"] == 1
    # the skipped step applied nothing: weights and optimizer moments as after step 2
    for a, b in [(2, 3), (3, 4)]:
        same = load_file(run.checkpoints / f"step_{a}/model.safetensors")
        then = load_file(run.checkpoints / f"step_{b}/model.safetensors")
        moments = _moments(run.checkpoints / f"step_{a}"), _moments(run.checkpoints / f"step_{b}")
        equal = all(torch.equal(same[k], then[k]) for k in same) and all(
            torch.equal(moments[0][k], moments[1][k]) for k in moments[0]
        )
        assert equal == (a == 2), (a, b)
    # the learning-rate schedule advanced through the skipped step, as through any other
    lrs = [r["learning_rate"] for r in rows]
    assert len(lrs) == 4 and all(math.isfinite(x) for x in lrs)
    # no statistic took in a NaN: the normaliser saw the groups of the three steps kept
    state = torch.load(run.checkpoints / "step_4" / STATE_FILE, weights_only=False)
    norm = state["reward_norm"]["digits"]["accumulator"]
    kept = 3 if fault == "reward" else 4
    assert norm["count"] == kept * 4 * 4 and math.isfinite(norm["mean"])


def _with_nan_weight(checkpoint: Path) -> str:
    weights = load_file(checkpoint / "model.safetensors")
    name = next(k for k in weights if k.endswith("up_proj.weight"))
    weights[name][0, 0] = math.nan
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    return name


def test_resuming_from_a_checkpoint_with_a_nan_weight_stops_at_once(tmp_path, capsys):
    config = _config(tmp_path, max_steps=2)
    assert main(["train", str(config), "--quiet"]) == 0
    run = RunDir(tmp_path / "run")
    name = _with_nan_weight(run.checkpoints / "step_2")
    rows = run.metrics_path.read_text()
    code = main(["train", str(config), "--quiet", "--resume", "-o", "trainer.max_steps=4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(
        f"honed: error: non-finite weights in {run.checkpoints / 'step_2'}: {name} holds NaN"
    )
    assert run.metrics_path.read_text() == rows
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_2"]


def test_a_starting_model_with_a_nan_weight_stops_before_any_step(tmp_path, capsys):
    config = _config(tmp_path, max_steps=1)
    assert main(["train", str(config), "--quiet", "--run-dir", str(tmp_path / "first")]) == 0
    model = RunDir(tmp_path / "first").checkpoints / "step_1"
    name = _with_nan_weight(model)
    code = main(["train", str(config), "--quiet", "-o", f"policy.model={model}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"non-finite weights in the starting policy: {name} holds NaN" in err[0]
    assert not RunDir(tmp_path / "run").metrics_path.exists()


def test_the_message_names_the_environment_at_fault(tmp_path, monkeypatch, capsys):
    data = spread_env_data(tmp_path)
    data["envs"] = [
        {"name": "digits", "type": "tiny_run:DigitShareEnv"},
        {"name": "other", "type": "tiny_run:DigitShareEnv"},
    ]
    score = DigitShareEnv.score

    def nan_in_other(m, trainer):
        def other_scores_nan(self, item, completion):
            return Score(reward=math.nan) if item.env == "other" else score(self, item, completion)

        m.setattr(DigitShareEnv, "score", other_scores_nan)

    _inject_at(monkeypatch, BAD_STEP, nan_in_other)
    assert main(["train", str(write_config(tmp_path, data)), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"non-finite reward at step {BAD_STEP} (environment 'other'): item 'other:" in err
