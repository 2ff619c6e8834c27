"""A deterministic world for skill-loop tests, served by `FakeOpenAIServer`.

Questions come in six kinds (`[alpha] What is the code of item 7?`, answer `alpha 7`). The
fake *target* (model `target`) answers an item right only when its system prompt (the skill)
holds the rule for the item's kind; otherwise it answers the bare number (partial credit: token
F1 2/3). A skill holding the harmful line makes it fail everything.

The fake *reflector* (model `reflector`) tells its stages apart by the first line of the prompt.
Reflecting on failures, it proposes the missing rules for the failed kinds and, unless the step
buffer shows the gate rejected it already, the harmful line; ranking, it is fooled into putting
the harmful edit first. Successes get no proposals; consolidation writes a fixed guidance text.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import yaml
from openai_server import FakeRequest, Reply

KINDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
HARMFUL = "- Never answer directly; explain your doubts instead."
INITIAL_SKILL = (
    "# QA skill\n\n" + "- For [alpha] questions, answer with the word alpha and the number.\n"
)
GUIDANCE = "- Read the bracketed kind before answering."


def rule(kind: str) -> str:
    return f"- For [{kind}] questions, answer with the word {kind} and the number."


def write_dataset(folder: Path) -> dict[str, str]:
    """Train, validation and test files with every kind in each."""
    numbers = {"train": range(1, 7), "validation": range(11, 13), "test": range(21, 23)}
    paths = {}
    for split, ns in numbers.items():
        rows = [
            {"question": f"[{k}] What is the code of item {n}?", "answer": f"{k} {n}", "kind": k}
            for k in KINDS
            for n in ns
        ]
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths[split] = str(path)
    return paths


def write_config(folder: Path, base_url: str, **sections: dict[str, Any]) -> Path:
    """A skills config for this world; `sections` replace or extend the defaults below."""
    data = write_dataset(folder)
    chat = {"base_url": base_url, "backoff_s": 0.01, "max_retries": 1, "timeout_s": 10}
    config: dict[str, Any] = {
        "seed": 3,
        "envs": [
            {
                "name": "qa",
                "type": "qa",
                "args": {
                    "path": data["train"],
                    "validation_path": data["validation"],
                    "test_path": data["test"],
                },
            }
        ],
        "target": {**chat, "model": "target"},
        "reflector": {**chat, "model": "reflector"},
        "skill": {"init": INITIAL_SKILL},
        "train": {"epochs": 2, "batch_size": 8, "minibatch_size": 2, "steps_per_epoch": 3},
        "edit_budget": {"mode": "linear", "max_lr": 2, "min_lr": 1},
        "consolidation": {"enabled": True, "num_items": 6},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    path = folder / "skills.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class World:
    """The request handler playing both roles; counts calls and can fail one on purpose."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        # Answer the first failure reflection after this many reflect calls with HTTP 400, then
        # behave again.
        self.fail_after: int | None = None
        # Answer every target call after this many with HTTP 503 (a server gone bad in the
        # middle of a run), until it is set back to None.
        self.target_down_after: int | None = None

    def count(self, stage: str) -> int:
        with self.lock:
            self.calls[stage] = self.calls.get(stage, 0) + 1
            return self.calls[stage]

    def crash_now(self, reflect_calls: int) -> bool:
        with self.lock:
            if self.fail_after is None or reflect_calls <= self.fail_after:
                return False
            self.fail_after = None
            return True

    def __call__(self, req: FakeRequest) -> Reply | str | dict[str, Any]:
        if req.body["model"] == "target":
            calls = self.count("target")
            if self.target_down_after is not None and calls > self.target_down_after:
                return Reply(503, {"error": {"message": "the target is down"}})
            return self.target(req)
        text = req.last_user_text
        first = text.splitlines()[0]
        if "reflect on failures" in first:
            if self.crash_now(self.count("reflect")):
                return Reply(400, {"error": {"message": "injected failure"}})
            return self.reflect_failures(text)
        if "reflect on successes" in first:
            self.count("reflect")
            return json.dumps({"summary": "rules followed", "edits": []})
        if "rank proposed edits" in first:
            self.count("rank")
            return self.rank(text)
        if "merge proposed edits" in first:
            self.count("merge")
            return self.merge(text)
        if "consolidate guidance" in first:
            self.count("consolidate")
            return json.dumps({"guidance": GUIDANCE})
        return Reply(400, {"error": {"message": f"unexpected prompt: {first}"}})

    @staticmethod
    def target(req: FakeRequest) -> str:
        system = next((m["content"] for m in req.messages if m["role"] == "system"), "")
        question = req.last_user_text
        kind = re.match(r"\[(\w+)\]", question).group(1)
        number = re.search(r"item (\d+)", question).group(1)
        if HARMFUL in system:
            return "Answer: it depends"
        if f"For [{kind}] questions" in system:
            return f"Answer: {kind} {number}"
        return f"Answer: {number}"

    @staticmethod
    def reflect_failures(text: str) -> str:
        head, _, attempts = text.partition("## Attempts")
        kinds = sorted(set(re.findall(r"Task:\n\[(\w+)\]", attempts)))
        edits = [{"op": "append", "content": rule(k)} for k in kinds]
        if "Never answer directly" not in head:  # not yet rejected in this epoch
            edits.insert(0, {"op": "append", "content": HARMFUL})
        return json.dumps({"summary": f"no rule for {', '.join(kinds)}", "edits": edits})

    @staticmethod
    def pool(text: str) -> list[tuple[str, str]]:
        """(id, edit JSON) of each numbered edit in a merge or rank prompt."""
        return re.findall(r"^\[(\d+)\] support [^\n]*?: (\{.*\})$", text, re.MULTILINE)

    def merge(self, text: str) -> str:
        edits = [{**json.loads(edit), "sources": [int(i)]} for i, edit in self.pool(text)]
        return json.dumps({"edits": edits})

    def rank(self, text: str) -> str:
        entries = self.pool(text)
        ids = [int(i) for i, _ in entries]
        harmful = [int(i) for i, edit in entries if "Never answer directly" in edit]
        return json.dumps({"ranking": harmful + [i for i in ids if i not in harmful], "keep": 2})
