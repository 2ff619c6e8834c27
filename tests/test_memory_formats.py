"""Loading Mem-α's and MemoryAgentBench's data formats (fixtures in tests/fixtures/memory)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from honed.cli import main
from honed.envs.memory import MemoryEnv
from honed.envs.memory.formats import detect, load_data, pack_sentences
from honed.errors import HonedError
from honed.runs.rundir import RunDir

FIXTURES = Path(__file__).parent / "fixtures" / "memory"
MEMALPHA = FIXTURES / "memalpha"
MAB = FIXTURES / "memalpha_memoryagentbench" / "test.parquet"
ORIGINAL = FIXTURES / "memoryagentbench.jsonl"
HONED = FIXTURES / "honed.jsonl"

pytest.importorskip("pyarrow", reason="parquet fixtures need pyarrow: pip install 'honed[memory]'")


def test_memalpha_folder_loads_train_and_test_files_with_their_sources():
    data = load_data(MEMALPHA)
    assert [i.source for i in data["train"]] == ["squad", "pubmed-rct", "booksum"]
    assert [i.source for i in data["test"]] == ["perltqa", "lme_train"]
    assert data["validation"] == []
    squad = data["train"][0]
    assert squad.id == "squad-0"
    assert squad.chunks[0].startswith("[Dialogue between User and Assistant on 2024-01-01")
    assert [(q.question, q.answers) for q in squad.questions] == [
        ("When was the Velor bridge finished?", ["1931"]),
        ("Who designed the Kessel station?", ["Ida Brandt"]),
    ]
    booksum = data["train"][2].questions[0]  # a ", "-joined keyword string becomes keywords
    assert booksum.keywords == ["Mara", "island", "lighthouse", "storm", "keeper"]
    assert booksum.answers == []
    assert data["test"][0].questions[0].answers == ["rowing;chess"]  # parts split when scored


def test_a_mapping_puts_each_file_in_its_split():
    data = load_data({"train": MEMALPHA / "train.parquet", "validation": MEMALPHA / "test.parquet"})
    assert len(data["train"]) == 3 and len(data["validation"]) == 2 and data["test"] == []
    with pytest.raises(HonedError, match="path keys must be splits"):
        load_data({"training": MEMALPHA / "train.parquet"})


def test_processed_memoryagentbench_keeps_answer_lists_and_keyword_lists():
    data = load_data(MAB, format="memalpha-memoryagentbench")
    ruler, icl, summary, lme = data["test"]
    assert ruler.source == "ruler_qa1_197K" and ruler.questions[0].answers == ["Kova Ltd", "Kova"]
    assert icl.questions[0].answers == ["12"]
    assert summary.questions[0].keywords == ["twins", "farm", "city"]
    assert lme.source == "longmemeval_s*"
    assert load_data(MAB)["test"] == data["test"]  # detected: same columns as memalpha


def test_original_memoryagentbench_records_are_chunked_by_tokens():
    data = load_data(ORIGINAL, chunk_tokens=12)
    ruler, icl, lme = data["test"]
    assert ruler.source == "ruler_qa1_197K"
    assert [q.answers for q in ruler.questions] == [["Kova Ltd", "Kova"], ["January", "in January"]]
    assert len(ruler.chunks) > 1 and all(len(c.split()) <= 12 for c in ruler.chunks)
    assert " ".join(ruler.chunks).startswith("Document 1: The Orla dam holds the Senn lake.")
    assert icl.questions[0].answers == ["12"]
    # LongMemEval's context is a [timestamp, session] list rendered as a dialogue
    assert lme.chunks[0].startswith("[Dialogue at timestamp 2023/05/20 (Sat) 02:21]")
    assert "<User>I moved to Tartu in May." in lme.chunks[0]


def test_honed_jsonl_loads_through_the_same_entry():
    data = load_data(HONED)
    assert [i.id for i in data["train"]] == ["doc-1"] and [i.id for i in data["test"]] == ["doc-2"]
    assert data["train"][0].source == "honed"


def test_format_is_detected_from_the_first_record_or_refused():
    assert detect({"chunks": "[]", "questions_and_answers": "[]", "data_source": "x"}) == "memalpha"
    assert detect({"context": "", "questions": [], "answers": []}) == "memoryagentbench"
    assert detect({"chunks": [], "questions": []}) == "honed"
    with pytest.raises(ValueError, match="cannot tell its format"):
        detect({"text": "hello"})
    with pytest.raises(HonedError, match=r"unknown format 'memalfa'.*did you mean 'memalpha'"):
        load_data(HONED, format="memalfa")


def _write(tmp_path: Path, name: str, records: list) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


GOOD = {
    "instance_id": 0,
    "chunks": json.dumps(["a chunk"]),
    "questions_and_answers": json.dumps([{"question": "q?", "answer": "a"}]),
    "data_source": "squad",
}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({**GOOD, "chunks": "[not json"}, "'chunks' is not valid JSON"),
        ({**GOOD, "chunks": json.dumps([])}, "'chunks' must be a non-empty list"),
        ({**GOOD, "data_source": ""}, "'data_source' must be a non-empty string"),
        (
            {**GOOD, "questions_and_answers": json.dumps([{"answer": "a"}])},
            "questions_and_answers[0] needs a 'question'",
        ),
        (
            {**GOOD, "questions_and_answers": json.dumps([{"question": "q", "answer": 3}])},
            "questions_and_answers[0]: 'answer' must be",
        ),
    ],
)
def test_a_malformed_memalpha_record_is_named_by_file_and_index(tmp_path, bad, message):
    path = _write(tmp_path, "rows.jsonl", [GOOD, GOOD | {"instance_id": 1}, bad])
    with pytest.raises(HonedError, match=re.escape(f"rows.jsonl: record 2: {message}")):
        load_data(path)


def test_malformed_original_and_honed_records_and_bad_json_are_named(tmp_path):
    record = {"context": "x.", "questions": ["q?"], "answers": [["a"]], "metadata": {"source": "s"}}
    path = _write(tmp_path, "mab.jsonl", [record, {**record, "answers": []}])
    with pytest.raises(HonedError, match=r"mab.jsonl: record 1: 'answers' must be a list as long"):
        load_data(path)
    path = _write(tmp_path, "h.jsonl", [{"chunks": ["x"], "questions": [{"question": "q"}]}])
    with pytest.raises(HonedError, match=r"h.jsonl: record 0: questions\[0\] needs an 'answer'"):
        load_data(path, format="honed")
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + '{"chunks": ' + "\n")
    with pytest.raises(HonedError, match=r"cut.jsonl: record 1 \(line 3\): not valid JSON"):
        load_data(path)
    broken = tmp_path / "train.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(HonedError, match=r"train\.parquet: not a readable parquet file"):
        load_data(broken)


def test_long_sentences_stay_whole_and_order_is_kept():
    text = "One two three. Four five six seven eight! Nine? Ten."
    assert pack_sentences(text, 4) == ["One two three.", "Four five six seven eight!", "Nine? Ten."]
    assert pack_sentences("", 4) == []


def _tiny_config(tmp_path: Path, args: dict) -> Path:
    config = {
        "seed": 0,
        "run_dir": str(tmp_path / "run"),
        "policy": {
            "tiny": {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 1024,
            }
        },
        "envs": [{"name": "memory", "args": {"prompt_chars": 300, **args}}],
        "trainer": {
            "max_steps": 2,
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_completion_length": 8,
        },
        "eval": {"num_items": 2},
        "logging": {"progress": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    "path",
    [
        {"train": str(MEMALPHA / "train.parquet"), "test": str(MEMALPHA / "test.parquet")},
        {"train": str(MAB), "test": str(MAB)},
        {"train": str(ORIGINAL), "test": str(ORIGINAL)},
        str(HONED),
    ],
    ids=["memalpha", "memalpha-memoryagentbench", "memoryagentbench", "honed"],
)
def test_every_format_trains_a_few_steps(tmp_path, path):
    """The tiny policy trains two GRPO steps on each fixture (reader: the ideal-reader bound,
    no server), and the environment reports the same instances' sources."""
    config = _tiny_config(tmp_path, {"path": path, "chunk_tokens": 40})
    assert main(["train", str(config), "--quiet"]) == 0
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r for r in rows if "reward/memory/accuracy" in r]
    assert len(steps) >= 2
    assert RunDir(tmp_path / "run").latest_checkpoint() is not None
    env = MemoryEnv("memory", path=path, chunk_tokens=40)
    assert env.items("train") and env.items("test")
