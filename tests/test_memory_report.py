"""The memory table (`MemoryEnv.report`, `honed eval`) and the LLM reader/judge wiring."""

from __future__ import annotations

import json

import pytest
import yaml
from openai_server import FakeOpenAIServer, FakeRequest
from test_memory_env import HAND, ScriptedGenerator, _chunk

from honed.cli import main
from honed.envs.base import Reporting
from honed.envs.memory import MemoryEnv
from honed.envs.memory.report import COLUMNS, paired_gain
from honed.errors import HonedError
from honed.models.policy import Policy
from honed.runs.rundir import RunDir


def test_report_sets_agents_beside_the_baselines_on_the_same_instances():
    # no_call_credit 1: the reference skips chatter chunks; the silent agent earns full r2/r4
    env = MemoryEnv("memory", test_size=3, no_call_credit=1.0)
    assert isinstance(env, Reporting)
    items = env.items("test")[:2]
    targets = dict(pair for item in items for pair in env.sft_examples(item))
    follows = ScriptedGenerator(lambda prompt, seed: targets[prompt])
    silent = ScriptedGenerator(lambda prompt, seed: "[]")

    table = env.report({"reference agent": follows, "silent agent": silent}, "test", num_items=2)

    paired = ["accuracy − reference agent", "± (paired SE)"]  # with two agents or more
    assert table.columns == [*COLUMNS, *paired]
    rows = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows}
    assert list(rows) == [
        "no memory",
        "store everything",
        "long-context (last 32K tokens)",
        "RAG top-2 chunks",
        "rule",
        "rule, told the distractors",
        "reference plan",
        "MemAgent-style rolling memory (silent agent)",
        "reference agent",
        "silent agent",
    ]
    chunks = sum(len(item.data["chunks"]) for item in items)
    assert sum(len(prompts) for prompts, _ in follows.batches) == chunks  # only those 2 items
    ref, agent, silent_row = rows["reference plan"], rows["reference agent"], rows["silent agent"]
    assert agent["accuracy (r1)"] == 1.0 == ref["accuracy (r1)"]
    assert agent["memory tokens"] == ref["memory tokens"]
    assert agent["compression (r3)"] == pytest.approx(ref["compression (r3)"])
    assert agent["tool success (r2)"] == 1.0 == agent["validity (r4)"]
    assert agent["chunk reward"] == pytest.approx(2.1 + 0.05 * agent["compression (r3)"])
    assert silent_row["accuracy (r1)"] == 0.0 and silent_row["memory tokens"] == 0.0
    assert silent_row["chunk reward"] == pytest.approx(0 + 1 + 0.05 * 1 + 0.1 * 1)
    assert silent_row[paired[0]] == -1.0 and silent_row[paired[1]] == 0.0  # lost everything
    assert all(row[paired[0]] is None for name, row in rows.items() if name != "silent agent")
    everything = rows["store everything"]
    assert everything["accuracy (r1)"] == 1.0 and everything["compression (r3)"] == 0.0
    assert everything["tool success (r2)"] is None and everything["chunk reward"] is None
    assert rows["no memory"]["compression (r3)"] == 1.0
    # on the simple data the rule answers everything the ideal reader asks (why the CPU
    # demonstration uses the paper-shaped data and the extractive reader)
    assert rows["rule"]["accuracy (r1)"] == 1.0
    assert rows["rule"]["memory tokens"] >= ref["memory tokens"]
    assert table.to_dict()["rows"][0]["memory"] == "no memory"
    rolling = rows["MemAgent-style rolling memory (silent agent)"]  # its paragraph is "[]"
    assert rolling["accuracy (r1)"] == 0.0 and rolling["memory tokens"] == 0.0
    assert all(row["reader errors"] == 0 for row in rows.values())


def _memory_run_config(tmp_path) -> dict:
    return {
        "seed": 0,
        "run_dir": str(tmp_path / "run"),
        "policy": {
            "tiny": {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 512,
            }
        },
        "envs": [
            {
                "name": "memory",
                "args": {
                    "train_size": 4,
                    "validation_size": 1,
                    "test_size": 2,
                    "entities": 1,
                    "facts": 1,
                    "events": 1,
                    "updates": 0,
                    "relations": 0,
                    "chatter": 0,
                },
            }
        ],
        "sft": {"steps": 1, "batch_size": 2, "prompt_loss_weight": 0.1},
        "trainer": {
            "max_steps": 1,
            "prompts_per_step": 1,
            "num_generations": 2,
            "max_completion_length": 6,
        },
        "eval": {"num_items": 2},
        "logging": {"progress": False},
    }


def test_paired_gain_is_the_mean_per_instance_difference_and_its_standard_error():
    """Two agents whose accuracies differ by 0.1 on every instance gain 0.1 with no error,
    however far apart the instances are; a gain on half the instances has the binomial-like
    error of the differences (sd of [0, 0.2, 0, 0.2] is 0.1155, over √4)."""
    before = [0.1, 0.9, 0.5, 0.3]
    assert paired_gain(before, [b + 0.1 for b in before]) == pytest.approx([0.1, 0.0], abs=1e-12)
    gain, error = paired_gain(before, [0.1, 1.1, 0.5, 0.5])
    assert gain == pytest.approx(0.1) and error == pytest.approx(0.11547 / 2, rel=1e-4)
    assert paired_gain([0.5], [0.7]) == pytest.approx([0.2, 0.0])


def test_eval_on_a_memory_run_prints_the_table_and_adds_it_to_the_summary(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")  # the table on one line per row
    path = tmp_path / "memory.yaml"
    path.write_text(yaml.safe_dump(_memory_run_config(tmp_path)))
    assert main(["train", str(path), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--split", "test"]) == 0
    out = capsys.readouterr().out
    for label in ("store everything", "RAG top-2 chunks", "warm-start agent", "GRPO agent"):
        assert label in out, label

    summary = RunDir(tmp_path / "run").read_summary()
    report = summary["reports"]["test"]
    assert report["checkpoint"].endswith("step_1")
    names = [row["memory"] for row in report["memory"]["rows"]]
    assert names[:4] == [
        "no memory",
        "store everything",
        "long-context (last 32K tokens)",
        "RAG top-2 chunks",
    ]
    assert names[-2:] == ["warm-start agent", "GRPO agent (step_1)"]
    written = json.loads((tmp_path / "run" / "eval" / "step_1_test.json").read_text())
    assert written["reports"]["memory"] == report["memory"]


def test_eval_rolls_the_evaluated_policy_out_once_for_metrics_and_report(
    tmp_path, capsys, monkeypatch
):
    """The report's row of the evaluated policy replays the metrics' rollout (`MemoSampler`):
    every (prompt, seed) reaches the evaluated model once, the warm-start's rows are sampled
    by their own model, and the row and the metrics agree."""
    path = tmp_path / "memory.yaml"
    path.write_text(yaml.safe_dump(_memory_run_config(tmp_path)))
    assert main(["train", str(path), "--quiet"]) == 0
    calls: list[tuple[int, tuple[int, ...], int]] = []
    sample = Policy.generate

    def counted(self, prompts, seeds, params):
        calls.extend((id(self), tuple(p), s) for p, s in zip(prompts, seeds, strict=True))
        return sample(self, prompts, seeds, params)

    monkeypatch.setattr(Policy, "generate", counted)
    out = tmp_path / "eval.json"
    assert main(["eval", str(tmp_path / "run"), "--quiet", "--out", str(out)]) == 0
    models = {model for model, _, _ in calls}
    assert len(models) == 2  # the evaluated policy and the warm-start
    evaluated = calls[0][0]
    mine = [call for call in calls if call[0] == evaluated]
    assert mine and len(mine) == len(set(mine))
    written = json.loads(out.read_text())
    rows = {row["memory"]: row for row in written["reports"]["memory"]["rows"]}
    assert rows["GRPO agent (step_1)"]["accuracy (r1)"] == pytest.approx(written["memory/accuracy"])


def _llm(req: FakeRequest) -> str:
    """A judge that accepts everything and a reader that knows only where Ann lives."""
    text = req.last_user_text
    if "Answer VALID or INVALID" in text:
        return "VALID"
    system = req.messages[0]["content"]
    return "Oslo" if "Where does Ann live" in text and "Oslo" in system else "unknown"


def test_llm_reader_and_judge_are_built_from_the_chat_argument_and_checked_first():
    with FakeOpenAIServer(_llm) as server:
        env = MemoryEnv(
            "memory",
            reader="llm",
            judge="llm",
            chat={"base_url": server.base_url, "model": "fake-model", "max_retries": 0},
        )
        assert [r.path for r in server.requests] == ["/v1/models"]  # checked before any work
        replies = {
            "Ann lives in Oslo. It rained.": '[{"i":"s","c":"Ann lives in Oslo"}]',
            "The tea was cold.": "[]",
            "Day 3: Ann sang.": '[{"i":"e","c":"Day 3: Ann sang"}]',
        }
        generator = ScriptedGenerator(lambda prompt, seed: replies[_chunk(prompt)])
        (group,) = env.rollout([HAND], generator, 1, seed=0)
        (traj,) = group.trajectories
        assert traj.info["answers"] == [1.0, 0.0]  # the reader's answers, scored
        # the judge's verdicts: both writes valid; the chunk without calls scores 0 (official)
        assert traj.components["validity"] == pytest.approx(2 / 3)
        asked = [r.last_user_text for r in server.chat_requests]
        assert sum("Answer VALID or INVALID" in t for t in asked) == 2  # one per write
        assert {"Where does Ann live?", "When did Ann sing?"} <= set(asked)


def test_llm_reader_configuration_errors_are_one_line():
    with FakeOpenAIServer(_llm) as server:
        with pytest.raises(HonedError, match="'other-model' is not served"):
            MemoryEnv(
                "memory", reader="llm", chat={"base_url": server.base_url, "model": "other-model"}
            )
        with pytest.raises(
            HonedError, match=r"memory env 'memory': chat\.modle.*did you mean 'model'"
        ):
            MemoryEnv("memory", judge="llm", chat={"base_url": server.base_url, "modle": "x"})
    with pytest.raises(HonedError, match="needs a chat model"):
        MemoryEnv("memory", reader="llm")


class _EchoReader:
    """A chat model that answers with the memory it was shown (the judge gets its own prompt
    back, which says both yes and no: no verdict)."""

    def chat(self, messages):
        return messages[0]["content"]


def test_report_on_paper_data_has_a_column_per_data_set_and_counts_reader_errors():
    pytest.importorskip("pyarrow", reason="parquet fixtures need pyarrow")
    from pathlib import Path

    from honed.envs.memory.store import word_tokens

    path = (
        Path(__file__).parent / "fixtures" / "memory" / "memalpha_memoryagentbench" / "test.parquet"
    )
    env = MemoryEnv(
        "memory", path=str(path), reader={"type": "llm", "concurrency": 2}, chat=_EchoReader()
    )
    silent = ScriptedGenerator(lambda prompt, seed: "[]")
    table = env.report({"silent agent": silent}, "test")
    sources = [
        "ruler_qa1_197K",
        "icl_banking77_5900shot_balance",
        "infbench_sum_eng_shots2",
        "longmemeval_s*",
    ]
    assert table.columns[1:5] == [f"accuracy: {s}" for s in sources]
    assert table.columns[5:9] == [f"memory tokens: {s}" for s in sources]
    rows = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows}
    everything = rows["store everything"]
    assert everything["accuracy: ruler_qa1_197K"] == 1.0  # "Kova Ltd" is in the echoed chunks
    assert everything["accuracy: infbench_sum_eng_shots2"] == 1.0  # every keyword is there
    assert everything["accuracy: icl_banking77_5900shot_balance"] == 0.0  # no \boxed{label}
    assert everything["accuracy: longmemeval_s*"] == 0.0  # its one answer had no verdict
    assert everything["reader errors"] == 1
    assert everything["accuracy (r1)"] == pytest.approx(0.5)  # mean over the four data sets
    assert rows["no memory"]["accuracy: ruler_qa1_197K"] == 0.0
    assert rows["no memory"]["memory tokens: ruler_qa1_197K"] == 0.0
    chunks = env.instances("test")[0].chunks  # store-everything keeps all of the input
    assert everything["memory tokens: ruler_qa1_197K"] == sum(word_tokens(c) for c in chunks)
    assert rows["silent agent"]["reader errors"] == 1  # the empty memory's LME answer
