import math

import pytest

from honed.sampling import EnvironmentMixture


def test_counts_sum_to_the_batch_and_minimums_hold_in_every_batch():
    mix = EnvironmentMixture({"math": 6.0, "code": 3.0, "slow": 1.0}, min_share={"slow": 0.2})
    for batch in [1, 5, 7, 16, 33] * 40:
        counts = mix.allocate(batch)
        assert sum(counts.values()) == batch
        assert counts["slow"] >= math.ceil(0.2 * batch)


def test_shares_follow_weights_where_the_minimum_does_not_bind():
    mix = EnvironmentMixture({"a": 0.7, "b": 0.3}, min_share={"b": 0.25}, seed=1)
    for _ in range(3000):
        mix.allocate(8)
    shares = mix.metrics_dict()
    assert shares["mixture/a/share"] == pytest.approx(0.7, abs=0.01)
    assert shares["mixture/b/share"] == pytest.approx(0.3, abs=0.01)


def test_a_binding_minimum_gives_exactly_the_minimum():
    mix = EnvironmentMixture({"a": 0.7, "b": 0.3}, min_share={"b": 0.5})
    assert [mix.allocate(8) for _ in range(20)] == [{"a": 4, "b": 4}] * 20
    # 0.07 * 100 is 7.000000000000001 in floating point: still 7 items, not 8
    rare = EnvironmentMixture({"a": 1.0, "rare": 1e-9}, min_share={"rare": 0.07})
    assert rare.allocate(100) == {"a": 93, "rare": 7}


def test_deterministic_by_seed_and_state():
    def run(mix, n):
        return [mix.allocate(10) for _ in range(n)]

    weights = {"a": 1.0, "b": 1.0, "c": 2.0}
    assert run(EnvironmentMixture(weights, seed=3), 50) == run(
        EnvironmentMixture(weights, seed=3), 50
    )
    assert run(EnvironmentMixture(weights, seed=3), 50) != run(
        EnvironmentMixture(weights, seed=4), 50
    )

    mix = EnvironmentMixture(weights, seed=3)
    run(mix, 10)
    resumed = EnvironmentMixture(weights, seed=0)
    resumed.load_state_dict(mix.state_dict())
    assert run(resumed, 30) == run(mix, 30)
    assert resumed.metrics_dict() == mix.metrics_dict()


def test_metrics_report_each_share_so_far():
    mix = EnvironmentMixture({"a": 1.0, "b": 3.0})
    assert mix.metrics_dict() == {"mixture/a/share": 0.0, "mixture/b/share": 0.0}
    mix.allocate(40)
    shares = mix.metrics_dict()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["mixture/b/share"] > shares["mixture/a/share"]


@pytest.mark.parametrize(
    ("weights", "min_share", "match"),
    [
        ({}, None, "at least one environment"),
        ({"a": 1.0, "b": 0.0}, None, "'b' has weight 0"),
        ({"a": -1.0}, None, "'a' has weight -1"),
        ({"a": math.nan}, None, "positive and finite"),
        ({"math": 1.0}, {"maths": 0.1}, "unknown environment 'maths' \\(did you mean 'math'\\?\\)"),
        ({"a": 1.0}, {"a": 1.5}, "in \\[0, 1\\]"),
        ({"a": 1.0, "b": 1.0}, {"a": 0.6, "b": 0.5}, "add up to 1.1"),
    ],
)
def test_invalid_configurations_are_refused(weights, min_share, match):
    with pytest.raises(ValueError, match=match):
        EnvironmentMixture(weights, min_share=min_share)


def test_batches_too_small_for_the_minimums_are_refused():
    mix = EnvironmentMixture({"a": 1.0, "b": 1.0}, min_share={"a": 0.5, "b": 0.5})
    assert mix.allocate(4) == {"a": 2, "b": 2}
    with pytest.raises(ValueError, match=r"needs 4 items .* batch has 3"):
        mix.allocate(3)
    with pytest.raises(ValueError, match="batch_size"):
        mix.allocate(-1)
    assert mix.allocate(0) == {"a": 0, "b": 0}


def test_loading_another_set_of_environments_is_refused():
    state = EnvironmentMixture({"a": 1.0}).state_dict()
    with pytest.raises(ValueError, match="same environments"):
        EnvironmentMixture({"b": 1.0}).load_state_dict(state)
