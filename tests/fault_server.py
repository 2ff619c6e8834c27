"""A fault-injecting OpenAI-compatible server: a real server's bad day, on 127.0.0.1.

`Faults` wraps any `FakeOpenAIServer` handler and breaks some of its replies the way real
servers and proxies do:

- `truncate`: the reply cut short with `finish_reason: "length"`; a JSON reply is cut inside
  the `content` of its last edit, where json-repair would make a valid edit of the stump;
- `empty`: a completion with `content: null` (a reasoning model that spent its tokens thinking);
- `garble`: status 200 with an HTML error page (a proxy), no chat completion;
- `rate_limit`: 429 with a `Retry-After` header;
- `error`: 503;
- `trickle`: headers, then the body a byte at a time, never finished in time;
- `drop`: the connection closed without a reply.

Faults come two ways: `force(kind, times, model, when)` breaks the next matching requests (all
of them with `times=None`, until `clear()`), and `fraction` breaks the *first attempt* of that
share of distinct requests (a request's identity
is its body, so the client's retry of it goes through), chosen by a hash of the body so a run
is reproducible. Every fault is counted in `injected[(model, kind)]`.

`ConventionsWorld` plays both roles of `examples/skills_qa.yaml` over `examples/skills/qa.jsonl`:
the target answers right exactly when its skill holds the rule for the question's kind, the
reflector proposes the missing rules. Run this file to serve it by hand:

    python tests/fault_server.py --port 8765 --fraction 0.2     # Ctrl-C prints the faults
    honed skills train examples/skills_qa.yaml -o target.base_url=http://127.0.0.1:8765/v1 \\
        -o target.model=target -o reflector.base_url=http://127.0.0.1:8765/v1 \\
        -o reflector.model=reflector ...
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import signal
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openai_server import FakeOpenAIServer, FakeRequest, Reply, completion

KINDS = ("truncate", "empty", "garble", "rate_limit", "error", "trickle", "drop")
# What a fixed fraction of first attempts gets in the end-to-end runs: every kind a client can
# get through by retrying (trickle and drop cost a timeout or a reconnection and are tested alone).
RUN_KINDS = ("truncate", "empty", "garble", "rate_limit", "error")
HTML_PAGE = b"<html><body><h1>502 Bad Gateway</h1><p>upstream went away</p></body></html>"


def _identity(req: FakeRequest) -> str:
    return json.dumps(req.body, sort_keys=True)


def cut(text: str) -> str:
    """A reply stopped mid-way: inside the last JSON `content` string when there is one (what
    json-repair turns into a whole-looking edit), otherwise in the middle."""
    start = text.rfind('"content": "')
    if start != -1:
        value = start + len('"content": "')
        end = text.find('"', value)
        if end > value + 1:
            return text[: value + (end - value) // 2]
    return text[: max(1, len(text) // 2)]


class Faults:
    """A handler that breaks some replies of `handler` (see the module's docstring)."""

    def __init__(
        self,
        handler: Any,
        fraction: float = 0.0,
        kinds: tuple[str, ...] = RUN_KINDS,
        retry_after: str = "0.05",
        trickle_s: float = 0.2,
        seed: str = "",
    ) -> None:
        self.handler = handler
        self.fraction = fraction
        self.kinds = kinds
        self.retry_after = retry_after
        self.trickle_s = trickle_s
        self.seed = seed
        self.injected: Counter[tuple[str, str]] = Counter()
        # texts of the cut replies sent, by model: none of them may end up in a skill
        self.cut_texts: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._forced: list[dict[str, Any]] = []

    def force(
        self,
        kind: str,
        times: int | None = 1,
        model: str | None = None,
        when: Callable[[FakeRequest], bool] | None = None,
    ) -> None:
        """Break the next `times` requests (every one: None) to `model` (or any) for which
        `when` holds (or any) with `kind`."""
        assert kind in KINDS, kind
        with self._lock:
            self._forced.append({"kind": kind, "left": times, "model": model, "when": when})

    def clear(self) -> None:
        """The server behaves again (the fraction still applies)."""
        with self._lock:
            self._forced.clear()

    def total(self, kind: str, model: str | None = None) -> int:
        return sum(n for (m, k), n in self.injected.items() if k == kind and model in (None, m))

    def _choose(self, req: FakeRequest) -> str | None:
        model = (req.body or {}).get("model")
        identity = _identity(req)
        with self._lock:
            for rule in self._forced:
                if rule["model"] not in (None, model) or not (rule["when"] or bool)(req):
                    continue
                if rule["left"] is not None:
                    rule["left"] -= 1
                    if rule["left"] == 0:
                        self._forced.remove(rule)
                return rule["kind"]
            first = identity not in self._seen
            self._seen.add(identity)
        if not first or not self.fraction:
            return None
        digest = int(hashlib.sha256((self.seed + identity).encode()).hexdigest()[:12], 16)
        if (digest % 10_000) / 10_000 >= self.fraction:
            return None
        return self.kinds[(digest // 10_000) % len(self.kinds)]

    def __call__(self, req: FakeRequest) -> Reply | str | dict[str, Any]:
        kind = self._choose(req)
        if kind is None:
            return self.handler(req)
        model = str((req.body or {}).get("model"))
        with self._lock:
            self.injected[(model, kind)] += 1
        if kind == "truncate":
            return self._truncated(req, model)
        if kind == "empty":
            return {
                **completion("", prompt_tokens=3, completion_tokens=0),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None},
                        "finish_reason": "stop",
                    }
                ],
            }
        if kind == "garble":
            return Reply(200, raw=HTML_PAGE, content_type="text/html")
        if kind == "rate_limit":
            body = {"error": {"message": "rate limit reached"}}
            return Reply(429, body, headers={"Retry-After": self.retry_after})
        if kind == "error":
            return Reply(503, {"error": {"message": "overloaded"}})
        if kind == "trickle":
            return Reply(200, completion("too slow"), trickle_s=self.trickle_s)
        return Reply(drop=True)

    def _truncated(self, req: FakeRequest, model: str) -> dict[str, Any]:
        out = self.handler(req)
        text = out if isinstance(out, str) else out["choices"][0]["message"]["content"]
        stump = cut(text)
        with self._lock:
            self.cut_texts.append((model, stump))
        return completion(stump, prompt_tokens=3, finish_reason="length")


# ---------------------------------------------------------------- examples/skills_qa.yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = {
    "units": "- For unit conversions, answer with the bare number in the unit asked for.",
    "dates": "- For date questions, answer with the ISO date, like 2024-03-31.",
    "letters": "- To count a letter, spell the word out and answer with the digit alone.",
    "clock": "- Give times in 12-hour form without a leading zero, like 2:05 pm.",
    "percent": "- For percentages, answer with the bare number, without a percent sign.",
}
GUIDANCE = "- Read what form the answer must take before answering."


class ConventionsWorld:
    """Both roles of `examples/skills_qa.yaml` (models `target` and `reflector`)."""

    def __init__(self, path: Path = ROOT / "examples" / "skills" / "qa.jsonl") -> None:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.answers = {r["question"]: (str(r["answer"]), r["kind"]) for r in rows}

    def __call__(self, req: FakeRequest) -> Reply | str:
        if req.body["model"] == "target":
            return self.target(req)
        text = req.last_user_text
        first = text.splitlines()[0]
        if "reflect on failures" in first:
            return self.reflect(text)
        if "reflect on successes" in first:
            return json.dumps({"summary": "the rules were followed", "edits": []})
        if "rank proposed edits" in first:
            ids = re.findall(r"^\[(\d+)\] support", text, re.MULTILINE)
            return json.dumps({"ranking": [int(i) for i in ids], "keep": len(ids)})
        if "merge proposed edits" in first:
            edits = re.findall(r"^\[(\d+)\] support [^\n]*?: (\{.*\})$", text, re.MULTILINE)
            return json.dumps({"edits": [{**json.loads(e), "sources": [int(i)]} for i, e in edits]})
        if "consolidate guidance" in first:
            return json.dumps({"guidance": GUIDANCE})
        return Reply(400, {"error": {"message": f"unexpected prompt: {first}"}})

    def target(self, req: FakeRequest) -> str:
        system = next((m["content"] for m in req.messages if m["role"] == "system"), "")
        answer, kind = self.answers[req.last_user_text]
        if RULES[kind] in system:
            return f"Let me work it out.\nAnswer: {answer}"
        return f"Let me work it out.\nAnswer: {answer} (approximately)"

    def reflect(self, text: str) -> str:
        _, _, attempts = text.partition("## Attempts")
        questions = re.findall(r"Task:\n(.*)", attempts)
        kinds = sorted({self.answers[q][1] for q in questions if q in self.answers})
        edits = [
            {
                "op": "append",
                "content": RULES[k],
                "rationale": f"the {k} answers had the wrong form",
            }
            for k in kinds
            if RULES[k] not in text.partition("## Attempts")[0]
        ]
        return json.dumps({"summary": f"wrong answer form for {', '.join(kinds)}", "edits": edits})


def main() -> None:
    parser = argparse.ArgumentParser(description="serve ConventionsWorld with faults")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--report", help="write the injected faults here (JSON) on exit")
    args = parser.parse_args()
    faults = Faults(ConventionsWorld(), fraction=args.fraction)
    server = FakeOpenAIServer(faults, models=("target", "reflector"), port=args.port)
    with server:
        print(
            f"serving on {server.base_url} (models target, reflector); Ctrl-C to stop", flush=True
        )
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` reports too
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    counts = {f"{model}/{kind}": n for (model, kind), n in sorted(faults.injected.items())}
    print(json.dumps(counts, indent=2))
    if args.report:
        Path(args.report).write_text(json.dumps(counts, indent=2) + "\n")


if __name__ == "__main__":
    main()
