"""Resume: the checkpoint supplies the state, the config in force the settings.

A run resumed with its own config repeats an uninterrupted run bit for bit (weights, sampler,
curricula, normalisers, the completions sampled after the resume, and the rewards of an
environment that draws from the process-wide RNGs), for any micro-batch size; a run resumed
with changed settings uses them from the next step on, says so, and refuses the ones that
cannot apply.
"""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
import torch
from safetensors.torch import load_file
from tiny_run import half_spread_env_data, noisy_env_data, small_config, spread_env_data

from honed.cli import main
from honed.errors import HonedError
from honed.rl.schedule import WarmupDecay
from honed.rl.trainer import STATE_FILE, GRPOTrainer, TrainingInterrupted
from honed.runs.progress import Reporter
from honed.runs.rundir import RunDir

# Per-step values that are timings, not results: durations, and the wall clock of each row.
TIMINGS = ("perf/", "time")


def _weights(run: RunDir, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run.checkpoints / f"step_{step}" / "model.safetensors"))


def _rows(run: RunDir) -> list[dict]:
    return [
        {k: v for k, v in r.items() if not k.startswith(TIMINGS)}
        for r in run.read_jsonl(run.metrics_path)
        if "reward/mean" in r
    ]


def _completions(run: RunDir) -> list[tuple[int, str, str, float]]:
    return [
        (r["step"], r["item"], r["completion"], r["reward"])
        for r in run.read_jsonl(run.samples_path)
    ]


def _interrupt_after(
    trainer: GRPOTrainer, steps: int, signum: int = signal.SIGINT
) -> TrainingInterrupted:
    """Run `trainer` and press Ctrl-C (a real SIGINT; or send `signum`) while its step `steps`
    is under way: the step finishes, its checkpoint is written, and the run stops."""
    calls = {"n": 0}
    real_step = trainer.train_step

    def step_with_ctrl_c():
        calls["n"] += 1
        if calls["n"] == steps:
            os.kill(os.getpid(), signum)
        return real_step()

    trainer.train_step = step_with_ctrl_c
    with pytest.raises(TrainingInterrupted) as interrupted:
        trainer.train()
    assert calls["n"] == steps, "the run stopped after the step under way, not later"
    return interrupted.value


RESUME_SETTINGS = (
    "curriculum.strategy=frontier",
    "reward_norm.mode=zscore",
    "reward_norm.warmup=4",
    "trainer.scale_rewards=none",
    "trainer.warmup_steps=2",
    "trainer.lr_scheduler_type=linear",
    # without clipping the gradient's scale (hence the normaliser's state) reaches the weights
    "trainer.max_grad_norm=null",
    # every group's first completion goes to samples.jsonl
    "logging.samples_per_step=4",
)


@pytest.mark.parametrize("micro_batch_size", [None, 1, 3])
def test_resume_repeats_the_uninterrupted_run_bit_for_bit(tmp_path, micro_batch_size):
    mb = f"trainer.micro_batch_size={'null' if micro_batch_size is None else micro_batch_size}"

    def config(sub: str, *more: str):
        data = noisy_env_data(tmp_path / sub)
        return small_config(tmp_path / sub, *RESUME_SETTINGS, mb, *more, data=data)

    straight = GRPOTrainer(config("a"), RunDir(tmp_path / "a/run"))
    straight.train()
    _interrupt_after(GRPOTrainer(config("b", "checkpoint.every=1"), RunDir(tmp_path / "b/run")), 2)
    resumed = GRPOTrainer(config("b"), RunDir(tmp_path / "b/run"))
    resumed.train(resume=True)
    # settings: only the checkpoint interval differed between the two invocations
    assert [c.key for c in resumed.resume_changes] == ["checkpoint.every"]
    a, b = straight.run, resumed.run
    rows = _rows(b)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert sum(r["groups/trained"] for r in rows) >= 10
    wa, wb = _weights(a, 4), _weights(b, 4)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    # what was sampled after the resume, and the rewards a noisy environment gave it
    assert _completions(b) == _completions(a)
    assert rows == _rows(a)
    assert straight.sampler.state_dict() == resumed.sampler.state_dict()
    assert straight.rollouts_generated == resumed.rollouts_generated > 0
    for name, normalizer in straight.normalizers.items():
        assert normalizer.state_dict() == resumed.normalizers[name].state_dict()
    # the curriculum saw every group of the four steps
    assert resumed.sampler.curricula["digits"].metrics_dict()["curriculum/total_updates"] == 16


def test_resume_with_skipping_and_screening_repeats_the_run_bit_for_bit(tmp_path):
    """The skip history (streaks, p_easy and p_hard, its generator, the chances of the draws
    not yet observed) and the rollout counts are in the checkpoint: the resumed run skips,
    screens and counts exactly as the uninterrupted one."""
    settings = (
        "curriculum.skip.enabled=true",
        "curriculum.skip.p_step=0.1",
        "trainer.screening.rollouts=2",
        "trainer.dynamic_sampling=true",
        "trainer.max_sampling_rounds=2",
        "trainer.max_steps=6",
        "logging.samples_per_step=4",
    )

    def config(sub: str, *more: str):
        return small_config(tmp_path / sub, *settings, *more, data=half_spread_env_data(tmp_path))

    straight = GRPOTrainer(config("a"), RunDir(tmp_path / "a/run"))
    straight.train()
    _interrupt_after(GRPOTrainer(config("b", "checkpoint.every=1"), RunDir(tmp_path / "b/run")), 3)
    resumed = GRPOTrainer(config("b"), RunDir(tmp_path / "b/run"))
    resumed.train(resume=True)
    rows = _rows(resumed.run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows == _rows(straight.run)
    assert _completions(resumed.run) == _completions(straight.run)
    assert resumed.sampler.state_dict() == straight.sampler.state_dict()
    assert resumed.counts == straight.counts
    wa, wb = _weights(straight.run, 6), _weights(resumed.run, 6)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # it did skip after the resume, and some screens stopped
    assert rows[-1]["sampling/skipped_total"] > rows[2]["sampling/skipped_total"] > 0
    assert rows[-1]["rollouts/generated"] < 4 * sum(r["sampling/groups_drawn"] for r in rows)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_and_resumed_run_ends_as_the_uninterrupted_one(tmp_path, signum):
    """Ctrl-C, or a SIGTERM as a job scheduler preempting the run sends: the step under way
    finishes and is saved, and the resumed run repeats the uninterrupted one bit for bit."""
    data = spread_env_data(tmp_path)
    straight = GRPOTrainer(
        small_config(tmp_path / "a", "checkpoint.every=0", data=data), RunDir(tmp_path / "a/run")
    )
    straight.train()
    cfg = small_config(tmp_path / "b", "checkpoint.every=0", data=data)
    stop = _interrupt_after(GRPOTrainer(cfg, RunDir(tmp_path / "b/run")), 2, signum)
    assert (stop.step, stop.finished, stop.signum) == (2, True, signum)
    assert stop.path == tmp_path / "b/run/checkpoints/step_2"
    assert (stop.path / STATE_FILE).is_file()
    again = GRPOTrainer(cfg, RunDir(tmp_path / "b/run"))
    again.train(resume=True)
    assert again.step == 4
    assert _rows(again.run) == _rows(straight.run)
    wa, wb = _weights(straight.run, 4), _weights(again.run, 4)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_second_ctrl_c_mid_step_saves_nothing_and_resumes_from_the_last_checkpoint(tmp_path):
    """Cut short in the middle of its update (after sampling, which advanced the sampler and
    the normalisers), a step leaves no checkpoint: saving that state would resume a run that
    differs from the uninterrupted one."""
    data = spread_env_data(tmp_path)
    straight = GRPOTrainer(
        small_config(tmp_path / "a", "checkpoint.every=1", data=data), RunDir(tmp_path / "a/run")
    )
    straight.train()
    cfg = small_config(tmp_path / "b", "checkpoint.every=1", data=data)
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "b/run"))
    real_collect = trainer.collect

    def collect_then_second_ctrl_c():
        out = real_collect()
        if trainer.step == 2:  # step 3 has sampled
            raise KeyboardInterrupt
        return out

    trainer.collect = collect_then_second_ctrl_c
    with pytest.raises(TrainingInterrupted) as interrupted:
        trainer.train()
    stop = interrupted.value
    assert (stop.step, stop.finished) == (2, False)
    assert stop.path == tmp_path / "b/run/checkpoints/step_2"
    assert not (tmp_path / "b/run/checkpoints/step_3").exists()
    again = GRPOTrainer(cfg, RunDir(tmp_path / "b/run"))
    again.train(resume=True)
    assert _rows(again.run) == _rows(straight.run)
    wa, wb = _weights(straight.run, 4), _weights(again.run, 4)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ----------------------------------------------------------------------------- changed settings


def _lrs(run: RunDir) -> list[float]:
    return [r["learning_rate"] for r in _rows(run)]


SCHEDULE = ("trainer.lr_scheduler_type=linear", "trainer.warmup_steps=1", "checkpoint.every=1")


@pytest.mark.parametrize(
    ("first", "then"),
    [
        # a finished 4-step run extended to 8 steps
        ("trainer.max_steps=4", ("trainer.max_steps=8",)),
        # an 8-step run stopped after 4, resumed with another peak learning rate
        (None, ("trainer.learning_rate=0.003",)),
        # ... or another schedule and warm-up
        (None, ("trainer.lr_scheduler_type=cosine", "trainer.warmup_steps=3")),
    ],
)
def test_a_resumed_run_uses_the_new_schedule_from_the_next_step(tmp_path, first, then):
    data = spread_env_data(tmp_path)

    def trainer(sub: str, *more: str) -> GRPOTrainer:
        cfg = small_config(tmp_path / sub, *SCHEDULE, "trainer.max_steps=8", *more, data=data)
        return GRPOTrainer(cfg, RunDir(tmp_path / sub / "run"))

    fresh = trainer("a", *then)  # a run started with the new settings
    fresh.train()
    if first:
        trainer("b", first).train()
    else:
        _interrupt_after(trainer("b"), 4)
    resumed = trainer("b", *then)
    resumed.train(resume=True)
    assert sorted(c[0] for c in resumed.resume_changes) == sorted(c.split("=")[0] for c in then)
    assert len(_lrs(resumed.run)) == 8
    assert _lrs(resumed.run)[4:] == _lrs(fresh.run)[4:]
    assert _lrs(resumed.run)[4] > 0  # a 4-step linear schedule would have reached 0 here
    # and what the fresh run logs is its schedule: step k trains at peak · λ(k − 1)
    cfg = fresh.config.trainer
    shape = WarmupDecay(cfg.lr_scheduler_type, cfg.warmup_steps, cfg.max_steps)
    assert _lrs(fresh.run) == pytest.approx([cfg.learning_rate * shape(k) for k in range(8)])


def test_changed_settings_are_printed_one_line_each(tmp_path, capsys):
    data = spread_env_data(tmp_path)
    data["logging"]["progress"] = True
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(data))
    assert main(["train", str(path), "--quiet"]) == 0
    capsys.readouterr()
    extra = ["-o", "trainer.max_steps=6", "-o", "trainer.learning_rate=0.002"]
    assert main(["train", str(path), "--resume", *extra]) == 0
    out = capsys.readouterr().out
    assert "trainer.max_steps: 4 -> 6" in out
    assert "trainer.learning_rate: 0.001 -> 0.002" in out


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("policy.tiny.hidden_size=64", "policy.tiny.hidden_size"),
        ("sft.steps=5", "sft.steps"),
        ("envs.0.name=other", "envs.0.name"),
    ],
)
def test_a_setting_that_cannot_apply_stops_the_resume_naming_it(tmp_path, capsys, override, key):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(spread_env_data(tmp_path)))
    assert main(["train", str(path), "--quiet", "-o", "trainer.max_steps=2"]) == 0
    run = RunDir(tmp_path / "run")
    config_before = run.config_path.read_text()
    metrics_before = run.metrics_path.read_text()
    capsys.readouterr()
    assert main(["train", str(path), "--resume", "--quiet", "-o", override]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
    # nothing written before the error is lost or changed
    assert run.config_path.read_text() == config_before
    assert run.metrics_path.read_text() == metrics_before


def test_queued_requests_fix_the_batch_size_of_an_asynchronous_run(tmp_path):
    data = spread_env_data(tmp_path)
    lag = ("distributed.max_staleness=1", "trainer.max_steps=2", "checkpoint.every=1")
    GRPOTrainer(small_config(tmp_path, *lag, data=data), RunDir(tmp_path / "run")).train()
    state = torch.load(tmp_path / "run/checkpoints/step_1" / STATE_FILE, weights_only=False)
    assert state["rollout_queue"]  # step 2's request was drawn at step 1
    # resume from step 1, where a request is queued
    shutil.rmtree(tmp_path / "run/checkpoints/step_2")
    more = small_config(tmp_path, *lag, "trainer.prompts_per_step=2", data=data)
    with pytest.raises(HonedError, match=r"trainer\.prompts_per_step"):
        GRPOTrainer(more, RunDir(tmp_path / "run")).train(resume=True)


def test_resuming_a_finished_run_trains_nothing_and_logs_no_second_evaluation(tmp_path):
    data = spread_env_data(tmp_path)
    cfg = small_config(tmp_path, "eval.every=2", data=data)
    first = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    summary = first.train()
    rows = first.run.read_jsonl(first.run.metrics_path)
    evals = [r["step"] for r in rows if "eval/accuracy" in r]
    # initial, step 2, and step 4 once: the periodic evaluation at the last step is the final one
    assert evals == [0, 2, 4]
    again = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    resumed_summary = again.train(resume=True)
    assert again.run.read_jsonl(again.run.metrics_path) == rows
    assert resumed_summary["final_eval"] == summary["final_eval"]
    assert resumed_summary["steps"] == 4


def test_curriculum_settings_of_the_config_in_force_apply_on_resume(tmp_path):
    data = spread_env_data(tmp_path)
    first = small_config(tmp_path, "trainer.max_steps=2", data=data)
    GRPOTrainer(first, RunDir(tmp_path / "run")).train()
    more = ("trainer.max_steps=3", "curriculum.n_bins=3", "curriculum.strategy=easy_first")
    resumed = GRPOTrainer(small_config(tmp_path, *more, data=data), RunDir(tmp_path / "run"))
    resumed.train(resume=True)
    assert {key for key, _, _ in resumed.resume_changes} == {
        "trainer.max_steps",
        "curriculum.n_bins",
        "curriculum.strategy",
    }
    curriculum = resumed.sampler.curricula["digits"]
    assert curriculum.n_bins == 3 and curriculum.strategy == "easy_first"
    # the scores of the first two steps were kept: 8 groups, then 4 more
    assert curriculum.metrics_dict()["curriculum/total_updates"] == 12
    assert len(resumed.run.read_summary()["environments"]["digits"]["curriculum_bins"]) == 3


def test_reward_norm_settings_of_the_config_in_force_apply_on_resume(tmp_path):
    data = spread_env_data(tmp_path)
    norm = ("reward_norm.mode=zscore", "reward_norm.warmup=0", "trainer.scale_rewards=none")
    GRPOTrainer(
        small_config(tmp_path, *norm, "trainer.max_steps=2", data=data), RunDir(tmp_path / "run")
    ).train()
    more = (*norm, "trainer.max_steps=3", "reward_norm.clip=0.5")
    resumed = GRPOTrainer(small_config(tmp_path, *more, data=data), RunDir(tmp_path / "run"))
    resumed.setup(resume=True)
    normalizer = resumed.normalizers["digits"]
    assert normalizer.clip == 0.5 and normalizer.count == 2 * 4 * 4  # two steps' rewards kept
    assert ("reward_norm.clip", 5.0, 0.5) in resumed.resume_changes
    resumed.rollouts.close()


def test_a_checkpoint_without_its_config_reports_what_the_state_itself_says(tmp_path, capsys):
    """Checkpoints written before they held their config: the sampler and normalisers say
    which of their settings the config in force changed."""
    data = spread_env_data(tmp_path)
    first = small_config(tmp_path, "trainer.max_steps=2", "reward_norm.mode=zscore", data=data)
    GRPOTrainer(first, RunDir(tmp_path / "run")).train()
    path = tmp_path / "run/checkpoints/step_2" / STATE_FILE
    state = torch.load(path, weights_only=False)
    del state["config"]
    torch.save(state, path)
    (tmp_path / "run/config.yaml").unlink()
    more = ("trainer.max_steps=3", "reward_norm.mode=minmax", "curriculum.n_bins=2")
    resumed = GRPOTrainer(
        small_config(tmp_path, *more, data=data), RunDir(tmp_path / "run"), Reporter()
    )
    resumed.setup(resume=True)
    resumed.rollouts.close()
    out = capsys.readouterr().out
    assert "curriculum.n_bins: 5 -> 2" in out and "reward_norm.mode: zscore -> minmax" in out
    assert resumed.normalizers["digits"].mode == "minmax"
