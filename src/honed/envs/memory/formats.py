"""Memory data on disk: honed's JSONL, Mem-α's released data and MemoryAgentBench's records.

Four layouts load into the same `Instance`s (their fields and sources: docs/memory.md,
"Data formats"):

- `honed`: one instance a JSONL line, `{"id", "split", "chunks", "questions"}` (`data.py`).
- `memalpha`: the rows of Mem-α's parquet files (Hugging Face `YuWangX/Memalpha`,
  `YuWangX/Memalpha-full`): `instance_id`, `prompt`, `chunks` (a JSON *string* of a list of
  strings), `questions_and_answers` (a JSON string of `[{"question", "answer"}]`),
  `data_source`, `metadata` (a JSON string), `num_chunks`, `num_questions`.
- `memalpha-memoryagentbench`: the processed MemoryAgentBench test set
  (`YuWangX/Memalpha-Memoryagentbench`): the same columns, `data_source` the benchmark's
  sub-dataset (`ruler_qa1_197K`, `icl_banking77_5900shot_balance`, ...), answers lists.
- `memoryagentbench`: the original records (`ai-hyz/MemoryAgentBench`): one long `context`,
  `questions`, `answers` (a list of accepted answers per question) and `metadata.source`;
  the context is cut into chunks here (sentences packed up to `chunk_tokens`; LongMemEval's
  sessions rendered as dialogues first), since the records hold none.

A file is `.jsonl` (one record a line), `.json` (a list of records) or `.parquet` (pyarrow,
`pip install 'honed[memory]'`); a folder reads its `train`, `validation` and `test` files. The
format is given (`format:`) or detected from the first record's keys. The split of a record is
its `split` field, else the file's name (`train.parquet`, `validation.jsonl`, ...), else
`test`. Every record is checked before any work: the first malformed one stops the load with
one `HonedError` naming the file and the record's index (from 0; a JSONL line number too).

What each record's `data_source` becomes: `Instance.source`, which picks the metric its
questions are scored with (`metrics.py`); keyword answers (BookSum, InfBench-Sum: a string of
", "-joined keywords or a list) become `Question.keywords`.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from honed.envs.memory.data import Instance, Question, parse_record
from honed.envs.memory.metrics import metric_for
from honed.envs.memory.store import TokenCounter, word_tokens
from honed.errors import HonedError, did_you_mean
from honed.types import SPLITS

FORMATS = ("honed", "memalpha", "memalpha-memoryagentbench", "memoryagentbench")
# The official processing packs sentences into chunks of at most 2,048 tokens, 1,024 for the
# test-time-learning (classification) sources (process_data.py, process_memory_agent_bench).
CHUNK_TOKENS = 2048
_SUFFIXES = (".jsonl", ".json", ".parquet")
_SPLIT_NAMES = {"train": "train", "validation": "validation", "val": "validation", "dev": "validation", "test": "test"}  # fmt: skip
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class RecordError(ValueError):
    """A malformed record; the loader adds the file and the record's index."""


def load_data(
    path: str | Path | dict[str, str | Path],
    format: str | None = None,
    count: TokenCounter = word_tokens,
    chunk_tokens: int = CHUNK_TOKENS,
) -> dict[str, list[Instance]]:
    """Instances by split from `path`: a file, a folder of split files, or `{split: file}`."""
    if format is not None and format not in FORMATS:
        raise HonedError(
            f"memory data: unknown format {format!r}{did_you_mean(format, FORMATS)}: use one "
            f"of {', '.join(FORMATS)} (or leave it out to detect it)"
        )
    out: dict[str, list[Instance]] = {s: [] for s in SPLITS}
    for split, file in _files(path):
        for file_split, instances in _load_file(file, format, split, count, chunk_tokens).items():
            out[file_split] += instances
    for split, instances in out.items():
        repeated = sorted(i for i, n in Counter(inst.id for inst in instances).items() if n > 1)
        if repeated:
            raise HonedError(
                f"memory data {path}: ids repeat in the {split} split: {', '.join(repeated[:5])}"
            )
    return out


def _files(path: str | Path | dict[str, str | Path]) -> list[tuple[str | None, Path]]:
    """(split or None, file) to read: a mapping gives each split its file; a folder gives the
    files named after a split; a file has its split from its records or its name."""
    if isinstance(path, dict):
        unknown = [s for s in path if s not in SPLITS]
        if unknown:
            raise HonedError(
                f"memory data: path keys must be splits ({', '.join(SPLITS)}), not {unknown[0]!r}"
            )
        return [(split, Path(p)) for split, p in path.items()]
    path = Path(path)
    if path.is_dir():
        files = sorted(
            f for f in path.iterdir() if f.suffix in _SUFFIXES and f.stem.lower() in _SPLIT_NAMES
        )
        if not files:
            raise HonedError(
                f"memory data: {path} holds no train/validation/test file ({', '.join(_SUFFIXES)})"
            )
        return [(_SPLIT_NAMES[f.stem.lower()], f) for f in files]
    return [(None, path)]


def _load_file(
    file: Path, format: str | None, split: str | None, count: TokenCounter, chunk_tokens: int
) -> dict[str, list[Instance]]:
    if not file.is_file():
        raise HonedError(f"memory data: no such file: {file}")
    default_split = split or _SPLIT_NAMES.get(file.stem.lower(), "test")
    out: dict[str, list[Instance]] = {}
    parse: Callable[[dict[str, Any], int], Instance] | None = None
    for index, record in _records(file):
        try:
            if not isinstance(record, dict):
                raise RecordError("expected an object (a record)")
            if parse is None:
                parse = _parser(format or detect(record), count, chunk_tokens)
            instance = parse(record, index)
            record_split = split or record.get("split", default_split)
            if record_split not in SPLITS:
                raise RecordError(f"split must be one of {', '.join(SPLITS)}, not {record_split!r}")
        except RecordError as exc:
            raise HonedError(f"memory data {file}: record {index}: {exc}") from None
        out.setdefault(record_split, []).append(instance)
    return out


def detect(record: dict[str, Any]) -> str:
    """The format of a record, from its keys."""
    if "questions_and_answers" in record and "chunks" in record:
        return "memalpha"  # the processed MemoryAgentBench set has the same columns
    if "context" in record and "questions" in record and "answers" in record:
        return "memoryagentbench"
    if "chunks" in record and "questions" in record:
        return "honed"
    raise RecordError(
        "cannot tell its format from its keys "
        f"({', '.join(sorted(map(str, record))[:8]) or 'none'}): give `format:` "
        f"({', '.join(FORMATS)})"
    )


def _records(file: Path) -> Iterator[tuple[int, Any]]:
    """(index, record) of a file; a JSONL line that is not JSON raises `HonedError` with its
    index and line number."""
    if file.suffix == ".parquet":
        yield from enumerate(_parquet_rows(file))
        return
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HonedError(f"memory data: cannot read {file}: {exc.strerror or exc}") from None
    if file.suffix == ".json":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HonedError(
                f"memory data {file}: not valid JSON ({exc.msg}, line {exc.lineno})"
            ) from None
        if not isinstance(records, list):
            raise HonedError(f"memory data {file}: expected a JSON list of records")
        yield from enumerate(records)
        return
    index = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield index, json.loads(line)
        except json.JSONDecodeError as exc:
            raise HonedError(
                f"memory data {file}: record {index} (line {number}): not valid JSON ({exc.msg})"
            ) from None
        index += 1


def _parquet_rows(file: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise HonedError(
            f"memory data {file}: reading parquet needs pyarrow: pip install 'honed[memory]'"
        ) from None
    try:
        return pq.read_table(file).to_pylist()
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise HonedError(f"memory data {file}: not a readable parquet file ({exc})") from None


def _parser(
    format: str, count: TokenCounter, chunk_tokens: int
) -> Callable[[dict[str, Any], int], Instance]:
    if format in ("memalpha", "memalpha-memoryagentbench"):
        return _memalpha
    if format == "memoryagentbench":
        return lambda record, index: _memoryagentbench(record, index, count, chunk_tokens)
    return _honed


def _honed(record: dict[str, Any], index: int) -> Instance:
    try:
        return parse_record(record, index + 1, "test")[1]
    except ValueError as exc:
        raise RecordError(str(exc)) from None


def _json_field(record: dict[str, Any], key: str, kind: type) -> Any:
    """A field that Mem-α stores as a JSON string (or, once loaded by `datasets`, as is)."""
    if key not in record:
        raise RecordError(f"no {key!r} field")
    value = record[key]
    if isinstance(value, str) and kind is not str:
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{key!r} is not valid JSON ({exc.msg})") from None
    if not isinstance(value, kind):
        raise RecordError(f"{key!r} must be a {kind.__name__} (or its JSON text)")
    return value


def _chunk_list(chunks: Any, key: str) -> list[str]:
    if not chunks or not all(isinstance(c, str) and c.strip() for c in chunks):
        raise RecordError(f"{key!r} must be a non-empty list of non-empty strings")
    return list(chunks)


def _memalpha(record: dict[str, Any], index: int) -> Instance:
    chunks = _chunk_list(_json_field(record, "chunks", list), "chunks")
    pairs = _json_field(record, "questions_and_answers", list)
    source = record.get("data_source")
    if not isinstance(source, str) or not source:
        raise RecordError("'data_source' must be a non-empty string (it picks the metric)")
    if not pairs:
        raise RecordError("'questions_and_answers' is empty")
    questions = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict) or not isinstance(pair.get("question"), str):
            raise RecordError(f"questions_and_answers[{i}] needs a 'question' string")
        answer = pair.get("answer", pair.get("answers"))
        questions.append(_question(pair["question"], answer, source, f"questions_and_answers[{i}]"))
    ident = record.get("instance_id", index)
    return Instance(f"{source}-{ident}", chunks, questions, source=source)


def _question(text: str, answer: Any, source: str, where: str, keywords: bool = True) -> Question:
    """A question of a scored source. Summary answers of Mem-α's data are keywords (a ", "-joined
    string or a list: `keywords`); elsewhere the answers are accepted answers (the original
    MemoryAgentBench's summaries are references for ROUGE-L)."""
    if isinstance(answer, str):
        answers = [answer]
    elif isinstance(answer, list) and all(isinstance(a, str) for a in answer):
        answers = list(answer)
    else:
        raise RecordError(f"{where}: 'answer' must be a string or a list of strings")
    if not any(a.strip() for a in answers):
        raise RecordError(f"{where}: the answer is empty")
    if keywords and metric_for(source) == "keyword_hit":
        found = [k.strip() for a in answers for k in a.split(",") if k.strip()]
        return Question(text, [], "summary", keywords=found)
    return Question(text, answers, metric_for(source, keywords=keywords))


def _memoryagentbench(
    record: dict[str, Any], index: int, count: TokenCounter, chunk_tokens: int
) -> Instance:
    metadata = record.get("metadata") or {}
    if isinstance(metadata, str):
        metadata = _json_field(record, "metadata", dict)
    source = metadata.get("source") if isinstance(metadata, dict) else None
    if not isinstance(source, str) or not source:
        raise RecordError("'metadata.source' must be a non-empty string (it picks the metric)")
    questions, answers = record.get("questions"), record.get("answers")
    if not isinstance(questions, list) or not questions:
        raise RecordError("'questions' must be a non-empty list")
    if not isinstance(answers, list) or len(answers) != len(questions):
        raise RecordError(
            f"'answers' must be a list as long as 'questions' ({len(questions)} questions)"
        )
    parsed = []
    for i, (q, a) in enumerate(zip(questions, answers, strict=True)):
        if not isinstance(q, str) or not q.strip():
            raise RecordError(f"questions[{i}] must be a non-empty string")
        parsed.append(_question(q, a, source, f"answers[{i}]", keywords=False))
    limit = chunk_tokens // 2 if source.startswith("icl") else chunk_tokens
    chunks = pack_sentences(_context_text(record.get("context"), source), limit, count)
    if not chunks:
        raise RecordError("'context' is empty")
    return Instance(f"{source}-{index}", chunks, parsed, source=source)


def _context_text(context: Any, source: str) -> str:
    """The context as text; LongMemEval's is an alternating [timestamp, session, ...] list
    (stored as its Python or JSON text), rendered one dialogue per session."""
    if not isinstance(context, str):
        raise RecordError("'context' must be a string")
    if not source.startswith("longmemeval"):
        return context
    try:
        items = json.loads(context)
    except json.JSONDecodeError:
        try:
            items = ast.literal_eval(context)  # literals only: never code
        except (ValueError, SyntaxError):
            raise RecordError(
                "a longmemeval 'context' must be a list of [timestamp, session]"
            ) from None
    if not isinstance(items, list) or len(items) % 2:
        raise RecordError("a longmemeval 'context' must alternate timestamps and sessions")
    sessions = []
    for stamp, turns in zip(items[::2], items[1::2], strict=True):
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise RecordError("a longmemeval session must be a list of {role, content} turns")
        lines = [f"<{str(t.get('role', '')).capitalize()}>{t.get('content', '')}" for t in turns]
        sessions.append(f"[Dialogue at timestamp {stamp}]\n" + "\n".join(lines))
    return "\n\n".join(sessions)


def pack_sentences(text: str, limit: int, count: TokenCounter = word_tokens) -> list[str]:
    """`text` cut at sentence ends into chunks of at most `limit` tokens each (a sentence
    longer than that is a chunk of its own), in order."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for sentence in (s.strip() for s in _SENTENCE_END.split(text)):
        if not sentence:
            continue
        tokens = count(sentence)
        if current and size + tokens > limit:
            chunks.append(" ".join(current))
            current, size = [], 0
        current.append(sentence)
        size += tokens
    if current:
        chunks.append(" ".join(current))
    return chunks
