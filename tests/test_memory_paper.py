"""The paper-shaped synthetic data, the extractive reader, the memory budget and the rule
baseline: what makes the CPU demonstration one where memory construction matters."""

import re
from statistics import mean

import pytest

from honed.envs.memory import MemoryEnv
from honed.envs.memory.baselines import memories_result, rule_memory
from honed.envs.memory.data import DataSpec, Instance, Question, entities_of
from honed.envs.memory.extractive import ExtractiveReader
from honed.envs.memory.paperdata import (
    budget_of,
    generate,
    is_chatter,
    relevant_tokens,
)
from honed.envs.memory.store import EPISODIC, SEMANTIC, Memory
from honed.envs.memory.tools import chunk_sentences
from honed.errors import HonedError

SPEC = DataSpec(
    synthetic="paper",
    train_size=24,
    validation_size=4,
    test_size=24,
    distractors=4,
    chunks=3,
    chunk_min=400,
    chunk_max=700,
)


def _env(**args) -> MemoryEnv:
    spec = {k: getattr(SPEC, k) for k in ("train_size", "validation_size", "test_size")}
    return MemoryEnv(
        synthetic="paper",
        reader="extract",
        top_k=20,
        recent=20,
        distractors=4,
        chunks=3,
        **{"chunk_min": 400, "chunk_max": 700, **spec, **args},
    )


def test_instances_are_long_reproducible_and_split_by_entity():
    assert generate("test", SPEC, 3) == generate("test", SPEC, 3)
    assert generate("test", SPEC, 3) != generate("test", SPEC, 4)
    instances = generate("train", SPEC)
    lengths = [len(c) for inst in instances for c in inst.chunks]
    assert min(lengths) >= SPEC.chunk_min
    assert mean(lengths) <= SPEC.chunk_max
    assert all(len(inst.chunks) == 3 for inst in instances)
    names = {
        split: set().union(*(entities_of(i) for i in generate(split, SPEC)))
        for split in ("train", "test")
    }
    assert names["train"] and names["test"] and names["train"].isdisjoint(names["test"])


def test_changes_come_after_their_fact_and_questions_paraphrase():
    deletes = 0
    for inst in generate("train", SPEC):
        kinds = {op.op for ops in inst.plan for op in ops}
        assert {"insert", "update"} <= kinds  # a delete needs a job or pet before the last chunk
        deletes += "delete" in kinds
        for t, ops in enumerate(inst.plan):
            for op in ops:
                if op.op in ("update", "delete"):
                    earlier = [o.content for ops_ in inst.plan[:t] for o in ops_]
                    assert op.target in earlier
        sentences = {s.lower() for c in inst.chunks for s in chunk_sentences(c)}
        for q in inst.questions:
            assert q.question.rstrip("?").lower() not in sentences
            assert not q.evidence  # nothing that only the answer key knows goes to the reader
        assert any(q.type == "two-hop" for q in inst.questions)
    assert deletes >= 0.7 * SPEC.train_size


def test_budget_holds_the_reference_but_not_all_that_is_relevant():
    for inst in generate("train", SPEC):
        assert inst.budget < relevant_tokens(inst)
        assert budget_of(inst, ratio=1.0) <= inst.budget
    env = _env()
    for item in env.items("train"):
        inst = Instance.from_dict(item.data)
        assert env.reference_memory(item).tokens() <= inst.budget


def test_memory_budget_refuses_writes_past_it_and_a_delete_makes_room():
    memory = Memory(budget=6)
    assert memory.insert(SEMANTIC, "Ann lives in Oslo").ok  # 4 tokens
    full = memory.insert(EPISODIC, "Day 3: Ann sang")  # 4 more
    assert not full.ok and full.message.startswith("memory full: 4 of 6")
    assert not memory.update(SEMANTIC, "Ann lives in the city of Oslo", "s1").ok
    assert memory.update(SEMANTIC, "Ann in Oslo", "s1").ok  # shrinking is always allowed
    assert memory.delete(SEMANTIC, "s1").ok
    assert memory.insert(EPISODIC, "Day 3: Ann sang").ok
    assert Memory.from_dict(memory.to_dict()).budget == 6


def test_the_extractive_reader_picks_one_sentence_without_the_answer_key():
    reader = ExtractiveReader()
    context = (
        "semantic: Kiri rents a flat in the city of Kobe\n"
        "semantic: Kiri looks after a pet dog\n"
        "semantic: Gonu is the boss of Kiri\n"
        "semantic: Gonu has settled in the city of Fez"
    )
    city = Question("Which city is Kiri living in?", ["Kobe"])
    assert reader.answer(city, context) == "Kiri rents a flat in the city of Kobe"
    assert reader.score(city, context) == 1.0
    # the answer does not depend on the gold answers
    assert reader.answer(Question(city.question, ["Lima"]), context) == reader.answer(city, context)
    two_hop = Question("Which city is home to Kiri's boss?", ["Fez"], "two-hop")
    assert reader.answer(two_hop, context) == "Gonu has settled in the city of Fez"
    # an outdated fact that BM25 ranks first is a wrong answer: the old entry is shorter
    stale = context + "\nsemantic: Kiri has since moved to the city of Riga"
    assert reader.score(Question(city.question, ["Riga"]), stale) == 0.0
    assert reader.score(city, "") == 0.0
    # a memory that holds one sentence several times (a sampled policy writes such) has no
    # second sentence for the second hop: the first is the answer
    twice = "semantic: Gonu is the boss of Kiri\nepisodic: Gonu is the boss of Kiri"
    assert reader.answer(two_hop, twice) == "Gonu is the boss of Kiri"


def test_rule_inserts_every_sentence_but_chatter_and_never_changes_anything():
    inst = Instance(
        "x",
        [
            "It rained on and off the whole day. Kiri looks after a pet dog. On day 4, Kiri "
            "went off to deal with a bike. Kiri said hello to everyone at the door.",
            "Kiri no longer keeps the pet dog. The tea was cold again.",
        ],
        [Question("Which pet does Kiri have?", ["dog"])],
    )
    memory = rule_memory(inst)
    assert [t for _, t in memory.items(SEMANTIC)] == [
        "Kiri looks after a pet dog",
        "Kiri no longer keeps the pet dog",
    ]
    assert [t for _, t in memory.items(EPISODIC)] == ["On day 4, Kiri went off to deal with a bike"]
    assert is_chatter("Tebu said hello to everyone at the door") and is_chatter(
        "The tea was cold again"
    )
    assert not is_chatter("Kiri looks after a pet dog")
    inst.budget = 6
    assert [t for _, t in rule_memory(inst).items(SEMANTIC)] == ["Kiri looks after a pet dog"]


def test_the_rule_loses_to_the_reference_plan_on_paper_data():
    env = _env()
    items = list(env.items("test"))
    instances = [Instance.from_dict(i.data) for i in items]
    rule = memories_result("rule", instances, [rule_memory(i) for i in instances], env.reader, 20)
    reference = memories_result(
        "reference", instances, [env.reference_memory(i) for i in items], env.reader, 20
    )
    assert reference.accuracy >= rule.accuracy + 0.3
    assert reference.memory_tokens <= rule.memory_tokens
    rows = {r.name: r for r in env.baselines("test")}
    assert rows["rule"].accuracy == pytest.approx(rule.accuracy)
    # The rule told which sentences are distractors (those the plan never mentions) writes
    # none of them, and leaving them out is worth much of the room between rule and plan.
    told = rows["rule, told the distractors"]
    assert rule.accuracy + 0.1 <= told.accuracy <= reference.accuracy - 0.1
    for inst in instances:
        mentioned = {op.content for ops in inst.plan for op in ops}
        written = {t for store in (SEMANTIC, EPISODIC) for _, t in rule_memory(inst).items(store)}
        assert written - mentioned, "the rule writes distractors"
        told_memory = rule_memory(inst, chatter=lambda x, m=mentioned: is_chatter(x) or x not in m)
        assert {t for st in (SEMANTIC, EPISODIC) for _, t in told_memory.items(st)} <= mentioned


def test_paper_data_trains_the_reference_format_through_sft_examples():
    env = _env(quote=True)
    examples = env.sft_examples(env.items("train")[0])
    assert len(examples) == 3
    replies = " ".join(reply for _, reply in examples)
    assert '{"d":"s' in replies and '{"u":"s' in replies


def test_the_rule_as_warm_start_target_quotes_every_sentence_but_chatter():
    """`sft_target: rule`: each chunk's target inserts exactly its non-chatter sentences (as
    quotes), and the prompts show the memory the rule builds, budget included; it needs no
    reference plan."""
    env = _env(quote=True, sft_target="rule")
    item = env.items("train")[0]
    inst = Instance.from_dict(item.data)
    examples = env.sft_examples(item)
    assert len(examples) == len(inst.chunks) == 3
    for (_, reply), chunk in zip(examples, inst.chunks, strict=True):
        sentences = chunk_sentences(chunk)
        keep = [i + 1 for i, s in enumerate(sentences) if not is_chatter(s)]
        assert keep and '"u"' not in reply and '"d"' not in reply
        assert [int(n) for n in re.findall(r'"c":(\d+)', reply)] == keep
    steps, memory = env._replay(inst, "rule")
    rule = rule_memory(inst)
    assert memory.to_dict() == rule.to_dict()
    assert (
        rule.tokens()
        <= inst.budget
        < sum(  # the budget refused some of the rule's inserts
            len(s.split()) for c in inst.chunks for s in chunk_sentences(c) if not is_chatter(s)
        )
    )
    last_prompt = examples[-1][0]
    shown = [i for store in (SEMANTIC, EPISODIC) for i, _ in steps[-1][0].items(store)]
    assert shown and all(f"\n{i} " in last_prompt for i in shown)  # entry ids (contents cut)
    inst.plan = None  # data without a plan (a JSONL file) still has the rule's targets
    assert len(env._replay(inst, "rule")[0]) == 3


def test_an_unknown_sft_target_is_named():
    with pytest.raises(HonedError, match=r"sft_target 'rules'.*reference, rule"):
        _env(sft_target="rules")


def test_rollouts_say_which_kinds_of_sentence_they_wrote():
    """`facts_written`, `distractors_written`, `chatter_written`: the reference plan writes every
    fact and nothing else; the rule writes facts and distractors (what the budget lets in) and
    no chatter."""
    from test_memory_env import ScriptedGenerator

    shares = {}
    for target in ("reference", "rule"):
        env = _env(quote=True, sft_target=target)
        items = list(env.items("test"))[:6]
        replies = dict(pair for item in items for pair in env.sft_examples(item))
        follow = ScriptedGenerator(lambda p, s, r=replies: r[p])
        groups = env.rollout(items, follow, 1, seed=0)
        shares[target] = {
            k: mean(g.trajectories[0].components[k] for g in groups)
            for k in ("facts_written", "distractors_written", "chatter_written")
        }
    assert shares["reference"] == {
        "facts_written": 1.0,
        "distractors_written": 0.0,
        "chatter_written": 0.0,
    }
    assert 0.5 < shares["rule"]["facts_written"] <= 1.0
    assert 0.5 < shares["rule"]["distractors_written"] <= 1.0
    assert shares["rule"]["chatter_written"] == 0.0


def test_rollout_log_probs_are_what_the_learner_scores():
    """The memory env's prompts are cut to `max_prompt_tokens` and each chunk is its own turn:
    the learner must score exactly the tokens the sampler drew, in the context it drew them
    in, or every GRPO ratio and gradient is about other text. Float32 kernels over another
    batch shape differ in the last bits, hence the tolerance (far below a token's log-prob)."""
    import torch
    from tiny_run import SMALL_MODEL

    from honed.config import PolicyConfig, TinyModelConfig
    from honed.models.batching import build_batch
    from honed.models.policy import Policy, PolicySampler, SamplingParams
    from honed.models.scoring import score

    shape = TinyModelConfig(**{**SMALL_MODEL, "max_position_embeddings": 512})
    policy = Policy.from_config(PolicyConfig(tiny=shape), seed=0)
    env = _env(quote=True, max_prompt_tokens=400, chunk_min=150, chunk_max=350)
    temperature = 0.7
    sampler = PolicySampler(policy, SamplingParams(temperature, 1.0, 48))
    groups = env.rollout(env.items("train")[:2], sampler, 2, seed=5)
    segments = [s for g in groups for t in g.trajectories for s in t.segments]
    assert len(segments) == 2 * 2 * 3
    batch = build_batch(
        [s.prompt_ids for s in segments],
        [s.completion_ids for s in segments],
        [s.mask() for s in segments],
        policy.pad_id,
    )
    policy.model.eval()
    with torch.no_grad():
        scored = score(policy.model, batch, temperature).logprobs
    for row, segment in zip(scored, segments, strict=True):
        drawn = torch.tensor(segment.logprobs)
        assert torch.allclose(row[: len(drawn)], drawn, atol=1e-4), segment.completion_ids
