"""Position-balanced multiple-choice scoring (issue 50): every cyclic order of the listed choices,
the rotation-averaged and strict accuracies, the position bias, the gold answer's log-probability
among the choices, and the paired verdict on the rotation-averaged score."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from conftest import VARIED_CHOICES, planted_model, scored_of, write_task

from sinklab.accuracy import evaluate, lm_for, questions, read_task, sizes_for, verdict
from sinklab.accuracy.rotations import shifts
from sinklab.core.errors import SinklabError
from sinklab.core.stats import sign_flip_p

SIZES = sizes_for(0, 4, 12)
CHOICES = ("A", "B", "C")


def listed_order(context: str) -> list[str]:
    """The choices as the last query of ``context`` lists them."""
    query = context.rsplit("\nQ: ", 1)[1].removesuffix("\nAnswer:")
    return query.split("\n  choice: ")[1:]


def position_lm(bias: float = 1.0, constant: float = 0.0):
    """An lm-eval LM that knows nothing but where a choice is listed: the first listed choice gets
    the largest log-likelihood (``-bias`` per position further down), each shifted by ``constant``
    (a term every choice shares, as lm-eval's trailing newline is)."""
    from lm_eval.api.model import LM

    class ByPosition(LM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return [(constant - bias * listed_order(r.args[0]).index(r.args[1]), False) for r in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

        def generate_until(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

    return ByPosition()


@pytest.fixture
def listed_task(tmp_path):
    return read_task(str(write_task(tmp_path / "listed" / "task.json", n=30, choices=CHOICES, append_choices_to_input=True)))


def test_a_model_that_only_prefers_the_first_position_scores_chance_once_rotated(listed_task):
    """Single order: accuracy is the share of answers listed first. Every rotation: each example's
    answer sits once at each position, so the rotation-averaged accuracy is exactly 1/3, no example
    is right under every order, and the picks all fall on the first position."""
    (single,) = evaluate(position_lm(), [listed_task], "test", 0, SIZES, rotations=1)
    assert single.rotations == 1 and single.acc == pytest.approx(single.answers_by_position[0])
    assert single.picks_by_position == (1.0, 0.0, 0.0)
    (balanced,) = evaluate(position_lm(), [listed_task], "test", 0, SIZES)
    assert balanced.rotations == 3 and balanced.n == 12
    assert balanced.score == (pytest.approx(1 / 3),) * 12 and balanced.acc == pytest.approx(1 / 3)
    assert balanced.acc_strict == 0.0 and not any(balanced.correct)
    assert balanced.answers_by_position == (pytest.approx(1 / 3),) * 3
    assert balanced.acc_by_position == (1.0, 0.0, 0.0) and balanced.picks_by_position == (1.0, 0.0, 0.0)
    assert balanced.acc_stderr == 0.0  # every example scores the same


def test_the_gold_log_probability_ignores_what_every_choice_shares(listed_task):
    """lm-eval puts the query's trailing newline into every continuation: a constant in every
    choice's log-likelihood. The raw gold log-likelihood carries it; the log-probability among the
    choices does not."""
    (plain,) = evaluate(position_lm(), [listed_task], "test", 0, SIZES)
    (shifted,) = evaluate(position_lm(constant=-2.0), [listed_task], "test", 0, SIZES)
    assert shifted.gold_logprob == pytest.approx(plain.gold_logprob)
    assert [s - p for s, p in zip(shifted.gold_loglik, plain.gold_loglik)] == pytest.approx([-2.0] * 12)
    expected = -math.log(1 + math.exp(-1) + math.exp(-2))  # first listed: log-softmax of (0, -1, -2)
    assert plain.gold_logprob[0] == pytest.approx((expected + (expected - 1) + (expected - 2)) / 3)


def choice_entropy(k: int, bias: float = 1.0) -> float:
    """The entropy (nats) of softmax(0, -bias, ..., -(k - 1) bias), by its definition."""
    weights = [math.exp(-bias * j) for j in range(k)]
    return -sum(w / sum(weights) * math.log(w / sum(weights)) for w in weights)


def test_the_entropy_over_the_choices_is_that_of_their_normalised_distribution(listed_task):
    """Log-likelihoods 0, -1, -2 by listed position, in every order: the distribution over the
    choices is softmax(0, -1, -2) = (0.665, 0.245, 0.090), entropy 0.8324 nats (hand-checked:
    log Z + (e^-1 + 2 e^-2) / Z with Z = 1 + e^-1 + e^-2); weights left unnormalised would give
    e^-1 + 2 e^-2 = 0.6386. Mutation caught: the entropy computed on unnormalised weights."""
    assert choice_entropy(3) == pytest.approx(0.8323956, abs=1e-6)
    (balanced,) = evaluate(position_lm(), [listed_task], "test", 0, SIZES)
    (single,) = evaluate(position_lm(bias=2.0), [listed_task], "test", 0, SIZES, rotations=1)
    assert balanced.entropy == (pytest.approx(0.8323956, abs=1e-6),) * 12
    assert balanced.row()["entropy"] == pytest.approx(0.8323956, abs=1e-6)
    assert single.entropy == (pytest.approx(choice_entropy(3, bias=2.0)),) * 12


def test_examples_with_different_numbers_of_choices_are_each_asked_in_every_order_of_their_own(tmp_path):
    """Test examples with 2, 4 and 3 listed choices (VARIED_CHOICES) and a model that only prefers
    the first listed position: each is asked once per rotation of its own choices, so it is right
    in exactly one of its k orders (score 1/k, never strict), its entropy is that of k choices, the
    task's accuracy is the mean of the 1/k and equals its chance, the recorded rotations are the
    most (4), and every pick falls on the first position. Mutations caught: chance read from the
    first example only; the entropy computed on unnormalised weights."""
    path = write_task(tmp_path / "varied" / "task.json", n=30, choices=VARIED_CHOICES, append_choices_to_input=True)
    task = read_task(str(path))
    counts = [len(e.choices) for e in task.splits(0, 0, 0, 12)["test"]]
    assert sorted(set(counts)) == [2, 3, 4] and [len(shifts(e, 0)) for e in task.splits(0, 0, 0, 12)["test"]] == counts
    (scored,) = evaluate(position_lm(), [task], "test", 0, SIZES)
    assert scored.rotations == 4 and scored.n == 12
    assert scored.score == tuple(pytest.approx(1 / k) for k in counts) and not any(scored.correct)
    assert scored.acc == pytest.approx(sum(1 / k for k in counts) / 12) and scored.chance == pytest.approx(scored.acc)
    assert scored.entropy == tuple(pytest.approx(choice_entropy(k)) for k in counts)
    assert scored.picks_by_position == (1.0, 0.0, 0.0, 0.0) and scored.acc_by_position[0] == 1.0


def test_a_task_that_lists_no_choices_is_asked_once(tmp_path, tokenizer):
    task = read_task(str(write_task(tmp_path / "unlisted" / "task.json", n=30, choices=CHOICES)))
    assert shifts(task.examples[0], 0) == (0,)
    (scored,) = evaluate(lm_for(planted_model(tokenizer), tokenizer), [task], "test", 0, SIZES)
    assert scored.rotations == 1 and scored.listed is False and scored.n == 12
    assert scored.row()["listed"] is False  # a table's "orders 1" says why: "choices listed: no"


def test_fewer_rotations_are_evenly_spaced(listed_task):
    example = listed_task.examples[0]
    assert shifts(example, 0) == (0, 1, 2) and shifts(example, 1) == (0,) and shifts(example, 9) == (0, 1, 2)
    assert [e.choices for e in (example.rotated(s) for s in (0, 1, 2))] == [
        example.choices,
        example.choices[1:] + example.choices[:1],
        example.choices[2:] + example.choices[:2],
    ]
    assert all(example.rotated(s).choices[example.rotated(s).gold] == example.choices[example.gold] for s in range(3))


def test_the_verdict_pairs_the_rotation_averaged_scores():
    """A change of 1/3 on every example of the score, with no strict outcome changed: the accuracy
    change is the score's (not the strict outcomes', which would be 0), the sign-flip p is exact."""
    before = scored_of("t", [False] * 6, chance=1 / 3, score=[1 / 3] * 6)
    after = scored_of("t", [False] * 6, chance=1 / 3, score=[2 / 3] * 6)
    paired = verdict(before, after)
    assert paired["acc_change"]["mean"] == pytest.approx(1 / 3)
    assert paired["acc_change"]["p_sign_flip"] == pytest.approx(2 / 2**6)
    assert paired["mcnemar"] == {"gained": 0, "lost": 0, "p": 1.0}
    with pytest.raises(SinklabError, match="needs the same orders"):
        verdict(before, replace(after, rotations=3))


def test_the_sign_flip_test_on_hand_checked_cases():
    assert sign_flip_p([1, 1, 1, 1, 1]) == pytest.approx(2 / 32)
    assert sign_flip_p([0, 0, 1, 0]) == 1.0  # one non-zero difference: both signs as extreme
    assert sign_flip_p([0.0] * 5) == 1.0
    assert sign_flip_p([1, -1, 1, -1]) == 1.0
    many = [1.0] * 30  # beyond exact enumeration: (1 + hits) / (1 + draws), never 0
    assert 0 < sign_flip_p(many) < 1e-3


def test_every_order_of_an_example_is_asked_after_the_same_shots(listed_task, tokenizer):
    """lm-eval draws each doc's shots from one generator that advances per doc; the orders of one
    example must share theirs, or the position balance would mix in which shots were drawn.
    Mutation caught: the per-example reseeding dropped (an example's orders get other shots)."""
    planted = planted_model(tokenizer)
    asked = questions(lm_for(planted, tokenizer), listed_task, "test", 2, sizes_for(2, 4, 12))
    assert len(asked) == 36  # 12 examples x 3 orders, in example order
    shots = [q.pairs[0][0][: q.query_start] for q in asked]
    assert all(shots[i] == shots[i + 1] == shots[i + 2] for i in range(0, 36, 3))
    assert len({tuple(s) for s in shots}) > 1  # examples still draw their own shots


def test_a_renamed_task_asks_the_same_prompts(tmp_path):
    """The listed order of each example's choices is seeded by the example itself, not by the name
    the task goes by. Mutation caught: seeding by the task's name (a renamed copy lists its
    choices in other orders, and under rotation asks other orders)."""
    path = write_task(tmp_path / "nav" / "task.json", n=30, choices=CHOICES, append_choices_to_input=True)
    first, renamed = read_task(str(path)), read_task(f"{path}:other")
    assert renamed.name == "other" and [e.query for e in first.examples] == [e.query for e in renamed.examples]
    assert len({e.choices for e in first.examples}) > 1  # the orders do vary between examples


def test_fewer_rotations_than_choices_are_spread_over_the_positions(tmp_path):
    """N < choices: N evenly spaced left shifts. Mutation caught: the first N shifts (0, 1) instead."""
    path = write_task(tmp_path / "four" / "task.json", n=4, choices=("A", "B", "C", "D"), append_choices_to_input=True)
    example = read_task(str(path)).examples[0]
    assert shifts(example, 2) == (0, 2) and shifts(example, 3) == (0, 1, 2) and shifts(example, 4) == (0, 1, 2, 3)


def test_rotation_averaged_figures_are_means_over_examples_with_the_sample_standard_error():
    """Two examples: the first right in 1 of its 3 orders, the second in all 3. acc = (1/3 + 1) / 2,
    the strict accuracy 1/2, the standard error the sample standard deviation of (1/3, 1) over
    sqrt(2) (lm-eval's formula for a mean). Mutations caught: the mean over docs (4/6 = 2/3 too,
    but the stderr differs), the population standard deviation."""
    from sinklab.accuracy.scored import gathered

    def sample(doc_id, example, right):
        logliks = [[-1.0, False], [-2.0, False], [-3.0, False]]
        return {"doc_id": doc_id, "doc": {"example": example, "gold": 0 if right else 1}, "filtered_resps": logliks,
                "acc": float(right), "acc_norm": float(right)}  # fmt: skip

    samples = [sample(0, 0, True), sample(1, 0, False), sample(2, 0, False)] + [sample(3 + i, 1, True) for i in range(3)]
    scored = gathered("t", "test", 0, True, samples, {"acc,none": 4 / 6, "acc_stderr,none": 0.0, "acc_norm,none": 4 / 6,
                                                       "acc_norm_stderr,none": 0.0})  # fmt: skip
    assert scored.score == (pytest.approx(1 / 3), 1.0) and scored.acc == pytest.approx(2 / 3)
    assert scored.acc_strict == 0.5 and scored.rotations == 3
    assert scored.acc_stderr == pytest.approx(math.sqrt(((1 / 3 - 2 / 3) ** 2 + (1 - 2 / 3) ** 2) / 1) / math.sqrt(2))
    assert scored.picks_by_position == (1.0, 0.0, 0.0)  # the first choice's log-likelihood is the largest in every doc
    # one example, one order: lm-eval writes its standard error as 'N/A' (a float() of it was a traceback)
    one = gathered("t", "test", 0, False, [sample(0, 0, True)], {"acc,none": 1.0, "acc_stderr,none": "N/A",
                                                                "acc_norm,none": 1.0, "acc_norm_stderr,none": "N/A"})  # fmt: skip
    assert one.acc == 1.0 and math.isnan(one.acc_stderr) and math.isnan(one.acc_norm_stderr)
