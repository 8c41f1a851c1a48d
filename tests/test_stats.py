"""The intervals behind every model comparison (muactl/stats.py)."""

from muactl.stats import bootstrap, paired, verdict


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_tasks():
    few = {"0": {f"t{i}": float(i % 2) for i in range(20)}}
    many = {"0": {f"t{i}": float(i % 2) for i in range(400)}}
    p, lo, hi = bootstrap(few)
    assert p == 0.5 and lo < 0.5 < hi
    p2, lo2, hi2 = bootstrap(many)
    assert p2 == 0.5 and (hi2 - lo2) < (hi - lo) / 3  # width shrinks like 1/sqrt(n)


def test_constant_outcomes_have_a_zero_width_interval():
    assert bootstrap({"0": {"a": 1.0, "b": 1.0}}) == (1.0, 1.0, 1.0)
    assert all(x != x for x in bootstrap({}))  # nothing to measure: NaN, not a made-up number


def test_seeds_are_resampled_too():
    # two seeds that disagree completely: the interval spans both, though each seed alone is certain
    p, lo, hi = bootstrap({"0": {f"t{i}": 0.0 for i in range(50)}, "1": {f"t{i}": 1.0 for i in range(50)}})
    assert p == 0.5 and lo == 0.0 and hi == 1.0


def test_paired_difference_separates_a_consistent_gain_that_unpaired_intervals_cannot():
    # 20 tasks; the second model solves the same tasks plus 5 more: +0.25, no task moves down
    before = {"0": {f"t{i}": float(i < 8) for i in range(20)}}
    after = {"0": {f"t{i}": float(i < 13) for i in range(20)}}
    _, lo_b, hi_b = bootstrap(before)
    _, lo_a, hi_a = bootstrap(after)
    assert lo_a < hi_b  # unpaired intervals overlap
    d, lo, hi = paired(after, before)
    assert abs(d - 0.25) < 1e-9 and lo > 0
    assert verdict(lo, hi).startswith("a gain")
    assert verdict(-0.1, 0.2).startswith("within noise") and verdict(-0.3, -0.1).startswith("a loss")


def test_paired_uses_only_tasks_both_models_ran():
    d, lo, hi = paired({"0": {"a": 1.0, "b": 1.0}}, {"0": {"a": 0.0, "c": 1.0}})
    assert (d, lo, hi) == (1.0, 1.0, 1.0)
