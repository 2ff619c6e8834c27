"""The embedded verifiable tasks: reference solvers, scoring, splits, levels, rollouts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import pytest

from honed.envs.base import Sample
from honed.envs.tasks import AdditionEnv, ArithmeticEnv, CountdownEnv, ReverseEnv, SortEnv
from honed.envs.tasks.allocation import apportion, share_evenly
from honed.envs.tasks.arithmetic import last_number
from honed.envs.tasks.expression import MAX_LENGTH, ExpressionError, evaluate
from honed.errors import HonedError
from honed.types import SPLITS, Item

TASKS = [AdditionEnv, ReverseEnv, SortEnv, CountdownEnv]
SMALL = {"train_size": 300, "validation_size": 30, "test_size": 30}


@pytest.fixture(scope="module", params=TASKS, ids=lambda cls: cls.__name__)
def env(request):
    """One default-sized environment per task, built once (items are cached)."""
    return request.param(request.param.__name__.lower(), seed=3)


def all_items(env) -> list[Item]:
    return [item for split in SPLITS for item in env.items(split)]


# Reference solvers -------------------------------------------------------------------------


def test_reference_solves_every_item_of_every_split(env):
    for item in all_items(env):
        score = env.score(item, env.reference(item))
        assert (score.success, score.reward, score.components["exact"]) == (1.0, 1.0, 1.0)
        assert score.components["format"] == 1.0


def test_answers_match_an_independent_reading_of_the_prompt(env):
    """Recompute each answer from the prompt text alone, not from the task's own solver."""
    for item in all_items(env):
        prompt, answer = env.prompt(item), env.reference(item)
        assert prompt.endswith("=")
        if isinstance(env, AdditionEnv):
            a, b = prompt[:-1].split("+")
            assert int(answer) == int(a) + int(b)
            assert len(a) == len(b) == item.level
        elif isinstance(env, ReverseEnv):
            text = prompt.removeprefix("reverse ")[:-1]
            assert answer == "".join(reversed(text)) and len(text) == item.level
        elif isinstance(env, SortEnv):
            text = prompt.removeprefix("sort ")[:-1]
            assert list(answer) == sorted(text) and len(text) == item.level
        else:
            words = prompt[:-1].split()
            assert words[0] == "make" and words[2] == "from"
            assert int(words[1]) == item.data["target"]
            assert [int(w) for w in words[3:]] == item.data["numbers"]


def test_countdown_references_are_real_solutions():
    env = CountdownEnv("countdown", seed=1)
    for item in all_items(env):
        numbers, target = item.data["numbers"], item.data["target"]
        result = evaluate(env.reference(item))
        assert result.value == target
        assert not Counter(result.numbers) - Counter(numbers), "uses a number not given"
        assert len(numbers) == item.level and numbers == sorted(numbers)
        assert target not in numbers and 1 <= target <= 99


def test_countdown_level_two_holds_exactly_the_solvable_pairs():
    """Brute force by hand for two numbers: the space is every solvable target and no other."""
    env = CountdownEnv("countdown", levels=[2])
    expected = set()
    for a in range(1, 10):
        for b in range(a, 10):
            values = {a + b, a * b, b - a} | ({b // a} if b % a == 0 else set())
            expected |= {(a, b, t) for t in values if 1 <= t <= 99 and t not in (a, b)}
    problems = {
        (*env.problem_at(2, i).data["numbers"], env.problem_at(2, i).data["target"])
        for i in range(env.space_size(2))
    }
    assert problems == expected


def test_prompts_and_answers_are_short_printable_ascii(env):
    for item in all_items(env):
        for text in (env.prompt(item), env.reference(item)):
            assert text.isascii() and text.isprintable() and len(text) <= 24


# Scoring -----------------------------------------------------------------------------------


def test_wrong_answers_score_zero(env):
    for item in env.items("test")[:50]:
        ref = env.reference(item)
        for wrong in ("", "?", ref + "1", ref[:-1], "zz" + ref):
            score = env.score(item, wrong)
            assert score.success == 0.0 and score.reward == 0.0, (item.key, wrong)


def test_surrounding_whitespace_is_ignored(env):
    item = env.items("test")[0]
    assert env.score(item, f"  {env.reference(item)}\n").success == 1.0


def item_with(env, answer: str, **data) -> Item:
    return Item(key="k", env=env.name, data={"prompt": "p", "answer": answer, **data})


@pytest.mark.parametrize(
    ("completion", "partial"),
    [("123", 2 / 3), ("1220", 3 / 4), ("12", 2 / 3), ("221", 1 / 3), ("x", 0.0)],
)
def test_string_partial_credit_is_position_wise(completion, partial):
    env = AdditionEnv("addition", partial_credit=0.5, **SMALL)
    score = env.score(item_with(env, "122"), completion)
    assert score.success == 0.0
    assert score.components["partial"] == pytest.approx(partial)
    assert score.reward == pytest.approx(0.5 * partial)
    assert score.reward == pytest.approx(
        score.components["exact"] + env.partial_credit * score.components["partial"]
    )


def test_exact_answer_gets_full_reward_not_more_with_partial_credit():
    env = ReverseEnv("reverse", partial_credit=0.5, **SMALL)
    score = env.score(item_with(env, "cba"), "cba")
    assert (score.reward, score.success, score.components["partial"]) == (1.0, 1.0, 0.0)


def test_format_component_flags_foreign_characters():
    env = SortEnv("sort", **SMALL)
    assert env.score(item_with(env, "0123"), "0124").components["format"] == 1.0
    assert env.score(item_with(env, "0123"), "01a3").components["format"] == 0.0


@pytest.mark.parametrize(
    ("completion", "exact", "valid", "partial"),
    [
        ("3*5+7", 1.0, 1.0, 0.0),
        ("(7-5)*(3+8)", 0.0, 0.0, 0.0),  # 8 is not given
        ("7*3", 0.0, 1.0, 1 - 1 / 22),  # 21: valid, close
        ("7+7+7+1", 0.0, 0.0, 0.0),  # 7 used three times, 1 not given
        ("(3+5)*7", 0.0, 1.0, 0.0),  # 56: too far for any credit
        ("3*5+7=22", 0.0, 0.0, 0.0),
        ("__import__('os')", 0.0, 0.0, 0.0),
        ("7/(5-5)", 0.0, 0.0, 0.0),
    ],
)
def test_countdown_scoring(completion, exact, valid, partial):
    env = CountdownEnv("countdown", partial_credit=0.5, **SMALL)
    item = item_with(env, "3*5+7", numbers=[3, 5, 7], target=22)
    score = env.score(item, completion)
    assert score.components == pytest.approx({"exact": exact, "partial": partial, "format": valid})
    assert score.success == exact
    assert score.reward == pytest.approx(exact + 0.5 * partial)


def test_countdown_accepts_exact_fractions_and_repeated_given_numbers():
    env = CountdownEnv("countdown", **SMALL)
    item = item_with(env, "", numbers=[2, 2, 7], target=7)
    assert env.score(item, "7/2*2").success == 1.0  # exact rational arithmetic, both 2s
    assert env.score(item, "7*2/2/2*2").success == 0.0  # four 2s, two given


# The expression evaluator ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "numbers"),
    [
        ("1+2*3", 7, [1, 2, 3]),
        ("(1+2)*3", 9, [1, 2, 3]),
        ("8-3-2", 3, [8, 3, 2]),
        ("8-(3-2)", 7, [8, 3, 2]),
        ("8/4/2", 1, [8, 4, 2]),
        ("7/2", Fraction(7, 2), [7, 2]),
        (" ( ( 4 ) ) ", 4, [4]),
    ],
)
def test_evaluate(text, value, numbers):
    result = evaluate(text)
    assert (result.value, result.numbers) == (value, numbers)


@pytest.mark.parametrize(
    "text", ["", "1+", "(1+2", "1+2)", "1 2", "-3+4", "2**3", "1/0", "1/(2-2)", "abs(1)", "1.5"]
)
def test_evaluate_rejects(text):
    with pytest.raises(ExpressionError):
        evaluate(text)


def test_evaluate_rejects_overlong_input_instead_of_recursing():
    with pytest.raises(ExpressionError):
        evaluate("(" * MAX_LENGTH + "1" + ")" * MAX_LENGTH)
    assert evaluate("(" * 60 + "1" + ")" * 60).value == 1


# Splits and levels -------------------------------------------------------------------------


def test_splits_are_disjoint_and_keys_unique(env):
    seen_keys: set[str] = set()
    seen_prompts: set[str] = set()
    for split in SPLITS:
        items = env.items(split)
        keys = {item.key for item in items}
        prompts = {env.prompt(item) for item in items}
        assert len(keys) == len(prompts) == len(items)
        assert not keys & seen_keys and not prompts & seen_prompts
        seen_keys |= keys
        seen_prompts |= prompts
        assert all(item.env == env.name and item.key.startswith(env.name + ":") for item in items)


def test_split_sizes_are_as_asked(env):
    assert [len(env.items(s)) for s in SPLITS] == [4000, 200, 200]


def test_same_seed_same_items_other_seed_other_split(env):
    cls = type(env)
    again = cls(env.name, seed=3)
    for split in SPLITS:
        assert env.items(split) == again.items(split)
    other = cls(env.name, seed=4)
    assert [i.key for i in other.items("test")] != [i.key for i in env.items("test")]


def test_levels_are_balanced_in_every_split():
    env = ReverseEnv("reverse", levels=[3, 5, 6])
    for split in SPLITS:
        counts = Counter(item.level for item in env.items(split))
        assert set(counts) == {3, 5, 6}
        assert max(counts.values()) - min(counts.values()) <= 1, (split, counts)


def test_small_level_is_used_whole_and_split_proportionally():
    env = AdditionEnv("addition", levels=[1, 2])
    level_one = {s: [i for i in env.items(s) if i.level == 1] for s in SPLITS}
    assert sum(len(v) for v in level_one.values()) == 100  # every 1-digit sum
    assert len(level_one["validation"]) in (4, 5) and len(level_one["test"]) in (4, 5)
    assert [len(env.items(s)) for s in SPLITS] == [4000, 200, 200]  # level 2 makes up the rest


def test_a_space_too_small_for_the_sizes_gives_everything_proportionally():
    env = AdditionEnv("addition", levels=[1], train_size=80, validation_size=10, test_size=10)
    sizes = [len(env.items(s)) for s in SPLITS]
    assert sizes == [80, 10, 10]
    env = AdditionEnv("addition", levels=[1], train_size=800, validation_size=100, test_size=100)
    assert [len(env.items(s)) for s in SPLITS] == [80, 10, 10]


def test_zero_sized_splits_are_empty():
    env = SortEnv("sort", train_size=0, validation_size=0, test_size=7)
    assert [len(env.items(s)) for s in SPLITS] == [0, 0, 7]


def test_unknown_split_names_the_valid_ones():
    env = AdditionEnv("addition", **SMALL)
    with pytest.raises(HonedError, match=r"no split 'eval'.*train, validation, test"):
        env.items("eval")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"levels": [0]}, "level 0 is out of range"),
        ({"levels": [19]}, "level 19 is out of range"),
        ({"levels": []}, "non-empty list"),
        ({"levels": 3}, "non-empty list"),
        ({"levels": "12"}, "non-empty list"),
        ({"levels": [1.5]}, "integers from 1 to 18"),
        ({"levels": [1, 1]}, "must not repeat"),
        ({"train_size": -1}, "train_size must be an integer >= 0"),
        ({"test_size": 2.5}, "test_size must be an integer >= 0"),
        ({"partial_credit": 1.5}, "partial_credit must be a number between 0 and 1"),
    ],
)
def test_invalid_args_are_honed_errors(args, message):
    with pytest.raises(HonedError, match=message) as info:
        AdditionEnv("add", **args)
    assert "environment 'add'" in str(info.value)


@pytest.mark.parametrize("args", [{"levels": [5]}, {"max_number": 1}, {"max_target": 0}])
def test_invalid_countdown_args(args):
    with pytest.raises(HonedError):
        CountdownEnv("countdown", **args)


# Allocation arithmetic ---------------------------------------------------------------------


def test_share_evenly_fills_small_bins_and_spreads_the_rest():
    assert share_evenly(4400, [100, 10**6, 10**6]) == [100, 2150, 2150]
    assert share_evenly(10, [3, 3, 3]) == [3, 3, 3]
    assert share_evenly(7, [10, 10, 10]) == [3, 2, 2]
    assert share_evenly(5, [0, 10]) == [0, 5]
    assert share_evenly(50, [10, 30, 5]) == [10, 30, 5]
    rng = random.Random(0)
    for _ in range(500):
        capacities = [rng.randint(0, 40) for _ in range(rng.randint(1, 5))]
        total = rng.randint(0, 120)
        counts = share_evenly(total, capacities)
        assert sum(counts) == min(total, sum(capacities))
        assert all(0 <= c <= cap for c, cap in zip(counts, capacities, strict=True))
        unfilled = [c for c, cap in zip(counts, capacities, strict=True) if c < cap]
        # a bin left short of capacity never holds less than another bin minus one
        assert all(u >= max(counts) - 1 for u in unfilled)


def test_apportion_sums_exactly_and_never_exceeds_weights():
    rng = random.Random(0)
    for _ in range(500):
        weights = [rng.randint(0, 50) for _ in range(rng.randint(1, 5))]
        total = rng.randint(0, sum(weights))
        counts = apportion(total, weights)
        assert sum(counts) == total
        assert all(0 <= c <= w for c, w in zip(counts, weights, strict=True))
    assert apportion(200, [100, 2150, 2150]) == [4, 98, 98]  # largest remainders round up


# Rollouts through a scripted generator -----------------------------------------------------


class ScriptedGenerator:
    """Answers prompt i's generation g with `script(prompt, g)`; records the calls it gets."""

    def __init__(self, script):
        self.script = script
        self.calls: list[tuple[list[str], list[int]]] = []
        self.counts: Counter[str] = Counter()

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def generate(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Sample]:
        self.calls.append((list(prompts), list(seeds)))
        samples = []
        for prompt in prompts:
            text = self.script(prompt, self.counts[prompt])
            self.counts[prompt] += 1
            ids = self.encode(text)
            samples.append(Sample(self.encode(prompt), ids, [-0.5] * len(ids), text, False))
        return samples


def test_rollout_groups_have_the_right_shape_and_scorer_rewards():
    env = AdditionEnv("addition", partial_credit=0.5, **SMALL)
    items = env.items("train")[:3]
    answers = {env.prompt(i): env.reference(i) for i in items}
    # generation 0 and 2 answer correctly, 1 gives a near miss, 3 gives nothing
    script = {0: lambda a: a, 1: lambda a: a[:-1] + "x", 2: lambda a: f" {a}\n", 3: lambda a: ""}
    gen = ScriptedGenerator(lambda prompt, g: script[g](answers[prompt]))
    groups = env.rollout(items, gen, num_generations=4, seed=11)

    assert len(gen.calls) == 1  # one batched call for the whole step
    prompts, seeds = gen.calls[0]
    assert prompts == [env.prompt(i) for i in items for _ in range(4)]
    assert len(set(seeds)) == 12
    assert [g.item_key for g in groups] == [i.key for i in items]
    for group, item in zip(groups, items, strict=True):
        assert group.env == "addition" and group.level == item.level
        assert len(group.trajectories) == 4
        answer = answers[env.prompt(item)]
        near = 0.5 * (len(answer) - 1) / len(answer)
        assert group.rewards() == pytest.approx([1.0, near, 1.0, 0.0])
        assert [t.success for t in group.trajectories] == [1.0, 0.0, 1.0, 0.0]
        first = group.trajectories[0]
        assert first.prompt_text == env.prompt(item) and first.completion_text == answer
        assert first.segments[0].prompt_ids == gen.encode(env.prompt(item))
        assert first.segments[0].completion_ids == gen.encode(answer)
        assert first.components["exact"] == 1.0


def test_rollout_seeds_do_not_depend_on_the_batch():
    env = SortEnv("sort", **SMALL)
    items = env.items("train")[:4]
    gen_all = ScriptedGenerator(lambda prompt, g: "0")
    env.rollout(items, gen_all, num_generations=2, seed=5)
    gen_one = ScriptedGenerator(lambda prompt, g: "0")
    env.rollout(items[2:3], gen_one, num_generations=2, seed=5)
    assert gen_one.calls[0][1] == gen_all.calls[0][1][4:6]


# Arithmetic in words (for pretrained chat models) --------------------------------------------


@pytest.mark.parametrize(
    ("op", "terms", "level"), [("+", 2, 2), ("-", 2, 2), ("*", 2, 2), ("+", 3, 1), ("-", 3, 3)]
)
def test_arithmetic_answers_match_the_prompt_read_independently(op, terms, level):
    env = ArithmeticEnv("a", seed=1, op=op, terms=terms, levels=[level], **SMALL)
    keys = set()
    for split in SPLITS:
        for item in env.items(split):
            prompt = env.prompt(item)
            assert prompt.startswith("What is ") and prompt.endswith(
                "? Reply with the number only."
            )
            expression = prompt.removeprefix("What is ").split("?")[0]
            operands = expression.split(f" {op} ")
            assert len(operands) == terms
            assert all(len(x) == level or (level == 1 and x == "0") for x in operands)
            value = int(operands[0])
            for x in operands[1:]:
                value = (
                    value + int(x) if op == "+" else value - int(x) if op == "-" else value * int(x)
                )
            assert env.reference(item) == str(value)
            assert env.score(item, env.reference(item)).success == 1.0
            keys.add(item.key)
    assert len(keys) == sum(SMALL.values())  # disjoint splits, no repeats


@pytest.mark.parametrize(
    ("reply", "success"),
    [
        ("86", 1.0),
        ("47 + 39 = 86.", 1.0),
        ("The answer is 86", 1.0),
        ("86\n\nIs there anything else?", 1.0),
        ("86 or 87", 0.0),  # the last number counts
        ("47 + 39 = 68.", 0.0),
        ("eighty-six", 0.0),
        ("", 0.0),
        ("-86", 0.0),
    ],
)
def test_arithmetic_scores_the_last_number_of_the_reply(reply, success):
    env = ArithmeticEnv("a", levels=[2], **SMALL)
    item = Item(key="a:47+39", env="a", data={"prompt": "", "answer": "86"}, level=2)
    score = env.score(item, reply)
    assert (score.success, score.reward) == (success, success)
    assert score.components["format"] == float(last_number(reply) is not None)


def test_last_number_reads_signs_and_thousands_separators():
    assert last_number("it is -1,234.") == -1234
    assert last_number("no digits") is None
    assert last_number("3, then 12") == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"op": "/"}, "op must be one of"),
        ({"terms": 1}, "terms must be an integer from 2 to 6"),
        ({"template": "What is it?"}, "template must be a string containing {expression}"),
        ({"levels": [10]}, "level"),
    ],
)
def test_arithmetic_rejects_bad_arguments(args, message):
    with pytest.raises(HonedError, match=message):
        ArithmeticEnv("a", **args)
