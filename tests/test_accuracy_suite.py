"""The suite rule (issue 50): each candidate's rotation-averaged scores tested one-sided against
chance by a t-test, Holm's correction over every candidate screened, the margin, and the test
split's confirmation."""

from __future__ import annotations

import math

import pytest
from conftest import scored_of

from sinklab.accuracy.suite import above_chance_t, confirmed, holm, interval, screen


def test_holms_step_down_on_hand_checked_p_values():
    """m = 4 at alpha 0.05: thresholds 0.0125, 0.0167, 0.025, 0.05. b (0.014) passes Holm where
    Bonferroni (0.0125 for all) would fail it; c (0.03) fails, and d (0.04, below its own 0.05)
    fails too because the steps stop at c. Mutations caught: Bonferroni, and no stop after the
    first failure."""
    assert holm({"a": 0.001, "b": 0.014, "c": 0.03, "d": 0.04}, 0.05) == {"a": True, "b": True, "c": False, "d": False}
    assert holm({"a": 0.001, "b": 0.004}, 0.01) == {"a": True, "b": True}  # 0.004 < 0.01 / 1
    assert holm({"a": 0.006}, 0.01) == {"a": True}


def test_the_one_sided_t_test_and_interval_on_a_hand_checked_sample():
    """Scores 1,1,0,1,1,0,1,1 against chance 0.5: mean 0.75, sd 0.4629, t = 1.5275 on 7 degrees."""
    from scipy import stats

    scored = scored_of("t", [True] * 8, chance=0.5, score=[1, 1, 0, 1, 1, 0, 1, 1])
    sd = math.sqrt((6 * 0.25**2 + 2 * 0.75**2) / 7)
    t = 0.25 / (sd / math.sqrt(8))
    assert above_chance_t(scored) == pytest.approx(stats.t.sf(t, 7))
    low, high = interval(scored)
    half = stats.t.ppf(0.975, 7) * sd / math.sqrt(8)
    assert (low, high) == (pytest.approx(0.75 - half), pytest.approx(0.75 + half))
    below = scored_of("t", [False] * 8, chance=0.5, score=[0, 0, 1, 0, 0, 1, 0, 0])
    assert above_chance_t(below) == pytest.approx(stats.t.cdf(t, 7))  # below chance: the one-sided p is near 1


def test_the_screen_keeps_what_passes_holm_and_the_margin_and_the_test_split_confirms():
    """Three candidates of 300 examples at chance 0.25: one far above (kept), one significantly but
    only 0.03 above (fails the margin), one at chance. Mutations caught: the margin dropped (the
    second kept); the correction dropped is caught by the last test of this file."""
    n = 300
    far = scored_of("far", [False] * n, chance=0.25, score=[0.75] * (n // 2) + [0.25] * (n // 2))
    near = scored_of("near", [False] * n, chance=0.25, score=[0.28 + 0.01 * ((i % 3) - 1) for i in range(n)])
    flat = scored_of("flat", [False] * n, chance=0.25, score=[0.0, 0.5] * (n // 2))
    rows = {r["task"]: r for r in screen([far, near, flat])}
    assert rows["far"]["kept"] and rows["far"]["holm_passed"]
    assert rows["near"]["holm_passed"] and not rows["near"]["kept"]
    assert not rows["flat"]["holm_passed"] and not rows["flat"]["kept"]
    assert rows["far"]["acc_low"] < 0.5 < rows["far"]["acc_high"]
    assert confirmed(far) and not confirmed(flat)


def test_holm_passes_a_p_value_equal_to_its_threshold():
    """Holm rejects where p_(i) <= alpha / (m - i + 1). Mutation caught: ``<`` (0.005 = 0.01 / 2 fails)."""
    assert holm({"a": 0.005, "b": 0.01}, 0.01) == {"a": True, "b": True}


def test_old_configs_judged_with_one_order_on_the_earlier_splits_stay_what_they_ran():
    """A config.json from before the split rule: judged accuracy means rule 1 and one order; judging
    nothing, today's defaults (nothing was drawn). Mutations caught: the migration writing rule 2."""
    from sinklab.accuracy import EVERY, SPLIT_RULE, migrated_judge

    assert migrated_judge({"accuracy": ["navigate"]}) == {"accuracy": ["navigate"], "splits": 1, "accuracy_rotations": 1}
    assert migrated_judge({"accuracy": []})["splits"] == SPLIT_RULE == 2
    assert migrated_judge({"accuracy": []})["accuracy_rotations"] == EVERY
    assert migrated_judge({"tasks": ["x"]}, "tasks", "rotations") == {"tasks": ["x"], "splits": 1, "rotations": 1}


def test_the_screen_corrects_for_every_candidate_and_the_confirmation_holds_its_alpha():
    """One candidate at p ~ 0.005 among four at chance: below 0.01 alone, above Holm's 0.01 / 5, so
    the screen does not keep it; a test split at p ~ 0.02 does not confirm at 0.01. Mutations
    caught: screen() without Holm (uncorrected p < alpha), confirmed() at 0.05."""
    n = 100
    lone = scored_of("lone", [False] * n, chance=0.25, score=[1.0] * 38 + [0.0] * 62)
    flats = [scored_of(f"flat{i}", [False] * n, chance=0.25, score=[0.0, 0.5] * (n // 2)) for i in range(4)]
    assert 0.002 < above_chance_t(lone) < 0.01
    rows = {r["task"]: r for r in screen([lone, *flats])}
    assert not rows["lone"]["holm_passed"] and not rows["lone"]["kept"]
    assert screen([lone])[0]["kept"]  # alone, the same scores are kept
    test = scored_of("lone", [False] * n, chance=0.25, score=[1.0] * 35 + [0.0] * 65)
    assert 0.01 < above_chance_t(test) < 0.05 and not confirmed(test)


def test_the_screen_script_never_scores_a_task_on_fewer_than_200_examples():
    """The issue's floor for the selection split, on --examples and on each --examples-for."""
    from conftest import benchmark_module

    with benchmark_module("suite_screen") as script:
        assert script.examples_for(["timedial=200"], 1000) == {"timedial": 200}
        for overrides, default in ((["timedial=199"], 1000), (["timedial"], 1000), ([], 150)):
            with pytest.raises(SystemExit, match="at least 200|N >= 200"):
                script.examples_for(overrides, default)
