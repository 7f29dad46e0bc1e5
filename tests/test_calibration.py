"""The match decision (:mod:`cosent_tf.calibration`) against references written here: thresholds
against an exhaustive search, the ECE against a per-pair binning loop, the isotonic map against a
naive pool-adjacent-violators, the Platt map against a direct scipy fit of Platt's objective."""

import dataclasses
import hashlib
import json
import math
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special

from cosent_tf import ConfigError
from cosent_tf.calibration import (
    CALIBRATION_METHODS,
    DECISION_FILE,
    HELD_OUT_FOLDS,
    MIN_CALIBRATION_PAIRS,
    MIN_PAIRS_PER_CLASS,
    ONE_SIDED_SHARE,
    MatchDecision,
    ScoreMap,
    accuracy_at,
    best_f1_threshold,
    best_threshold,
    brier_score,
    decision_metrics,
    decision_or_threshold,
    decision_warnings,
    expected_calibration_error,
    f1_at,
    fit_decision,
    fit_isotonic,
    fit_platt,
    format_threshold,
    held_out_folds,
    log_loss,
    majority_accuracy,
    plot_reliability,
    read_decision,
    reliability_bins,
    uncalibrated_probability,
    write_decision,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# --- references ----------------------------------------------------------------------------------


def confusion(scores, labels, threshold):
    """(true positives, false positives, false negatives, true negatives), pair by pair."""
    counts = [0, 0, 0, 0]
    for score, label in zip(scores, labels):
        predicted, positive = score > threshold, label > 0.5
        counts[{(True, True): 0, (True, False): 1, (False, True): 2, (False, False): 3}[predicted, positive]] += 1
    return counts


def reference_accuracy(scores, labels, threshold):
    tp, fp, fn, tn = confusion(scores, labels, threshold)
    return (tp + tn) / len(scores)


def reference_f1(scores, labels, threshold):
    tp, fp, fn, tn = confusion(scores, labels, threshold)
    return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0


def reference_majority(labels):
    """(the accuracy of answering every pair "match", that of answering every pair "no match"), pair by pair."""
    all_match = sum(1 for label in labels if label > 0.5) / len(labels)
    all_no_match = sum(1 for label in labels if not label > 0.5) / len(labels)
    return all_match, all_no_match


def reference_match_share(scores, threshold):
    return sum(1 for score in scores if score > threshold) / len(scores)


def every_split(scores):
    """A threshold for each way ``score > threshold`` can split the pairs: below every score, and at
    each distinct score (which splits them as every threshold up to the next distinct score does)."""
    distinct = sorted({float(s) for s in scores})
    return [distinct[0] - 1.0, *distinct]


def reference_bins(probabilities, labels, bins=10):
    """Per bin [i/bins, (i+1)/bins) (the last also holding 1): its pairs, pair by pair."""
    members = [[] for _ in range(bins)]
    for p, y in zip(probabilities, labels):
        i = bins - 1 if p == 1.0 else next(i for i in range(bins) if i / bins <= p < (i + 1) / bins)
        members[i].append((p, float(y > 0.5)))
    return members


def reference_ece(probabilities, labels, bins=10):
    members = reference_bins(probabilities, labels, bins)
    total = 0.0
    for pairs in members:
        if pairs:
            mean_p = sum(p for p, _ in pairs) / len(pairs)
            share = sum(y for _, y in pairs) / len(pairs)
            total += len(pairs) * abs(share - mean_p)
    return total / len(probabilities)


def reference_isotonic(scores, targets):
    """Naive pool-adjacent-violators: the distinct scores and the fitted value at each, pairs of
    one score pooled by their number."""
    distinct = sorted({float(s) for s in scores})
    blocks = []  # [sum of targets, pairs, distinct scores]
    for x in distinct:
        members = [float(t) for s, t in zip(scores, targets) if s == x]
        blocks.append([sum(members), len(members), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, weight, width = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += weight
            blocks[-1][2] += width
    values = [total / weight for total, weight, width in blocks for _ in range(width)]
    return np.array(distinct), np.array(values)


def platt_targets(labels):
    y = np.asarray(labels) > 0.5
    positives, negatives = int(y.sum()), int((~y).sum())
    return np.where(y, (positives + 1) / (positives + 2), 1 / (negatives + 2))


def reference_platt(scores, labels):
    """``(slope, intercept)`` minimising Platt's objective on the raw scores, by a trust-region
    Newton method with the exact Hessian."""
    s, t = np.asarray(scores, dtype=np.float64), platt_targets(labels)

    def loss(w):
        logits = w[0] * s + w[1]
        return np.sum(np.logaddexp(0, logits) - t * logits)

    def gradient(w):
        residual = special.expit(w[0] * s + w[1]) - t
        return np.array([np.sum(residual * s), np.sum(residual)])

    def hessian(w):
        p = special.expit(w[0] * s + w[1])
        v = p * (1 - p)
        return np.array([[np.sum(v * s * s), np.sum(v * s)], [np.sum(v * s), np.sum(v)]])

    return optimize.minimize(loss, [0.0, 0.0], jac=gradient, hess=hessian, method="trust-exact", tol=1e-12).x


def labelled_scores(seed, pairs=120, separation=1.5, decimals=None):
    """Scores of pairs with 0/1 labels, matches higher by ``separation`` standard deviations, at
    least :data:`MIN_PAIRS_PER_CLASS` of each class; rounded to ``decimals`` to make ties."""
    rng = np.random.default_rng(seed)
    labels = rng.random(pairs) < 0.4
    labels[:MIN_PAIRS_PER_CLASS] = True
    labels[MIN_PAIRS_PER_CLASS : 2 * MIN_PAIRS_PER_CLASS] = False
    scores = 0.6 + 0.15 * (rng.standard_normal(pairs) + separation * labels)
    if decimals is not None:
        scores = np.round(scores, decimals)
    return scores, labels.astype(np.float64)


def write_record(folder, record):
    with open(os.path.join(folder, DECISION_FILE), "w") as f:
        json.dump(record, f)


# --- thresholds ----------------------------------------------------------------------------------

# Scores from a coarse grid (many ties) or any floats in [-1, 1] (some a float apart).
score_lists = st.one_of(
    st.lists(st.integers(0, 8).map(lambda i: i / 8), min_size=1, max_size=40),
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=40),
)


@settings(max_examples=100, deadline=None)
@given(score_lists, st.data())
def test_thresholds_match_an_exhaustive_search_over_every_split(scores, data):
    labels = data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=len(scores), max_size=len(scores)))
    splits = every_split(scores)

    threshold, accuracy = best_threshold(scores, labels)
    best_accuracy = max(reference_accuracy(scores, labels, t) for t in splits)
    assert accuracy == pytest.approx(best_accuracy, abs=1e-12)
    assert reference_accuracy(scores, labels, threshold) == pytest.approx(best_accuracy, abs=1e-12)
    assert accuracy_at(scores, labels, threshold) == pytest.approx(best_accuracy, abs=1e-12)

    f1_threshold, f1 = best_f1_threshold(scores, labels)
    best_f1 = max(reference_f1(scores, labels, t) for t in splits)
    assert f1 == pytest.approx(best_f1, abs=1e-12)
    assert reference_f1(scores, labels, f1_threshold) == pytest.approx(best_f1, abs=1e-12)
    assert f1_at(scores, labels, f1_threshold) == pytest.approx(best_f1, abs=1e-12)


def test_the_f1_optimum_is_not_the_accuracy_optimum_when_matches_sit_low():
    # by hand: above 0.55 only the last pair is a match, right 4 of 6 times; F1 there is 2*1/(2*1+0+2) = 1/2.
    # Calling every pair a match is right 3 of 6 times, but its F1 is 2*3/(2*3+3+0) = 2/3, the best.
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    labels = [1, 1, 0, 0, 0, 1]
    threshold, accuracy = best_threshold(scores, labels)
    assert 0.5 < threshold < 0.6 and accuracy == pytest.approx(4 / 6)
    f1_threshold, f1 = best_f1_threshold(scores, labels)
    assert f1_threshold < 0.1 and f1 == pytest.approx(2 / 3)
    assert f1_at(scores, labels, threshold) == pytest.approx(1 / 2)
    assert accuracy_at(scores, labels, f1_threshold) == pytest.approx(3 / 6)


def test_a_threshold_never_splits_tied_scores():
    # by hand: splitting the three 0.5s would let a 1 above a 0 of the same score; the best cut is above all of them
    scores = [0.5, 0.5, 0.5, 0.8]
    labels = [0, 1, 0, 1]
    threshold, accuracy = best_threshold(scores, labels)
    assert 0.5 <= threshold < 0.8 and accuracy == pytest.approx(3 / 4)


def test_a_threshold_between_adjacent_floats_still_separates_them():
    # (0.3 + next float) / 2 rounds up onto the higher score, which would then be called no match
    low = 0.3
    high = float(np.nextafter(low, 1.0))
    threshold, accuracy = best_threshold([low, high], [0, 1])
    assert accuracy == 1.0 and accuracy_at([low, high], [0, 1], threshold) == 1.0
    f1_threshold, f1 = best_f1_threshold([low, high], [0, 1])
    assert f1 == 1.0 and f1_at([low, high], [0, 1], f1_threshold) == 1.0


def test_accuracy_and_f1_at_a_threshold_by_hand():
    scores, labels = [0.2, 0.6, 0.7, 0.9], [0, 1, 0, 1]
    # above 0.5: predicted 0 1 1 1: right 3 of 4; TP 2, FP 1, FN 0, so F1 = 4 / 5
    assert accuracy_at(scores, labels, 0.5) == pytest.approx(3 / 4)
    assert f1_at(scores, labels, 0.5) == pytest.approx(4 / 5)
    # a score equal to the threshold is no match
    assert accuracy_at([0.5], [1], 0.5) == 0.0 and f1_at([0.5], [1], 0.5) == 0.0
    # no predicted and no true match: F1 is 0, not a division by zero
    assert f1_at([0.1, 0.2], [0, 0], 0.5) == 0.0
    assert best_f1_threshold([0.1, 0.2], [0, 0])[1] == 0.0


# --- measures of probabilities -------------------------------------------------------------------

EDGES = [i / 10 for i in range(11)]
probabilities_lists = st.lists(
    st.one_of(
        st.floats(0, 1),
        st.sampled_from(EDGES),
        st.sampled_from(EDGES).map(lambda e: float(np.nextafter(e, 0.0))),
        st.sampled_from(EDGES).map(lambda e: float(np.nextafter(e, 1.0))),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(probabilities_lists, st.data())
def test_ece_and_reliability_bins_match_a_per_pair_binning(probabilities, data):
    labels = data.draw(st.lists(st.sampled_from([0, 1]), min_size=len(probabilities), max_size=len(probabilities)))
    members = reference_bins(probabilities, labels)
    figures = reliability_bins(probabilities, labels)
    assert figures["pairs"].tolist() == [len(pairs) for pairs in members]
    for i, pairs in enumerate(members):
        if pairs:
            assert figures["mean_probability"][i] == pytest.approx(sum(p for p, _ in pairs) / len(pairs), abs=1e-12)
            assert figures["share_matching"][i] == pytest.approx(sum(y for _, y in pairs) / len(pairs), abs=1e-12)
        else:
            assert math.isnan(figures["mean_probability"][i]) and math.isnan(figures["share_matching"][i])
    assert expected_calibration_error(probabilities, labels) == pytest.approx(
        reference_ece(probabilities, labels), abs=1e-12
    )


def test_ece_by_hand_with_probabilities_at_0_1_and_on_an_edge():
    # bins 0, 1 and 9 hold pairs: gaps |0 - 0.05|, |1/2 - 0.15|, |1 - 0.95|, weighted 1, 2, 1 over 4 pairs
    assert expected_calibration_error([0.05, 0.15, 0.15, 0.95], [0, 1, 0, 1]) == pytest.approx(0.8 / 4)
    figures = reliability_bins([0.0, 1.0, 0.3], [0, 1, 1])
    assert figures["pairs"].tolist() == [1, 0, 0, 1, 0, 0, 0, 0, 0, 1]
    # 0 and 1 are perfectly calibrated; the 0.3 that matches is 0.7 off, over 3 pairs
    assert expected_calibration_error([0.0, 1.0, 0.3], [0, 1, 1]) == pytest.approx(0.7 / 3)


def test_log_loss_and_brier_score_by_hand():
    assert log_loss([0.8, 0.4], [1, 0]) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)
    assert brier_score([0.8, 0.4], [1, 0]) == pytest.approx((0.2**2 + 0.4**2) / 2)
    # a certain miss is clipped to 1e-15 from the truth: large but finite
    assert log_loss([0.0], [1]) == pytest.approx(-math.log(1e-15), rel=1e-12)
    # 1 - 1e-15 is held as the nearest float, 1e-15 less about 1e-16: the same loss to 4 digits
    assert log_loss([1.0], [0]) == pytest.approx(-math.log(1e-15), rel=1e-4)
    assert log_loss([0.0, 1.0], [0, 1]) == pytest.approx(0.0, abs=1e-12)
    assert brier_score([0.0, 1.0], [1, 0]) == 1.0


def test_the_uncalibrated_probability_is_the_score_clipped_to_0_1():
    np.testing.assert_array_equal(uncalibrated_probability([-0.3, 0.0, 0.72, 1.0, 1.2]), [0.0, 0.0, 0.72, 1.0, 1.0])


# --- maps from score -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 10).map(lambda i: i / 10), min_size=1, max_size=30),
    st.data(),
)
def test_isotonic_fit_matches_a_naive_pool_adjacent_violators(scores, data):
    targets = data.draw(st.lists(st.floats(0, 5), min_size=len(scores), max_size=len(scores)))
    distinct, values = reference_isotonic(scores, targets)
    score_map = fit_isotonic(scores, targets)
    score_map.check("fit", low=0.0, high=5.0)
    assert set(score_map.scores) <= set(distinct.tolist())
    np.testing.assert_allclose(score_map(scores), np.interp(scores, distinct, values), atol=1e-12)
    # between and beyond the knots: linear over every pooled point, flat past the ends
    grid = np.linspace(-1.0, 2.0, 601)
    np.testing.assert_allclose(score_map(grid), np.interp(grid, distinct, values), atol=1e-12)


def test_isotonic_pools_tied_scores_by_their_number_of_pairs():
    # by hand: score 0 holds three pairs (mean 2/3) and score 1 one pair (0); pooled: (1 + 1 + 0 + 0) / 4
    score_map = fit_isotonic([0.0, 0.0, 0.0, 1.0], [1, 1, 0, 0])
    np.testing.assert_allclose(score_map([0.0, 0.5, 1.0]), [0.5, 0.5, 0.5])


def test_isotonic_keeps_the_last_knot_of_a_flat_stretch():
    # fitted 0 0 0 1: the knot at 1 adds nothing, the knot at 2 starts the rise to 3
    score_map = fit_isotonic([0.0, 1.0, 2.0, 3.0], [0, 0, 0, 1])
    assert score_map.scores == (0.0, 2.0, 3.0)
    np.testing.assert_allclose(score_map([-5.0, 1.5, 2.5, 3.0, 7.0]), [0.0, 0.0, 0.5, 1.0, 1.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_platt_matches_a_direct_fit_of_its_objective_on_the_raw_score(seed):
    scores, labels = labelled_scores(seed, pairs=200)
    scores = 0.9 + 0.1 * (scores - 0.6)  # cosines bunched near 1, as a random model's are
    slope, intercept = reference_platt(scores, labels)
    score_map = fit_platt(scores, labels)
    assert score_map.method == "platt" and score_map.slope > 0
    grid = np.linspace(scores.min() - 0.1, scores.max() + 0.1, 301)
    np.testing.assert_allclose(score_map(grid), special.expit(slope * grid + intercept), atol=1e-6)


def test_platt_on_a_score_that_ranks_matches_low_is_the_constant_base_rate():
    scores, labels = labelled_scores(3, pairs=80, separation=-2.0)
    score_map = fit_platt(scores, labels)
    assert score_map.slope == 0.0
    positives = int(labels.sum())
    grid = np.linspace(-1.0, 2.0, 31)
    np.testing.assert_allclose(score_map(grid), (positives + 1) / (len(labels) + 2))


@settings(max_examples=10, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(MIN_CALIBRATION_PAIRS, 150),
    st.floats(-1.0, 3.0),
    st.sampled_from([None, 1, 2]),
)
def test_a_calibration_map_is_monotone_within_0_1_and_the_lower_held_out_loss(seed, pairs, separation, decimals):
    scores, labels = labelled_scores(seed, pairs, separation, decimals)
    decision = fit_decision(scores, labels, "valid.tsv")
    grid = np.linspace(scores.min() - 1.0, scores.max() + 1.0, 2001)
    probabilities = decision.probability(grid)
    assert np.all(np.diff(probabilities) >= 0)
    assert np.all((probabilities >= 0) & (probabilities <= 1))
    losses = decision.held_out_log_loss
    assert set(losses) == set(CALIBRATION_METHODS)
    assert decision.calibration.method == min(losses, key=losses.get)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=2 * HELD_OUT_FOLDS, max_size=80), st.integers(0, 100))
def test_held_out_folds_hold_both_classes(labels, seed):
    labels = np.array(labels)
    if labels.sum() < HELD_OUT_FOLDS or (~labels).sum() < HELD_OUT_FOLDS:
        labels[:HELD_OUT_FOLDS], labels[HELD_OUT_FOLDS : 2 * HELD_OUT_FOLDS] = True, False
    fold = held_out_folds(labels, seed=seed)
    for k in range(HELD_OUT_FOLDS):
        assert labels[fold == k].any() and not labels[fold == k].all()
    for members in (labels, ~labels):  # each class dealt evenly round the folds
        sizes = np.bincount(fold[members], minlength=HELD_OUT_FOLDS)
        assert sizes.max() - sizes.min() <= 1


# --- fit_decision's bad input --------------------------------------------------------------------


def test_a_decision_needs_both_classes():
    with pytest.raises(ConfigError, match=r"valid\.tsv: every one of its 60 pairs is a match"):
        fit_decision(np.linspace(0, 1, 60), np.ones(60), "valid.tsv")
    with pytest.raises(ConfigError, match="is no match"):
        fit_decision(np.linspace(0, 1, 60), np.zeros(60), "valid.tsv")


@pytest.mark.parametrize("positives, pairs", [(20, 40), (5, 80)])
def test_too_few_pairs_to_calibrate_says_how_many_are_needed(positives, pairs):
    labels = np.arange(pairs) < positives
    scores = np.linspace(0, 1, pairs)
    needed = f"at least {MIN_CALIBRATION_PAIRS} pairs with at least {MIN_PAIRS_PER_CLASS} of each"
    with pytest.raises(ConfigError, match=rf"valid\.tsv has {pairs} pairs .*{needed}"):
        fit_decision(scores, labels, "valid.tsv")


def test_without_enough_pairs_a_decision_can_have_thresholds_and_a_note():
    scores, labels = labelled_scores(4, pairs=30)
    decision = fit_decision(scores, labels, "valid.tsv", require_calibration=False)
    assert decision.thresholds == {
        "accuracy": best_threshold(scores, labels)[0],
        "f1": best_f1_threshold(scores, labels)[0],
    }
    assert decision.calibration is None and str(MIN_CALIBRATION_PAIRS) in decision.note
    np.testing.assert_array_equal(decision.matches(scores), scores > decision.thresholds["accuracy"])
    with pytest.raises(ConfigError) as raised:
        decision.probability([0.5])
    assert decision.note in str(raised.value)


def test_graded_labels_without_a_cut_give_only_the_expected_label_map():
    scores, labels = labelled_scores(5)
    graded = np.round(labels * 3 + scores, 1)
    decision = fit_decision(scores, graded, "sts-b.tsv", graded=True)
    assert decision.thresholds is None and decision.calibration is None and decision.expected_label is not None
    for ask in (decision.threshold, lambda: decision.probability([0.5]), lambda: decision.matches([0.5])):
        with pytest.raises(ConfigError, match=r"sts-b\.tsv.*cosent-tf calibrate MODEL_DIR FILE --cut LABEL"):
            ask()


def test_binary_decision_bad_input():
    scores, labels = labelled_scores(6)
    with pytest.raises(ConfigError, match=r"valid\.tsv: --cut is for graded labels"):
        fit_decision(scores, labels, "valid.tsv", cut=0.5)
    with pytest.raises(ConfigError, match=r"valid\.tsv: the labels are graded \(0 to 5\).*--cut"):
        fit_decision(scores, labels * 5, "valid.tsv")
    with pytest.raises(ConfigError, match=r"valid\.tsv: the model gave 1 non-finite scores"):
        fit_decision(np.where(np.arange(len(scores)) == 5, np.nan, scores), labels, "valid.tsv")
    with pytest.raises(ConfigError, match=r"unknown decision rule 'recall'; the rules are accuracy, f1"):
        fit_decision(scores, labels, "valid.tsv", rule="recall")
    with pytest.raises(ConfigError, match=r"valid\.tsv: no pairs"):
        fit_decision([], [], "valid.tsv")


def test_non_finite_scores_of_either_sign_are_refused():
    scores, labels = labelled_scores(6)
    scores[[3, 7]] = [np.inf, -np.inf]
    with pytest.raises(ConfigError, match=r"valid\.tsv: the model gave 2 non-finite scores"):
        fit_decision(scores, labels, "valid.tsv")


def test_a_cut_that_leaves_one_class_is_refused():
    scores, labels = labelled_scores(7)
    graded = labels * 4 + 1  # 1 and 5
    with pytest.raises(ConfigError, match=r"sts\.tsv: every one of its 120 pairs is no match after the cut 5"):
        fit_decision(scores, graded, "sts.tsv", graded=True, cut=5)


# --- graded labels -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_the_expected_label_map_is_the_least_squares_monotone_fit(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.uniform(0.2, 1.0, 200), 2)
    labels = np.clip(np.round(5 * scores + rng.normal(0, 1.2, 200)), 0, 5)
    decision = fit_decision(scores, labels, "sts-b.tsv", graded=True)
    grid = np.linspace(-1.0, 2.0, 1001)
    expected = decision.expected_labels(grid)
    assert np.all(np.diff(expected) >= 0) and expected.min() >= labels.min() and expected.max() <= labels.max()
    distinct, values = reference_isotonic(scores, labels)
    fitted = decision.expected_labels(scores)
    reference = np.interp(scores, distinct, values)
    np.testing.assert_allclose(fitted, reference, atol=1e-12)
    assert np.sum((fitted - labels) ** 2) == pytest.approx(np.sum((reference - labels) ** 2), rel=1e-12)
    assert decision.fitted_on["label_range"] == [labels.min(), labels.max()]


def test_a_cut_gives_the_decision_fitted_on_labels_above_it():
    rng = np.random.default_rng(8)
    scores = rng.uniform(0.2, 1.0, 150)
    labels = np.clip(np.round(5 * scores + rng.normal(0, 1.0, 150)), 0, 5)
    decision = fit_decision(scores, labels, "sts-b.tsv", graded=True, cut=2.5)
    binary = fit_decision(scores, labels > 2.5, "sts-b.tsv")
    assert decision.thresholds == binary.thresholds
    assert decision.calibration == binary.calibration
    assert decision.fitted_on["positives"] == int(np.sum(labels > 2.5)) and decision.expected_label is not None


# --- the file ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", CALIBRATION_METHODS)
def test_a_decision_round_trips_through_json(method):
    scores, labels = labelled_scores(9)
    decision = fit_decision(scores, labels, "valid.tsv", rule="f1", score="head", weights="sha256:ab")
    calibration = fit_isotonic(scores, labels) if method == "isotonic" else fit_platt(scores, labels)
    decision = dataclasses.replace(decision, calibration=calibration)
    again = MatchDecision.from_json(json.loads(json.dumps(decision.to_json())), "decision.json")
    assert again == decision
    grid = np.linspace(-1.0, 2.0, 301)
    np.testing.assert_array_equal(again.probability(grid), decision.probability(grid))


def test_write_and_read_a_decision_in_a_model_folder(tmp_path):
    weights = b"a checkpoint index"
    (tmp_path / "bert_model.ckpt.index").write_bytes(weights)
    scores, labels = labelled_scores(10)
    decision = fit_decision(scores, labels, "valid.tsv")
    assert read_decision(tmp_path) is None
    path = write_decision(tmp_path, decision)
    assert path == os.path.join(tmp_path, DECISION_FILE)
    assert sorted(os.listdir(tmp_path)) == ["bert_model.ckpt.index", DECISION_FILE]
    read = read_decision(tmp_path)
    assert read.weights == "sha256:" + hashlib.sha256(weights).hexdigest()
    assert read == dataclasses.replace(decision, weights=read.weights)
    # the folder's weights change (another model written over it): the decision no longer holds
    (tmp_path / "bert_model.ckpt.index").write_bytes(b"other weights")
    with pytest.raises(ConfigError, match=rf"{DECISION_FILE}: was fitted on another model's.*cosent-tf calibrate"):
        read_decision(tmp_path)


@pytest.fixture(scope="module")
def decision_record():
    scores, labels = labelled_scores(11)
    return fit_decision(scores, labels, "valid.tsv").to_json()


def edited(record, change):
    record = json.loads(json.dumps(record))
    change(record)
    return record


def falling_map(record):
    record["calibration"] = {"method": "isotonic", "scores": [0.1, 0.5, 0.9], "values": [0.1, 0.8, 0.6]}


def falling_platt(record):
    record["calibration"] = {"method": "platt", "slope": -2.0, "intercept": 0.5}


def text_threshold(record):
    record["thresholds"]["accuracy"] = "0.7"


def other_format(record):
    record["format"] = "someone-else"


def newer_format(record):
    record["format_version"] = 99


def no_format_version(record):
    del record["format_version"]


@pytest.mark.parametrize(
    "change, message",
    [
        (falling_map, r"calibration: knot 2's value 0\.6 is below knot 1's 0\.8"),
        (falling_platt, r"calibration: the Platt slope is -2\.0, so the map falls"),
        (text_threshold, r"thresholds\.accuracy must be a JSON integer or number, not string"),
        (other_format, r"not a cosent-tf decision"),
        (newer_format, r"format_version 99 is newer than this cosent-tf reads \(1\)"),
        (no_format_version, r"has no format_version"),
    ],
)
def test_a_bad_decision_file_is_refused_naming_it_and_what_is_wrong(tmp_path, decision_record, change, message):
    write_record(tmp_path, edited(decision_record, change))
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / DECISION_FILE)) + ".*" + message):
        read_decision(tmp_path)


# --- measures of a decision ----------------------------------------------------------------------


def test_decision_metrics_follow_their_definitions():
    # weakly separated, so that the accuracy and the F1 thresholds differ
    valid_scores, valid_labels = labelled_scores(12, pairs=150, separation=0.5)
    test_scores, test_labels = labelled_scores(13, pairs=150, separation=0.5)
    test_scores = test_scores * 1.4 - 0.2  # some above 1 and below 0, for the score read as a probability
    decision = fit_decision(valid_scores, valid_labels, "valid.tsv")
    metrics = decision_metrics(test_scores, test_labels, decision)

    t, t_f1 = decision.thresholds["accuracy"], decision.thresholds["f1"]
    assert reference_accuracy(test_scores, test_labels, t) != reference_accuracy(test_scores, test_labels, t_f1)
    assert reference_f1(test_scores, test_labels, t) != reference_f1(test_scores, test_labels, t_f1)
    splits = every_split(test_scores)
    p = decision.probability(test_scores)
    y = test_labels > 0.5
    expected = {
        "accuracy": reference_accuracy(test_scores, test_labels, t),
        "threshold": t,
        "f1": reference_f1(test_scores, test_labels, t_f1),
        "f1_threshold": t_f1,
        "accuracy_oracle": max(reference_accuracy(test_scores, test_labels, s) for s in splits),
        "f1_oracle": max(reference_f1(test_scores, test_labels, s) for s in splits),
        "ece_uncalibrated": reference_ece(np.clip(test_scores, 0, 1), test_labels),
        "log_loss": -np.mean([math.log(q) if match else math.log(1 - q) for q, match in zip(p, y)]),
        "brier": np.mean([(q - match) ** 2 for q, match in zip(p, y)]),
        "ece": reference_ece(p, test_labels),
        "majority_accuracy": max(reference_majority(test_labels)),
        "positive_rate": reference_majority(test_labels)[0],
        "match_share": reference_match_share(test_scores, t),
        "f1_match_share": reference_match_share(test_scores, t_f1),
    }
    assert set(metrics) == set(expected) | {"calibration", "threshold_oracle", "f1_threshold_oracle"}
    assert metrics["calibration"] == decision.calibration.method
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-9), key
    assert reference_accuracy(test_scores, test_labels, metrics["threshold_oracle"]) == metrics["accuracy_oracle"]
    assert reference_f1(test_scores, test_labels, metrics["f1_threshold_oracle"]) == pytest.approx(metrics["f1_oracle"])


def test_decision_metrics_without_a_decision_are_the_oracle_and_the_uncalibrated_ece():
    scores, labels = labelled_scores(14)
    metrics = decision_metrics(scores, labels, None)
    assert set(metrics) == {
        "accuracy_oracle",
        "threshold_oracle",
        "f1_oracle",
        "f1_threshold_oracle",
        "ece_uncalibrated",
        "majority_accuracy",
        "positive_rate",
    }
    assert metrics["majority_accuracy"] == max(reference_majority(labels))
    assert metrics["ece_uncalibrated"] == pytest.approx(reference_ece(np.clip(scores, 0, 1), labels), abs=1e-12)


# 290 matches of 1000 pairs: answering "no match" every time is right on 710 of them.
IMBALANCED_PAIRS, IMBALANCED_MATCHES = 1000, 290


def imbalanced_scores(seed, separation):
    """Scores of IMBALANCED_PAIRS pairs with IMBALANCED_MATCHES matches, higher by ``separation``
    standard deviations."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation([1.0] * IMBALANCED_MATCHES + [0.0] * (IMBALANCED_PAIRS - IMBALANCED_MATCHES))
    return 0.6 + 0.1 * (rng.standard_normal(IMBALANCED_PAIRS) + separation * labels), labels


def test_the_majority_baseline_is_the_accuracy_of_answering_every_pair_alike():
    _, labels = imbalanced_scores(20, 0.0)
    assert majority_accuracy(labels) == pytest.approx(0.71, abs=1e-12) == reference_majority(labels)[1]
    assert majority_accuracy(1 - labels) == pytest.approx(0.71, abs=1e-12) == reference_majority(1 - labels)[0]


def test_a_decision_below_the_majority_and_one_that_decides_every_pair_alike_are_warned_of():
    """The issue's case: on pairs of which 29% match, a threshold fitted elsewhere gives an accuracy
    under the 0.71 of answering "no match" every time; one above every score says "no match" to all."""
    scores, labels = imbalanced_scores(21, 0.3)
    too_low = fit_decision(*imbalanced_scores(22, 2.0), "valid.tsv")  # fitted where matches stood apart
    figures = decision_metrics(scores, labels, too_low)
    assert figures["majority_accuracy"] == pytest.approx(0.71) and figures["positive_rate"] == pytest.approx(0.29)
    accuracy, threshold = reference_accuracy(scores, labels, figures["threshold"]), figures["threshold"]
    assert figures["accuracy"] == pytest.approx(accuracy) and accuracy < 0.71
    assert decision_warnings(figures, "test.tsv", len(labels)) == [
        f"test.tsv: accuracy {accuracy:.4f} at the accuracy threshold {format_threshold(threshold)} is not above "
        "that of "
        'answering "no match" every time: 0.7100; on these 1000 pairs the decision does no better than no model'
    ]

    above_all = dataclasses.replace(too_low, thresholds={"accuracy": float(scores.max()), "f1": 0.0})
    figures = decision_metrics(scores, labels, above_all)
    assert figures["accuracy"] == pytest.approx(0.71) and figures["match_share"] == 0.0
    assert figures["f1_match_share"] == 1.0 and figures["f1"] == pytest.approx(2 * 290 / (1000 + 290))
    assert decision_warnings(figures, "test.tsv", len(labels)) == [
        f"test.tsv: accuracy 0.7100 at the accuracy threshold {format_threshold(scores.max())} is not above that of "
        "answering "
        '"no match" every time: 0.7100; on these 1000 pairs the decision does no better than no model',
        f'test.tsv: the accuracy threshold {format_threshold(scores.max())} decides 1000 of the 1000 pairs "no '
        'match": it '
        '(nearly) never says "match"',
        'test.tsv: the f1 threshold 0.0000 decides 1000 of the 1000 pairs "match": it (nearly) never says "no match"',
    ]


def test_a_decision_that_beats_the_majority_and_splits_the_pairs_is_not_warned_of():
    scores, labels = imbalanced_scores(23, 2.0)
    figures = decision_metrics(scores, labels, fit_decision(*imbalanced_scores(24, 2.0), "valid.tsv"))
    assert figures["accuracy"] > 0.8 and 0.1 < figures["match_share"] < 0.5
    assert decision_warnings(figures, "test.tsv", len(labels)) == []


@pytest.mark.parametrize(
    "matches_decided, said",
    [
        (990, '990 of the 1000 pairs "match": it (nearly) never says "no match"'),
        (989, None),
        (10, '990 of the 1000 pairs "no match": it (nearly) never says "match"'),
        (11, None),
    ],
)
def test_a_threshold_is_warned_of_from_one_sided_share_of_the_pairs_decided_alike(matches_decided, said):
    assert ONE_SIDED_SHARE == 0.99
    scores = np.arange(1000, dtype=np.float64)
    threshold = 1000 - matches_decided - 0.5  # matches_decided pairs above it
    figures = {"threshold": threshold, "match_share": reference_match_share(scores, threshold)}
    expected = (
        [] if said is None else [f"pairs.tsv: the accuracy threshold {format_threshold(threshold)} decides {said}"]
    )
    assert decision_warnings(figures, "pairs.tsv", 1000) == expected


def test_a_fitted_decision_records_how_it_does_on_its_own_pairs_and_warns_of_it():
    scores, labels = imbalanced_scores(25, 0.0)  # scores that tell nothing: the best cut answers alike
    decision = fit_decision(scores, labels, "mine.tsv")
    fitted, t, t_f1 = decision.fitted_on, decision.thresholds["accuracy"], decision.thresholds["f1"]
    assert fitted["majority_accuracy"] == pytest.approx(0.71)
    assert fitted["accuracy"] == pytest.approx(reference_accuracy(scores, labels, t))
    assert fitted["match_share"] == reference_match_share(scores, t)
    assert fitted["f1_match_share"] == reference_match_share(scores, t_f1)
    summary = (
        f"accuracy on these pairs {fitted['accuracy']:.4f} at the accuracy threshold "
        '(answering "no match" every time: 0.7100)'
    )
    assert summary in decision.summary()
    warnings = decision.fit_warnings()
    assert warnings == decision_warnings({**fitted, "threshold": t, "f1_threshold": t_f1}, "mine.tsv", 1000)
    assert warnings and all(line.startswith("mine.tsv: ") for line in warnings)
    assert MatchDecision.from_json(json.loads(json.dumps(decision.to_json())), "x").fit_warnings() == warnings
    separated = fit_decision(*imbalanced_scores(26, 3.0), "mine.tsv")
    assert separated.fit_warnings() == [] and separated.fitted_on["accuracy"] > 0.9


def test_decision_metrics_on_graded_labels_without_a_cut_are_the_expected_label_error():
    rng = np.random.default_rng(15)
    scores = rng.uniform(0.2, 1.0, 100)
    labels = np.clip(np.round(5 * scores + rng.normal(0, 1.0, 100)), 0, 5)
    decision = fit_decision(scores[:60], labels[:60], "sts-b.tsv", graded=True)
    metrics = decision_metrics(scores[60:], labels[60:], decision)
    distinct, values = reference_isotonic(scores[:60], labels[:60])
    expected_mae = np.mean(np.abs(np.interp(scores[60:], distinct, values) - labels[60:]))
    assert set(metrics) == {"expected_label_mae"}
    assert metrics["expected_label_mae"] == pytest.approx(expected_mae, abs=1e-12)


def test_a_graded_decision_with_a_cut_is_measured_on_0_1_labels_as_they_are():
    rng = np.random.default_rng(16)
    scores = rng.uniform(0.2, 1.0, 150)
    graded = np.clip(np.round(5 * scores + rng.normal(0, 1.0, 150)), 0, 5)
    decision = fit_decision(scores, graded, "sts-b.tsv", graded=True, cut=2.5)
    test_scores, test_labels = labelled_scores(17)
    metrics = decision_metrics(test_scores, test_labels, decision)
    t = decision.thresholds["accuracy"]
    assert metrics["accuracy"] == pytest.approx(reference_accuracy(test_scores, test_labels, t))
    assert "expected_label_mae" not in metrics


def test_a_folder_from_before_decisions_has_only_its_accuracy_threshold():
    decision = decision_or_threshold(None, 0.7, "cosent_model.json")
    assert decision.threshold() == 0.7 and decision.threshold("accuracy") == 0.7
    np.testing.assert_array_equal(decision.matches([0.6, 0.7, 0.8]), [False, False, True])
    with pytest.raises(ConfigError, match="has no f1 threshold.*cosent-tf calibrate"):
        decision.threshold("f1")
    with pytest.raises(ConfigError, match="no calibration map.*cosent-tf calibrate"):
        decision.probability([0.5])
    assert decision_or_threshold(None, None, "cosent_model.json") is None
    newer = MatchDecision({"file": "valid.tsv"}, {"accuracy": 0.2, "f1": 0.1})
    assert decision_or_threshold(newer, 0.7, "cosent_model.json") is newer


def test_the_reliability_diagram_is_a_png_written_whole(tmp_path):
    scores, labels = labelled_scores(18)
    decision = fit_decision(scores, labels, "valid.tsv")
    path = tmp_path / "reliability.png"
    plot_reliability(
        str(path),
        {"cosine": (np.clip(scores, 0, 1), labels), "calibrated": (decision.probability(scores), labels)},
        "a test",
    )
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert os.listdir(tmp_path) == ["reliability.png"]


def test_a_score_map_refuses_knots_that_do_not_rise():
    with pytest.raises(ConfigError, match="here: knot 1's score 0.5 does not rise above knot 0's"):
        ScoreMap("isotonic", (0.5, 0.5), (0.1, 0.2)).check("here")
    with pytest.raises(ConfigError, match=r"here: the map's values must lie within \[0, 1\]"):
        ScoreMap("isotonic", (0.1, 0.5), (0.1, 1.2)).check("here")


def test_a_threshold_between_adjacent_float32_scores_decides_them_apart():
    """The scores a model gives are float32; the threshold midway between two of them is a float64
    that a float32 comparison would round onto the higher score."""
    low = np.float32(0.5)
    scores = np.array([np.nextafter(low, np.float32(1)), np.nextafter(np.nextafter(low, np.float32(1)), np.float32(1))])
    labels = np.array([0, 1])
    threshold, accuracy = best_threshold(scores, labels)
    assert accuracy == 1.0 and accuracy_at(scores, labels, threshold) == 1.0
    assert f1_at(scores, labels, threshold) == 1.0
    decision = MatchDecision({"file": "x"}, {"accuracy": threshold, "f1": threshold})
    np.testing.assert_array_equal(decision.matches(scores), [False, True])


def test_a_decision_with_only_an_accuracy_threshold_survives_its_json():
    """A folder from before 0.6 knows only its accuracy threshold; its decision, exported, is read back."""
    old = decision_or_threshold(None, 0.7, "cosent_model.json", score="head")
    again = MatchDecision.from_json(old.to_json(), "decision.json")
    assert again == old and again.threshold() == 0.7 and again.score == "head"
    record = old.to_json()
    record["rule"] = "f1"  # a rule without its threshold
    with pytest.raises(ConfigError, match="the decision's rule 'f1' among them"):
        MatchDecision.from_json(record, "decision.json")


def test_a_graded_map_stays_within_the_labels_it_averages():
    """Three tied top scores labelled 0.8 average to 0.8000000000000002 in floating point."""
    scores = np.array([0.1, 0.2, 0.3, 0.9, 0.9, 0.9])
    labels = np.array([0.0, 0.2, 0.4, 0.8, 0.8, 0.8])
    decision = fit_decision(scores, labels, "x.tsv", graded=True)
    assert max(decision.expected_label.values) <= 0.8
    assert MatchDecision.from_json(decision.to_json(), "decision.json") == decision


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.5, "0.5000"),  # far from 1: four decimals, as always
        (0.912346, "0.91235"),  # 1 - value = 0.087654: its four significant digits need five decimals
        (0.99981234, "0.9998123"),
        (0.99987654, "0.9998765"),
        (-0.99981234, "-0.9998123"),  # near -1 alike
        (1.0, "1.0000"),
        (2.75, "2.7500"),  # an interaction model's score is no cosine
        (1 - 1e-12, "1.000000000"),  # no more decimals than a float32 score has meaning for
        (float("nan"), "nan"),
    ],
)
def test_a_threshold_is_shown_with_four_significant_digits_of_its_distance_from_one(value, shown):
    assert format_threshold(value) == shown


@given(st.floats(0.9, 1 - 1e-8), st.floats(0.9, 1 - 1e-8))
@settings(max_examples=200, deadline=None)
def test_two_thresholds_near_one_are_shown_apart_when_their_distances_from_one_differ(a, b):
    # the shown text read back is within half its last decimal, so its distance from 1 keeps 4 digits
    for value in (a, b):
        decimals = len(format_threshold(value).split(".")[1])
        assert abs(float(format_threshold(value)) - value) <= 0.5 * 10**-decimals
        assert 0.5 * 10**-decimals <= 5e-4 * (1 - value) * (1 + 1e-9) or decimals == 9
    if abs((1 - a) - (1 - b)) > 1e-3 * max(1 - a, 1 - b):
        assert format_threshold(a) != format_threshold(b)


def test_the_decisions_summary_tells_thresholds_near_one_apart():
    decision = MatchDecision(
        {"file": "valid.tsv", "pairs": 100, "labels": "0/1"}, {"accuracy": 0.99981234, "f1": 0.99987654}
    )
    assert decision.summary()[1] == "thresholds: accuracy 0.9998123, f1 0.9998765; deciding by accuracy"
