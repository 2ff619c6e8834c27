"""End-to-end GRPO runs on a very small policy: run files, resume, checkpoints, the CLI path."""

from __future__ import annotations

import json
import re

import pytest
import torch
import yaml
from safetensors.torch import load_file
from tiny_run import small_config, small_config_data, spread_env_data, write_config
from transformers import AutoModelForCausalLM, AutoTokenizer

from honed.cli import main
from honed.errors import HonedError
from honed.rl.plan import training_plan
from honed.rl.trainer import GRPOTrainer
from honed.runs.lifecycle import RunLifecycle
from honed.runs.rundir import RunDir


def _weights(path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def test_a_run_writes_every_file_and_summary(tmp_path):
    assert main(["train", str(write_config(tmp_path)), "--quiet"]) == 0
    run = RunDir(tmp_path / "run")
    for name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "summary.json", "reward.png"):
        assert (run.path / name).is_file(), name
    resolved = yaml.safe_load(run.config_path.read_text())
    assert resolved["trainer"]["loss_type"] == "dapo"  # defaults are spelled out
    rows = run.read_jsonl(run.metrics_path)
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for key in (
        "reward/std",
        "reward/addition/mean",
        "frac_reward_zero_std",
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "kl",
        "entropy",
        "completions/mean_length",
        "completions/max_length",
        "completions/truncated_frac",
        "grad_norm",
        "learning_rate",
        "perf/tokens_per_second",
        "perf/step_time",
        "curriculum/addition/items_tracked",
    ):
        assert key in steps[0], key
    # every step's groups update the curricula: 4 items per step, drawn with replacement
    tracked = [r["curriculum/addition/items_tracked"] for r in steps]
    assert tracked[0] >= 1 and tracked == sorted(tracked)
    assert steps[-1]["curriculum/addition/total_updates"] == 16
    summary = json.loads(run.summary_path.read_text())
    assert "accuracy" in summary["initial_eval"] and "accuracy" in summary["final_eval"]
    assert summary["steps"] == 4
    samples = run.read_jsonl(run.samples_path)
    assert samples and {"prompt", "completion", "reward", "group_rewards"} <= set(samples[0])
    assert [s for s, _ in run.step_checkpoints()] == [2, 4]


def test_a_checkpoint_loads_with_plain_transformers_and_generates(tmp_path):
    assert main(["train", str(write_config(tmp_path)), "--quiet"]) == 0
    ckpt = tmp_path / "run/checkpoints/step_4"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    inputs = tokenizer("3+4=", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(tokenizer.decode(out[0], skip_special_tokens=True), str)


def test_warm_start_then_grpo_and_eval_command(tmp_path):
    data = small_config_data(tmp_path)
    check = {"every": 2, "metric": "token_accuracy", "threshold": 1.0, "examples": 4}
    data["sft"] = {"steps": 5, "batch_size": 8, "learning_rate": 1e-3, "check": check}
    path = write_config(tmp_path, data)
    assert main(["train", str(path), "--quiet"]) == 0
    run = tmp_path / "run"
    assert (run / "checkpoints/warmstart/config.json").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["warmstart"]["sft/steps"] == 5
    # The warm-start's log, written as it ran: its loss every step (5 steps: a row each) and
    # each check, the last one the summary's.
    log = RunDir(run).read_jsonl(run / "warmstart.jsonl")
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4, 5]
    checks = [r for r in log if "check/token_accuracy" in r]
    assert [r["step"] for r in checks] == [2, 4, 5]
    assert checks[-1]["check/token_accuracy"] == summary["warmstart"]["sft/check/token_accuracy"]
    assert all(r["check/threshold"] == 1.0 for r in checks)
    # A warm-start trained again starts its log again, as a new file (`honed view` tells
    # logs apart by their inode, which a deleted file may hand on to the next).
    inode = (run / "warmstart.jsonl").stat().st_ino
    assert main(["sft", str(path), "--overwrite", "--quiet"]) == 0
    assert RunDir(run).read_jsonl(run / "warmstart.jsonl") == log
    assert (run / "warmstart.jsonl").stat().st_ino != inode
    assert main(["eval", str(run), "--split", "validation", "--quiet"]) == 0
    report = json.loads((run / "eval/step_4_validation.json").read_text())
    assert report["split"] == "validation" and 0.0 <= report["accuracy"] <= 1.0


def test_sft_then_eval_then_train_in_the_same_run_directory(tmp_path):
    """`honed sft` leaves a run that `honed eval` reads (its config, the warm-start) and that
    `honed train` starts from without training the warm-start again; once GRPO has written
    a step, the folder holds a run and a plain `honed train` refuses it."""
    data = small_config_data(tmp_path)
    data["sft"] = {"steps": 5, "batch_size": 8, "learning_rate": 1e-3}
    path = write_config(tmp_path, data)
    run = tmp_path / "run"
    assert main(["sft", str(path), "--quiet"]) == 0
    assert (run / "config.yaml").is_file()
    assert main(["eval", str(run), "--split", "test", "--quiet"]) == 0
    report = json.loads((run / "eval/warmstart_test.json").read_text())
    weights = (run / "checkpoints/warmstart/model.safetensors").read_bytes()
    warm = json.loads((run / "warmstart_eval.json").read_text())

    assert main(["train", str(path), "--quiet"]) == 0
    assert (run / "checkpoints/warmstart/model.safetensors").read_bytes() == weights
    summary = json.loads((run / "summary.json").read_text())
    assert summary["initial_eval"]["accuracy"] == warm["eval"]["accuracy"] == report["accuracy"]
    assert main(["train", str(path), "--quiet"]) == 2
    # a warm-start trained again in a trained run leaves the run's config as it was trained
    config = (run / "config.yaml").read_text()
    assert main(["sft", str(path), "--overwrite", "--quiet", "-o", "sft.steps=3"]) == 0
    assert (run / "config.yaml").read_text() == config


def test_honed_sft_on_several_processes_is_refused_naming_what_does_it(
    tmp_path, monkeypatch, capsys
):
    """Under torchrun `honed sft` would start N processes writing one run: one line says that
    `honed train --nproc N` runs the warm-start on N processes, and nothing is written."""
    data = small_config_data(tmp_path)
    data["sft"] = {"steps": 5}
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["sft", str(write_config(tmp_path, data)), "--quiet"]) == 2
    assert "honed train --nproc N" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_beta_zero_loads_no_reference_model(tmp_path):
    trainer = GRPOTrainer(small_config(tmp_path), RunDir(tmp_path / "run"))
    trainer.setup(resume=False)
    assert trainer.update.reference is None
    trainer = GRPOTrainer(small_config(tmp_path, "trainer.beta=0.05"), RunDir(tmp_path / "r2"))
    trainer.setup(resume=False)
    assert trainer.update.reference is not None
    assert not any(p.requires_grad for p in trainer.update.reference.parameters())


def test_dynamic_sampling_keeps_drawing_until_groups_have_spread(tmp_path):
    cfg = small_config(
        tmp_path,
        "trainer.dynamic_sampling=true",
        "trainer.max_sampling_rounds=3",
        "trainer.max_steps=2",
    )
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    trainer.train()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    for r in rows:
        assert 1 <= r["sampling/rounds"] <= 3
        assert r["sampling/groups_drawn"] >= 4
        # a batch never grows beyond prompts_per_step groups
        assert r["groups/trained"] + r["groups/filtered"] == 4


def test_dynamic_sampling_judges_spread_on_the_normalised_rewards(tmp_path):
    """A normaliser that clips flattens some groups whose raw rewards spread; dynamic sampling
    sees that, so every step that found enough groups trains on all of them."""
    cfg = small_config(
        tmp_path,
        "trainer.dynamic_sampling=true",
        "trainer.max_sampling_rounds=4",
        "trainer.max_steps=4",
        "reward_norm.mode=zscore",
        "reward_norm.warmup=0",
        "reward_norm.clip=0.2",
        "trainer.scale_rewards=none",
        data=spread_env_data(tmp_path),
    )
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    trainer.train()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    # the clip leaves groups without spread: more rounds were needed than raw rewards suggest
    assert max(r["sampling/rounds"] for r in rows) > 1
    for r in rows:
        if r["sampling/rounds"] < 4:
            assert r["groups/trained"] == 4 and r["groups/filtered"] == 0, r


def test_kl_in_reward_runs_and_logs_the_penalty(tmp_path):
    cfg = small_config(tmp_path, "trainer.beta=0.1", "trainer.kl_in_reward=true")
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    trainer.train()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # π_old is still the reference
    assert rows[-1]["kl"] != 0.0 and "kl/reward_penalty_mean" in rows[-1]
    with pytest.raises(HonedError, match="kl_in_reward"):
        small_config(tmp_path, "trainer.kl_in_reward=true")


def test_max_rollouts_stops_once_the_completions_budget_is_spent(tmp_path):
    cfg = small_config(
        tmp_path,
        "trainer.dynamic_sampling=true",
        "trainer.max_sampling_rounds=3",
        "trainer.max_steps=50",
        "trainer.max_rollouts=60",
    )
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    summary = trainer.train()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    # every group drawn counts, kept or filtered: 4 completions each
    drawn = [int(r["sampling/groups_drawn"]) * 4 for r in rows]
    totals = [r["sampling/rollouts_total"] for r in rows]
    assert totals == [sum(drawn[: k + 1]) for k in range(len(drawn))]
    # the run stops at the first step that reaches the budget, long before max_steps
    assert totals[-1] >= 60 and all(t < 60 for t in totals[:-1])
    assert summary["steps"] == len(rows) < 50
    assert summary["rollouts"] == totals[-1]
    assert summary["ended_by"] == "max_rollouts"


def test_max_time_stops_after_the_step_in_flight_saved_evaluated_and_resumable(
    tmp_path, monkeypatch
):
    """A job's wall-clock limit: the run ends after the step during which `max_time_s` passed,
    with that step's checkpoint and the final evaluation, and `--resume` goes on to
    `max_steps`. The clock is the run's, here 100 s a step."""
    cfg = small_config(tmp_path, "trainer.max_steps=5", "trainer.max_time_s=250")
    assert dict(training_plan(cfg))["steps"] == "5 (≤ 250 s)"  # what --dry-run prints
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    monkeypatch.setattr(RunLifecycle, "seconds", property(lambda _: 100.0 * trainer.step))
    summary = trainer.train()
    assert summary["steps"] == 3 and summary["ended_by"] == "max_time_s"
    assert RunDir(tmp_path / "run").latest_checkpoint()[0] == 3
    rows = trainer.run.read_jsonl(trainer.run.metrics_path)
    assert rows[-1]["step"] == 3 and "eval/accuracy" in rows[-1]  # the final evaluation
    assert summary["final_eval"]["accuracy"] == rows[-1]["eval/accuracy"]
    resumed = GRPOTrainer(small_config(tmp_path, "trainer.max_steps=5"), RunDir(tmp_path / "run"))
    summary = resumed.train(resume=True)
    assert summary["steps"] == 5 and summary["ended_by"] == "max_steps"


def test_user_model_directory_and_dataset_environment(tmp_path, small_policy):
    model_dir = tmp_path / "my-model"
    small_policy.save(model_dir)
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "my_reward.py").write_text(
        "def exact(completions, answer, **kw):\n"
        "    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n"
    )
    data = small_config_data(tmp_path)
    data["envs"] = [
        {
            "name": "sums",
            "type": "dataset",
            "args": {
                "path": str(tmp_path / "data.jsonl"),
                "reward": f"{tmp_path / 'my_reward.py'}:exact",
                "test_fraction": 0.2,
            },
        }
    ]
    path = write_config(tmp_path, data)
    assert main(["train", str(path), "-o", f"policy.model={model_dir}", "--quiet"]) == 0
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert "sums/accuracy" in summary["final_eval"]


def test_an_update_out_of_device_memory_says_to_split_the_batch(tmp_path, monkeypatch, capsys):
    """A GPU that cannot hold the step's sequences in one forward and backward (the default,
    `micro_batch_size: null`) gets one error naming the setting, exit code 2, and the run's
    checkpoints so far stay. The device's allocator is stood in for: the first micro-batch of
    step 2 raises what CUDA raises."""
    import honed.rl.update as update

    calls = {"n": 0}
    real = update.score

    def score(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:  # step 1 (one micro-batch) runs, step 2 does not fit
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 472.00 MiB.")
        return real(*args, **kwargs)

    monkeypatch.setattr(update, "score", score)
    data = small_config_data(tmp_path)
    data["checkpoint"]["every"] = 1
    assert main(["train", str(write_config(tmp_path, data)), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"the update ran out of memory on cpu scoring \d+ sequences", err), err
    assert "(trainer.micro_batch_size: null, the whole step at once): set" in err
    assert len(err.strip().splitlines()) == 1
    saved, _ = RunDir(tmp_path / "run").latest_checkpoint()
    assert 1 <= saved < data["trainer"]["max_steps"]  # the steps before the failure stay
