"""Per-data-set scoring as Mem-α's code does it, and the LLM reader against a slow local server."""

from __future__ import annotations

import time

import pytest
from openai_server import FakeOpenAIServer, FakeRequest, Reply, completion

from honed.envs.memory.data import Question
from honed.envs.memory.metrics import METRICS, metric_for, parse_yes_no, score_answer
from honed.envs.memory.retrieval import (
    PAPER_FULL_TOKENS,
    PAPER_TOP_K,
    ChatReader,
    answer_scores,
    make_reader,
    retrieval_defaults,
)
from honed.envs.memory.store import SEMANTIC, Memory
from honed.errors import HonedError


@pytest.mark.parametrize(
    ("source", "metric"),
    [
        ("booksum", "keyword_hit"),
        ("infbench_sum_eng_shots2", "keyword_hit"),
        ("pubmed-rct", "label"),
        ("icl_banking77_5900shot_balance", "label"),
        ("squad", "substring"),
        ("hotpotqa", "substring"),
        ("perltqa", "part_share"),
        ("lme_train", "llm_judge"),
        ("longmemeval_s*", "llm_judge"),
        ("ruler_qa2_421K", "normalized_substring"),
        ("eventqa_full", "event_recall"),
        ("honed", "contains"),
    ],
)
def test_each_source_gets_the_official_metric(source, metric):
    assert metric_for(source) == metric and metric in METRICS


def test_metrics_score_as_the_official_code():
    # keyword hit: share of keywords, case-insensitive substring
    assert (
        score_answer(
            "keyword_hit", "The STORM hit the island.", [], ["storm", "island", "keeper", "boat"]
        )
        == 0.5
    )
    # label: the digits in \boxed{} must equal the gold label exactly
    assert score_answer("label", "It is \\boxed{12}.", ["12"]) == 1.0
    assert score_answer("label", "\\boxed{12 or 13}", ["12"]) == 0.0
    assert score_answer("label", "12", ["12"]) == 1.0  # no box: the whole answer
    assert score_answer("label", "\\boxed{1}", ["12"]) == 0.0
    assert score_answer("label", "\\boxed{B}", ["B"]) == 0.0  # only a number is a label
    # substring of the first gold answer, raw lower-cased
    assert score_answer("substring", "It was finished in 1931.", ["1931"]) == 1.0
    assert score_answer("substring", "Ida  Brandt", ["Ida Brandt"]) == 0.0
    # perltqa: share of the ';' parts
    assert score_answer("part_share", "He likes Rowing.", ["rowing;chess"]) == 0.5
    # ruler: SQuAD-normalised substring, best over gold answers and the Answer: line
    assert score_answer("normalized_substring", "Built by the Kova, Ltd.", ["Kova Ltd"]) == 1.0
    assert score_answer("normalized_substring", "Answer: Kova", ["Orla", "kova"]) == 1.0
    assert score_answer("normalized_substring", "Nobody knows", ["Kova"]) == 0.0
    assert score_answer("event_recall", "a then b", ["a", "b"]) == 1.0
    assert score_answer("event_recall", "a only", ["a", "b"]) == 0.0
    # honed: whole words ("day 1" is not in "day 12")
    assert score_answer("contains", "on day 12", ["day 1"]) == 0.0
    # reasoning is dropped first; an unfinished <think> leaves no answer
    assert score_answer("substring", "<think>1931?</think> 1932", ["1931"]) == 0.0
    assert score_answer("substring", "<think>it is 1931", ["1931"]) == 0.0


def test_rouge_l_scores_whole_reference_summaries():
    pytest.importorskip("rouge_score", reason="pip install 'honed[memory]' for ROUGE-L")
    assert metric_for("infbench_sum_eng_shots2", keywords=False) == "rouge_l"
    assert score_answer("rouge_l", "the twins leave the farm", ["the twins leave the farm"]) == 1.0
    assert 0 < score_answer("rouge_l", "the twins go", ["the twins leave the farm"]) < 1


class _Judge:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def chat(self, messages):
        self.prompts.append(messages[-1]["content"])
        return self.reply


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("yes", True),
        ("Yes.", True),
        ("No", False),
        ('{"answer": "no"}', False),
        ("The response names the cat.\nCORRECT", True),
        ("<think>hmm, no?</think>yes", True),
        ("", None),
        ("yes and no", None),
        ("I cannot judge this.", None),
        ("<think>still thinking", None),
    ],
)
def test_judge_verdicts_are_read_strictly(reply, verdict):
    assert parse_yes_no(reply) is verdict


def test_an_llm_judge_without_a_verdict_is_an_unscored_answer():
    rubric = ["The response should mention the cat Pim."]
    judge = _Judge("yes")
    assert (
        score_answer("llm_judge", "Buy toys for Pim.", rubric, question="Gift?", judge=judge) == 1.0
    )
    assert "Rubric: The response should mention the cat Pim." in judge.prompts[0]
    assert "Response: Buy toys for Pim." in judge.prompts[0]
    assert score_answer("llm_judge", "x", rubric, judge=_Judge("no")) == 0.0
    assert score_answer("llm_judge", "x", rubric, judge=_Judge("Maybe?")) is None


def _memory() -> Memory:
    m = Memory()
    m.insert(SEMANTIC, "The Orla dam was built by Kova Ltd")
    return m


def test_llm_reader_scores_by_the_sources_metric_and_counts_errors():
    replies = {"Who built the Orla dam?": "Kova Ltd.", "the ATM kept my card": "\\boxed{12}"}

    class Chat:
        def chat(self, messages):
            return replies.get(messages[-1]["content"].split("\n\n")[-1], "?")

    reader = ChatReader(Chat(), concurrency=2)
    ruler = Question("Who built the Orla dam?", ["Kova"])
    icl = Question("the ATM kept my card", ["12"])
    assert answer_scores(_memory(), [ruler], reader, source="ruler_qa1_197K") == [1.0]
    assert answer_scores(_memory(), [icl], reader, source="icl_banking77") == [1.0]
    judged = Question("Where is the dam?", ["mentions the dam"])
    reader.judge = _Judge("I cannot tell from this.")
    assert answer_scores(_memory(), [judged], reader, source="longmemeval_s*") == [None]


def test_paper_data_shows_the_whole_memory_until_it_is_too_long():
    assert retrieval_defaults("squad") == (PAPER_TOP_K, PAPER_FULL_TOKENS)
    assert retrieval_defaults("honed") == (5, None)
    seen = []

    class Chat:
        def chat(self, messages):
            seen.append(messages[0]["content"].count("semantic:"))
            return "x"

    memory = Memory()
    for i in range(20):
        memory.insert(SEMANTIC, f"fact number {i} about dams")
    question = Question("dams?", ["y"])
    answer_scores(memory, [question], ChatReader(Chat()), source="squad")
    answer_scores(memory, [question], ChatReader(Chat()), source="honed")
    answer_scores(memory, [question], ChatReader(Chat()), top_k=3, source="squad")
    assert seen == [20, 5, 3]


def test_the_reader_runs_its_calls_concurrently_on_a_slow_server():
    """N slow calls take about N / concurrency × delay, not N × delay."""
    from honed.models.chat import ChatClient, ChatModelConfig

    delay, n, concurrency = 0.4, 8, 4

    def slow(req: FakeRequest) -> Reply:
        return Reply(body=completion("Kova Ltd"), delay_s=delay)

    questions = [Question(f"Who built dam {i}?", ["Kova"]) for i in range(n)]
    with FakeOpenAIServer(slow) as server:
        config = ChatModelConfig(base_url=server.base_url, model="fake-model", concurrency=16)
        reader = make_reader({"type": "llm", "concurrency": concurrency}, ChatClient(config))
        start = time.perf_counter()
        scores = answer_scores(_memory(), questions, reader, source="ruler_qa1_197K")
        wall = time.perf_counter() - start
        assert server.max_in_flight == concurrency
    assert scores == [1.0] * n
    # n / concurrency rounds of `delay`; one call at a time would take n × delay = 3.2 s
    assert (n / concurrency) * delay <= wall < (n / concurrency + 2) * delay


def test_the_reader_retries_a_429_and_counts_a_server_that_gave_up():
    from honed.models.chat import ChatClient, ChatModelConfig

    def flaky(req: FakeRequest) -> Reply | str:
        if req.index == 0:
            return Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
        if "dam 1" in req.last_user_text:
            return Reply(500, {"error": {"message": "down"}})
        return "Kova"

    with FakeOpenAIServer(flaky) as server:
        config = ChatModelConfig(
            base_url=server.base_url, model="fake-model", max_retries=1, backoff_s=0.01
        )
        reader = ChatReader(ChatClient(config), concurrency=1)
        questions = [Question(f"Who built dam {i}?", ["Kova"]) for i in (0, 1)]
        assert answer_scores(_memory(), questions, reader, source="ruler") == [1.0, None]
    assert reader.failures == 1


def test_reader_options_are_checked():
    with pytest.raises(
        HonedError, match=r"unknown reader key 'concurency'.*did you mean 'concurrency'"
    ):
        make_reader({"type": "llm", "concurency": 4}, _Judge("x"))
    with pytest.raises(HonedError, match=r"reader\.concurrency must be a whole number"):
        make_reader({"type": "llm", "concurrency": 0}, _Judge("x"))
    assert make_reader({"type": "llm", "concurrency": 3}, _Judge("x")).concurrency == 3


def test_long_context_keeps_the_last_tokens_of_the_stream():
    from honed.envs.memory.baselines import long_context, tail_tokens
    from honed.envs.memory.data import Instance
    from honed.envs.memory.retrieval import IdealReader

    assert tail_tokens("a b c d e", 2) == "d e"
    assert tail_tokens("a b c", 5) == "a b c"
    assert tail_tokens("abc", 0) == ""
    inst = Instance(
        "x",
        ["Ann lives in Oslo.", "It rained all day.", "Bo lives in Lima."],
        [Question("Where does Ann live?", ["Oslo"]), Question("Where does Bo live?", ["Lima"])],
    )
    short = long_context([inst], IdealReader(), tokens=4)
    assert short.name == "long-context (last 4 tokens)"
    assert short.accuracy == 0.5 and short.memory_tokens == 4  # Oslo fell out of the window
    assert long_context([inst], IdealReader()).accuracy == 1.0


def test_rolling_memory_rewrites_one_paragraph_per_chunk_with_the_policy():
    from test_memory_env import ScriptedGenerator

    from honed.envs.memory.baselines import rolling_memory
    from honed.envs.memory.data import Instance
    from honed.envs.memory.retrieval import IdealReader

    def rewrite(prompt: str, seed: int) -> str:  # keeps the old paragraph, adds the new text
        old = prompt.split("Memory so far: ")[1].split("\nNew text: ")[0]
        new = prompt.split("New text: ")[1].split("\n")[0]
        return new if old == "(empty)" else f"{old} {new}"

    inst = Instance(
        "x",
        ["Ann lives in Oslo.", "Bo lives in Lima."],
        [Question("Where does Ann live?", ["Oslo"]), Question("Where does Bo live?", ["Lima"])],
    )
    gen = ScriptedGenerator(rewrite)
    full = rolling_memory([inst], IdealReader(), gen, "p")
    assert full.name == "MemAgent-style rolling memory (p)"
    assert len(gen.batches) == 2 and "Ann lives in Oslo." in gen.batches[1][0][0]
    assert full.accuracy == 1.0 and full.memory_tokens == 8
    capped = rolling_memory([inst], IdealReader(), ScriptedGenerator(rewrite), "p", tokens=4)
    assert capped.accuracy == 0.5 and capped.memory_tokens == 4  # the paragraph is cut


def test_the_average_gives_each_data_set_one_vote():
    from honed.envs.memory.baselines import BaselineResult, Scored

    result = BaselineResult(
        "r", [Scored("a", 1.0, 10, 0.5), Scored("a", 1.0, 20, 0.5), Scored("b", 0.0, 30, 0.5, 2)]
    )
    assert result.by_source == {"a": 1.0, "b": 0.0}
    assert result.accuracy == 0.5  # not 2/3, the mean over instances
    assert (result.memory_tokens, result.errors) == (20, 2)


def test_a_reader_with_only_score_is_read_question_by_question():
    from honed.envs.memory.baselines import store_everything
    from honed.envs.memory.data import Instance

    class Lookup:  # a reader without data-set metrics: `score(question, context)` only
        def score(self, question, context):
            return float(question.answers[0] in context)

    inst = Instance(
        "x", ["Ann lives in Oslo."], [Question("Where?", ["Oslo"]), Question("?", ["Rome"])]
    )
    assert answer_scores(_memory(), inst.questions, Lookup()) == [0.0, 0.0]
    assert store_everything([inst], Lookup()).accuracy == 0.5
