"""LoRA through peft: only adapters train, the reference is the model with its adapters off,
checkpoints are peft adapters that `PeftModel.from_pretrained` loads, `honed export` merges
them, and resume is bit-identical."""

from __future__ import annotations

import pytest
import torch
from numerics import assert_logprobs_close
from safetensors.torch import load_file
from test_resume import RESUME_SETTINGS, _interrupt_after, _rows
from tiny_run import noisy_env_data, small_config, spread_env_data

pytest.importorskip("peft", reason="LoRA needs peft: pip install 'honed[lora]'")
from peft import PeftModel

from honed.cli import main
from honed.errors import HonedError
from honed.models.batching import build_batch
from honed.models.lora import AdapterFreeReference
from honed.models.policy import Policy, SamplingParams
from honed.models.scoring import score
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

LORA = ("policy.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: all-linear}",)


def _trained(tmp_path, *overrides: str) -> GRPOTrainer:
    data = spread_env_data(tmp_path)
    data["trainer"]["max_steps"] = 3
    config = small_config(tmp_path, *LORA, *overrides, data=data)
    trainer = GRPOTrainer(config, RunDir(config.run_dir))
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return _trained(tmp_path_factory.mktemp("lora"), "trainer.beta=0.04")


def _base(trainer: GRPOTrainer) -> Policy:
    settings = trainer.config.policy.model_copy(update={"lora": None})
    return Policy.from_config(settings, trainer.config.seed)


def _batch(policy: Policy, n: int = 6):
    sampler = policy.generate
    prompts = [policy.encode(p) for p in ("3:", "14:", "7:") for _ in range(2)][:n]
    samples = sampler(prompts, list(range(len(prompts))), SamplingParams(1.0, 1.0, 6))
    return build_batch(
        [s.prompt_ids for s in samples],
        [s.completion_ids for s in samples],
        [[1] * len(s.completion_ids) for s in samples],
        policy.pad_id,
    )


def _logp(model, batch) -> torch.Tensor:
    with torch.inference_mode():
        return score(model.eval(), batch).logprobs * batch.completion_mask


def test_only_the_adapters_train(trained):
    base = _base(trained)
    weights = dict(trained.policy.model.named_parameters())
    trainable = {k for k, p in weights.items() if p.requires_grad}
    assert trainable and all("lora_" in k for k in trainable)
    for name, param in base.model.named_parameters():
        # peft renames a wrapped linear's weight `...q_proj.base_layer.weight`
        key = next(
            k
            for k in weights
            if k.endswith(name) or k.endswith(name.replace(".weight", ".base_layer.weight"))
        )
        assert torch.equal(weights[key], param), f"{name} changed"
    lora_b = [p for k, p in weights.items() if "lora_B" in k]
    assert any(float(p.abs().max()) > 0 for p in lora_b), "the adapters never moved"
    assert isinstance(trained.update.reference, AdapterFreeReference)


def test_the_reference_is_the_base_model(trained):
    """Scored with its adapters off, the trained policy gives the base model's log-probs (the
    same weights through peft's disabled layers and `transformers`' forward, against the
    lean forward: float32 rounding apart) and differs from the adapted policy."""
    base = _base(trained)
    batch = _batch(base)
    with trained.update.reference.scope() as model:
        reference = _logp(model, batch)
    expected = _logp(base.model, batch)
    mask = batch.completion_mask.bool()
    assert_logprobs_close(reference[mask].tolist(), expected[mask].tolist())
    adapted = _logp(trained.policy.model, batch)
    assert float((adapted - expected).abs().max()) > 1e-3


def test_a_checkpoint_is_a_peft_adapter_that_generates_the_same_tokens(trained):
    checkpoint = trained.run.latest_checkpoint()[1]
    assert (checkpoint / "adapter_config.json").is_file()
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "model.safetensors").exists()
    loaded = PeftModel.from_pretrained(_base(trained).model, str(checkpoint))
    theirs = Policy(loaded, trained.policy.tokenizer)
    prompts = [trained.policy.encode(p) for p in ("3:", "14:", "7:", "19:")]
    for params in (SamplingParams(0.0, 1.0, 8), SamplingParams(1.0, 1.0, 8)):
        ours = trained.policy.generate(prompts, [1, 2, 3, 4], params)
        other = theirs.generate(prompts, [1, 2, 3, 4], params)
        assert [s.completion_ids for s in ours] == [s.completion_ids for s in other]


def test_export_merges_the_adapter(trained, tmp_path):
    out = tmp_path / "merged"
    assert main(["export", str(trained.run.path), str(out)]) == 0
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not (out / "adapter_config.json").exists()
    merged = Policy.load(out)
    batch = _batch(merged)
    mask = batch.completion_mask.bool()
    ours = _logp(trained.policy.model, batch)
    theirs = _logp(merged.model, batch)
    assert_logprobs_close(ours[mask].tolist(), theirs[mask].tolist())
    assert float((theirs - _logp(_base(trained).model, batch)).abs().max()) > 1e-3


def test_resume_with_lora_is_bit_identical(tmp_path):
    def config(sub: str, *more: str):
        data = noisy_env_data(tmp_path / sub)
        return small_config(tmp_path / sub, *RESUME_SETTINGS, *LORA, *more, data=data)

    straight = GRPOTrainer(config("a"), RunDir(tmp_path / "a/run"))
    straight.train()
    _interrupt_after(GRPOTrainer(config("b", "checkpoint.every=1"), RunDir(tmp_path / "b/run")), 2)
    resumed = GRPOTrainer(config("b"), RunDir(tmp_path / "b/run"))
    resumed.train(resume=True)
    a = load_file(str(straight.run.checkpoints / "step_4" / "adapter_model.safetensors"))
    b = load_file(str(resumed.run.checkpoints / "step_4" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and a
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert _rows(resumed.run) == _rows(straight.run)


def test_changing_the_adapter_shape_on_resume_is_refused(tmp_path):
    _trained(tmp_path)
    data = spread_env_data(tmp_path)
    data["trainer"]["max_steps"] = 3
    config = small_config(tmp_path, *LORA, "policy.lora.r=8", data=data)
    with pytest.raises(HonedError, match=r"policy\.lora\.r cannot change"):
        GRPOTrainer(config, RunDir(config.run_dir)).train(resume=True)
