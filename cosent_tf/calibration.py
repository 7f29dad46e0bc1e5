"""The match decision shipped with a model (``decision.json`` in its folder): the thresholds that are
best for accuracy and for F1 on labelled pairs, a calibration map from score to the probability of a
match, and for graded labels a map from score to the expected label, with the data they were fitted
on; and the measures of a decision: accuracy and F1 at a threshold, log-loss, Brier score, expected
calibration error and the reliability diagram.

A cosine is a ranking score, not a probability: its scale differs from model to model (a model from
random weights gives unrelated sentences cosines near 1), so a threshold or a probability holds only
for the model and the kind of data it was fitted on.

The calibration map is isotonic regression (piecewise linear between its knots, flat beyond them,
as scikit-learn's ``IsotonicRegression`` predicts) or Platt scaling (a sigmoid of the score, fitted
to Platt's smoothed targets), whichever has the lower log-loss on held-out folds of the fitting
data; both are non-decreasing in the score (a Platt fit that would fall is replaced by the base
rate). References: Platt, "Probabilistic outputs for support vector machines" (1999);
Zadrozny & Elkan, "Transforming classifier scores into accurate multiclass probability estimates"
(KDD 2002); Guo et al., "On calibration of modern neural networks" (ICML 2017) for the ECE.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
from scipy import optimize, special

from .choices import ONNX_FILES
from .errors import ConfigError
from .io import file_digest, json_field, read_json, write_json

ArrayLike = Any

DECISION_FILE = "decision.json"
DECISION_FORMAT = "cosent-tf-decision"
DECISION_FORMAT_VERSION = 1

# What a threshold is chosen to maximise on the fitting data, and what that makes of it for people;
# the first is the default rule. Neither is where the probability of a match crosses 0.5: F1's best
# threshold lies where it is about half the best F1 (Lipton et al., "Thresholding classifiers to
# maximize F1 score", 2014), so the f1 rule calls matches of probabilities below 0.5.
RULE_MEANINGS = {
    "accuracy": "the score that decides the most of the pairs it was fitted on right",
    "f1": "the score that maximises F1 of the match class on the pairs it was fitted on",
}
RULES = tuple(RULE_MEANINGS)
# A threshold that decides at least this share of the pairs it is applied to alike (all "match" or
# all "no match") tells (nearly) none of them apart: training, evaluate and calibrate warn of it.
ONE_SIDED_SHARE = 0.99
CALIBRATION_METHODS = ("isotonic", "platt")
# A calibration map needs this many pairs of each class and in all: five held-out folds of it must
# each hold both classes, and fewer pairs give a map that mostly says which pairs were there.
MIN_PAIRS_PER_CLASS = 10
MIN_CALIBRATION_PAIRS = 50
HELD_OUT_FOLDS = 5
ECE_BINS = 10
# Probabilities are clipped this far from 0 and 1 in the log-loss, so that one confident miss
# counts heavily (about 34.5) but finitely.
LOG_LOSS_EPSILON = 1e-15

# The weight files whose content identifies a model's scores, in the order looked for: a cosent-tf
# model folder's checkpoint index (it holds every tensor's checksum), a Hugging Face folder's weights.
WEIGHT_FILES = ("bert_model.ckpt.index", "model.safetensors", "pytorch_model.bin", ONNX_FILES["float32"])

# A threshold or cosine is shown with at least THRESHOLD_DECIMALS decimals, and with more near 1 (or
# -1): enough to keep THRESHOLD_SIGNIFICANT_DIGITS digits of its distance from 1. A model whose
# vectors crowd together puts every cosine within 1e-3 of 1, where four decimals show one number.
THRESHOLD_DECIMALS = 4
THRESHOLD_SIGNIFICANT_DIGITS = 4
# float64 thresholds between float32 scores: digits past these say nothing
THRESHOLD_MOST_DECIMALS = 9


def format_threshold(value: float) -> str:
    """A threshold (or a cosine a decision compares with one) as text, with digits enough to tell
    apart two that differ near 1: every place that prints a threshold calls this.

    Args:
        value: the threshold.

    Returns:
        ``value`` with :data:`THRESHOLD_DECIMALS` decimals, or as many more (up to
        :data:`THRESHOLD_MOST_DECIMALS`) as keep :data:`THRESHOLD_SIGNIFICANT_DIGITS` significant
        digits of ``1 - |value|``; ``nan`` or ``inf`` as Python writes them.

    Example:
        >>> format_threshold(0.5), format_threshold(0.99981234), format_threshold(0.99987654)
        ('0.5000', '0.9998123', '0.9998765')
    """
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    decimals = THRESHOLD_DECIMALS
    gap = 1.0 - abs(value)
    if 0 < gap < 1:
        decimals = max(decimals, THRESHOLD_SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(gap)))
    return f"{value:.{min(decimals, THRESHOLD_MOST_DECIMALS)}f}"


# --- thresholds ----------------------------------------------------------------------------------


def _cut_counts(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each cut k of the sorted scores (the first k called no match): the true positives, the
    false positives and the positives in all, with the sorted scores and which cuts fall between
    distinct scores (or at either end)."""
    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="stable")
    sorted_scores, sorted_positive = scores[order], positive[order]
    positives_below = np.concatenate([[0], np.cumsum(sorted_positive)])
    negatives_below = np.concatenate([[0], np.cumsum(~sorted_positive)])
    true_positives = positive.sum() - positives_below
    false_positives = (~positive).sum() - negatives_below
    possible = np.concatenate([[True], sorted_scores[1:] > sorted_scores[:-1], [True]])
    return true_positives, false_positives, sorted_scores, possible


def _threshold_of_cut(sorted_scores: np.ndarray, k: int) -> float:
    if k == 0:
        return float(sorted_scores[0] - 1.0)
    if k == len(sorted_scores):
        return float(sorted_scores[-1])
    below, above = sorted_scores[k - 1], sorted_scores[k]
    middle = (below + above) / 2.0
    # between adjacent floats the midpoint can round up onto the higher score, which would then be no match
    return float(middle if middle < above else below)


def best_threshold(scores: ArrayLike, labels: ArrayLike) -> tuple[float, float]:
    """The threshold on ``scores`` that maximises accuracy against 0/1 ``labels``.

    Exhaustive: every midpoint between consecutive distinct scores is tried (the original
    searched with Powell's method, which can stop in a local optimum). Predicts 1 for
    ``score > threshold``. Returns ``(threshold, accuracy)``.
    """
    true_positives, false_positives, sorted_scores, possible = _cut_counts(scores, labels)
    true_negatives = false_positives[0] - false_positives
    correct = np.where(possible, true_positives + true_negatives, -1)
    k = int(np.argmax(correct))
    return _threshold_of_cut(sorted_scores, k), float(correct[k] / len(sorted_scores))


def best_f1_threshold(scores: ArrayLike, labels: ArrayLike) -> tuple[float, float]:
    """The threshold on ``scores`` that maximises F1 of the match class against 0/1 ``labels``,
    searched exhaustively as :func:`best_threshold`; ``(threshold, f1)``. Without a positive label
    F1 is 0 at every threshold."""
    true_positives, false_positives, sorted_scores, possible = _cut_counts(scores, labels)
    positives = true_positives[0]
    # F1 = 2 TP / (2 TP + FP + FN), FN = positives - TP
    denominator = 2 * true_positives + false_positives + (positives - true_positives)
    f1 = np.where(denominator > 0, 2 * true_positives / np.maximum(denominator, 1), 0.0)
    f1 = np.where(possible, f1, -1.0)
    k = int(np.argmax(f1))
    return _threshold_of_cut(sorted_scores, k), float(f1[k])


def accuracy_at(scores: ArrayLike, labels: ArrayLike, threshold: float) -> float:
    """The share of pairs whose prediction ``score > threshold`` matches the 0/1 label."""
    # in float64: a threshold midway between two float32 scores would round onto one in float32
    return float(np.mean((np.asarray(scores, dtype=np.float64) > threshold) == (np.asarray(labels) > 0.5)))


def f1_at(scores: ArrayLike, labels: ArrayLike, threshold: float) -> float:
    """F1 of the match class when ``score > threshold`` is called a match (0 when there is no
    predicted and no true match)."""
    predicted, positive = np.asarray(scores, dtype=np.float64) > threshold, np.asarray(labels) > 0.5
    true_positives = int(np.sum(predicted & positive))
    denominator = int(predicted.sum()) + int(positive.sum())
    return 2 * true_positives / denominator if denominator else 0.0


def majority_accuracy(labels: ArrayLike) -> float:
    """The accuracy of answering every pair with the more common of its 0/1 ``labels``: the bar a
    decision's accuracy is worth something above (0.71 on pairs of which 29% are matches)."""
    rate = float(np.mean(np.asarray(labels) > 0.5))
    return max(rate, 1.0 - rate)


def match_share_at(scores: ArrayLike, threshold: float) -> float:
    """The share of pairs that ``score > threshold`` decides a match."""
    return float(np.mean(np.asarray(scores, dtype=np.float64) > threshold))


def majority_baseline(labels: ArrayLike) -> dict[str, float]:
    """What an accuracy on 0/1 ``labels`` is to be read against: ``majority_accuracy``
    (:func:`majority_accuracy`) and ``positive_rate``, the share of matches, which says which answer
    the majority is."""
    return {"majority_accuracy": majority_accuracy(labels), "positive_rate": float(np.mean(np.asarray(labels) > 0.5))}


def majority_said(figures: Mapping[str, Any]) -> str:
    """The majority baseline of ``figures`` (:func:`majority_baseline`'s keys) for people:
    ``answering "no match" every time: 0.7100``."""
    rate = figures["positive_rate"]
    answer = '"match"' if rate > 0.5 else '"no match"' if rate < 0.5 else '"match" (or "no match")'
    return f"answering {answer} every time: {figures['majority_accuracy']:.4f}"


def decision_warnings(
    figures: Mapping[str, Any], where: str, pairs: int, threshold_named: str = "the accuracy threshold"
) -> list[str]:
    """What is wrong with a match decision measured on ``pairs`` labelled pairs of ``where``, one
    line each (none when nothing is).

    Two things: ``accuracy`` (at ``threshold``, named ``threshold_named``) not above
    ``majority_accuracy``, the accuracy of answering every pair alike; and a threshold that decides
    at least :data:`ONE_SIDED_SHARE` of the pairs alike, from the share it decides a match
    (``match_share`` at ``threshold``, ``f1_match_share`` at ``f1_threshold``). ``figures`` holds
    them as :func:`decision_metrics` does; a figure it lacks is not checked.

    Example:
        >>> figures = {"accuracy": 0.71, "threshold": 0.9, "majority_accuracy": 0.71, "positive_rate": 0.29,
        ...            "match_share": 0.0}
        >>> len(decision_warnings(figures, "pairs.tsv", 100))
        2
    """
    said = []
    if "accuracy" in figures and "majority_accuracy" in figures and figures["accuracy"] <= figures["majority_accuracy"]:
        said.append(
            f"{where}: accuracy {figures['accuracy']:.4f} at {threshold_named} "
            f"{format_threshold(figures['threshold'])} "
            f"is not above that of {majority_said(figures)}; on these {pairs} pairs the decision does no better than "
            "no model"
        )
    for named, share_key, threshold_key in (
        (threshold_named, "match_share", "threshold"),
        ("the f1 threshold", "f1_match_share", "f1_threshold"),
    ):
        if share_key not in figures:
            continue
        share = figures[share_key]
        side, other, alike = ("match", "no match", share) if share >= 0.5 else ("no match", "match", 1.0 - share)
        if alike >= ONE_SIDED_SHARE - 1e-12:  # a share of exactly ONE_SIDED_SHARE, however it rounds
            said.append(
                f"{where}: {named} {format_threshold(figures[threshold_key])} decides {round(alike * pairs)} of the "
                f"{pairs} pairs "
                f'"{side}": it (nearly) never says "{other}"'
            )
    return said


# --- measures of probabilities -------------------------------------------------------------------


def log_loss(probabilities: ArrayLike, labels: ArrayLike) -> float:
    """Mean negative log-likelihood of 0/1 ``labels`` under ``probabilities`` of a match, clipped
    :data:`LOG_LOSS_EPSILON` from 0 and 1."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), LOG_LOSS_EPSILON, 1 - LOG_LOSS_EPSILON)
    y = np.asarray(labels) > 0.5
    return float(-np.mean(np.where(y, np.log(p), np.log1p(-p))))


def brier_score(probabilities: ArrayLike, labels: ArrayLike) -> float:
    """Mean squared difference between the probability of a match and the 0/1 label."""
    y = (np.asarray(labels) > 0.5).astype(np.float64)
    return float(np.mean((np.asarray(probabilities, dtype=np.float64) - y) ** 2))


def reliability_bins(probabilities: ArrayLike, labels: ArrayLike, bins: int = ECE_BINS) -> dict[str, np.ndarray]:
    """The reliability diagram's figures over ``bins`` equal-width bins of [0, 1] (bin i holds
    probabilities in [i/bins, (i+1)/bins), the last also 1): per bin the pairs, their mean
    probability and the share of them that match (NaN for an empty bin)."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 0.0, 1.0)
    y = (np.asarray(labels) > 0.5).astype(np.float64)
    edges = np.arange(bins + 1) / bins
    # placed by comparison with the edges: floor(p * bins) rounds 0.8999999999999999 up into the bin of 0.9
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_probability = np.bincount(which, weights=p, minlength=bins) / counts
        share_matching = np.bincount(which, weights=y, minlength=bins) / counts
    return {"pairs": counts, "mean_probability": mean_probability, "share_matching": share_matching}


def expected_calibration_error(probabilities: ArrayLike, labels: ArrayLike, bins: int = ECE_BINS) -> float:
    """ECE: over equal-width bins of the probability, the pair-weighted mean of |share of the bin's
    pairs that match - their mean probability| (Guo et al. 2017)."""
    figures = reliability_bins(probabilities, labels, bins)
    used = figures["pairs"] > 0
    gaps = np.abs(figures["share_matching"][used] - figures["mean_probability"][used])
    return float(np.sum(figures["pairs"][used] * gaps) / np.sum(figures["pairs"]))


def uncalibrated_probability(scores: ArrayLike) -> np.ndarray:
    """The score read as a probability the way people read a cosine ("0.72 is 72% alike"): clipped
    to [0, 1]. The baseline a calibration map is measured against."""
    return np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)


# --- maps from score -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScoreMap:
    """A non-decreasing map from a score to a probability or an expected label.

    ``isotonic``: linear between the knots ``(scores[i], values[i])`` (scores strictly rising,
    values not falling) and flat beyond the first and last. ``platt``: ``sigmoid(slope * score +
    intercept)`` with ``slope >= 0``.
    """

    method: str
    scores: tuple[float, ...] = ()
    values: tuple[float, ...] = ()
    slope: float = 0.0
    intercept: float = 0.0

    def __call__(self, scores: ArrayLike) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "platt":
            return special.expit(self.slope * s + self.intercept)
        return np.interp(s, self.scores, self.values)

    def check(self, where: str, low: float = 0.0, high: float = 1.0) -> None:
        """ConfigError naming ``where`` unless the map is well formed, non-decreasing and within
        [``low``, ``high``]."""
        if self.method not in CALIBRATION_METHODS:
            raise ConfigError(f"{where}: method {self.method!r} is not one of {', '.join(CALIBRATION_METHODS)}")
        numbers = (*self.scores, *self.values, self.slope, self.intercept)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
            raise ConfigError(f"{where}: every number of the map must be finite")
        if self.method == "platt":
            if self.slope < 0:
                raise ConfigError(f"{where}: the Platt slope is {self.slope}, so the map falls as the score rises")
            return
        if not self.scores or len(self.scores) != len(self.values):
            raise ConfigError(f"{where}: an isotonic map needs as many scores as values, at least one")
        for i in range(1, len(self.scores)):
            if not self.scores[i] > self.scores[i - 1]:
                raise ConfigError(f"{where}: knot {i}'s score {self.scores[i]} does not rise above knot {i - 1}'s")
            if self.values[i] < self.values[i - 1]:
                raise ConfigError(
                    f"{where}: knot {i}'s value {self.values[i]} is below knot {i - 1}'s {self.values[i - 1]}: "
                    "the map must not fall as the score rises"
                )
        if self.values[0] < low or self.values[-1] > high:
            raise ConfigError(f"{where}: the map's values must lie within [{low:g}, {high:g}]")

    def to_json(self) -> dict[str, Any]:
        if self.method == "platt":
            return {"method": "platt", "slope": self.slope, "intercept": self.intercept}
        return {"method": "isotonic", "scores": list(self.scores), "values": list(self.values)}

    @classmethod
    def from_json(cls, record: Any, where: str, low: float = 0.0, high: float = 1.0) -> ScoreMap:
        if not isinstance(record, dict):
            raise ConfigError(f"{where}: must be a JSON object")
        method = json_field(record, "method", str, where, f"{where}'s method")
        if method == "platt":
            score_map = cls(
                "platt",
                slope=json_field(record, "slope", (int, float), where, default=math.nan),
                intercept=json_field(record, "intercept", (int, float), where, default=math.nan),
            )
        else:
            scores = json_field(record, "scores", list, where, default=[])
            values = json_field(record, "values", list, where, default=[])
            score_map = cls(str(method), tuple(scores), tuple(values))
        score_map.check(where, low, high)
        return score_map


def fit_isotonic(scores: ArrayLike, targets: ArrayLike) -> ScoreMap:
    """The non-decreasing least-squares fit of ``targets`` on ``scores`` (pairs of equal score
    pooled), kept as the first and last knot of each flat stretch."""
    s = np.asarray(scores, dtype=np.float64)
    t = np.asarray(targets, dtype=np.float64)
    unique, inverse = np.unique(s, return_inverse=True)
    weights = np.bincount(inverse).astype(np.float64)
    means = np.bincount(inverse, weights=t) / weights
    # clipped: a block's weighted mean can round a hair past the labels it averages
    fitted = np.clip(optimize.isotonic_regression(means, weights=weights, increasing=True).x, t.min(), t.max())
    keep = np.ones(len(unique), dtype=bool)
    # an inner knot of a flat stretch adds nothing to the interpolation
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return ScoreMap("isotonic", tuple(map(float, unique[keep])), tuple(map(float, fitted[keep])))


def fit_platt(scores: ArrayLike, labels: ArrayLike) -> ScoreMap:
    """Platt scaling: ``sigmoid(a * score + b)`` fitted by maximum likelihood to Platt's targets
    ((positives + 1) / (positives + 2) for a match, 1 / (negatives + 2) otherwise), with ``a >= 0``:
    when the best slope would be negative (the score ranks matches below the rest) the map is the
    constant smoothed base rate."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels) > 0.5
    positives, negatives = int(y.sum()), int((~y).sum())
    targets = np.where(y, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    center, spread = float(s.mean()), float(s.std()) or 1.0
    z = (s - center) / spread

    def loss_and_gradient(parameters: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = parameters
        logits = a * z + b
        loss = np.sum(np.logaddexp(0, logits) - targets * logits)
        residual = special.expit(logits) - targets
        return float(loss), np.array([np.sum(residual * z), np.sum(residual)])

    base_rate = (positives + 1) / (len(s) + 2)
    start = np.array([0.0, special.logit(base_rate)])
    a, b = optimize.minimize(loss_and_gradient, start, jac=True, method="L-BFGS-B").x
    if a <= 0:
        return ScoreMap("platt", slope=0.0, intercept=float(special.logit(base_rate)))
    return ScoreMap("platt", slope=float(a / spread), intercept=float(b - a * center / spread))


CALIBRATION_FITS = {"isotonic": lambda s, y: fit_isotonic(s, np.asarray(y) > 0.5), "platt": fit_platt}


def held_out_folds(labels: ArrayLike, folds: int = HELD_OUT_FOLDS, seed: int = 0) -> np.ndarray:
    """Each pair's fold (0 .. folds-1), stratified: each class is shuffled with ``seed`` and dealt
    round the folds, so every fold holds both classes when each has ``folds`` pairs."""
    y = np.asarray(labels) > 0.5
    fold = np.empty(len(y), dtype=np.int64)
    rng = np.random.default_rng(seed)
    for members in (np.flatnonzero(y), np.flatnonzero(~y)):
        fold[rng.permutation(members)] = np.arange(len(members)) % folds
    return fold


def held_out_log_loss(scores: ArrayLike, labels: ArrayLike, folds: int = HELD_OUT_FOLDS, seed: int = 0) -> dict:
    """Each calibration method's log-loss on held-out folds: fitted on the other folds, measured
    on each fold in turn, averaged over all pairs."""
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels) > 0.5
    fold = held_out_folds(y, folds, seed)
    losses = {}
    for method, fit in CALIBRATION_FITS.items():
        probabilities = np.empty(len(s))
        for k in range(folds):
            out = fold == k
            probabilities[out] = fit(s[~out], y[~out])(s[out])
        losses[method] = log_loss(probabilities, y)
    return losses


# --- the decision --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MatchDecision:
    """What a model's scores mean on the data they were fitted on: ``decision.json``.

    Args:
        fitted_on: the data: ``file`` (what was read), ``pairs``, ``labels`` (``binary`` or
            ``graded``), ``label_range`` ([lowest, highest]), ``cut`` (for graded labels made
            binary: a label above it is a match; else None), and for a binary decision
            ``positives`` and ``positive_rate``, and how the decision does on those pairs:
            ``accuracy`` at the accuracy threshold, ``majority_accuracy`` (:func:`majority_accuracy`)
            and the share of them each threshold decides a match (``match_share`` at the accuracy
            threshold, ``f1_match_share``).
        thresholds: per rule of :data:`RULES`, the score above which a pair is a match; None
            for graded labels without a cut.
        rule: the rule whose threshold decides by default.
        calibration: the map from score to the probability of a match; None when there were too
            few pairs to fit one (``note`` says so) or no binary labels.
        held_out_log_loss: each calibration method's held-out log-loss, which chose ``calibration``.
        expected_label: for graded labels, the map from score to the expected label.
        weights: the fingerprint of the model whose scores were fitted (:func:`weights_fingerprint`).
        score: what the maps read: the model kind's ``scored_by``, ``cosine`` or ``head``.
        note: why a part is missing, when one is.
    """

    fitted_on: dict[str, Any]
    thresholds: Optional[dict[str, float]] = None
    rule: str = RULES[0]
    calibration: Optional[ScoreMap] = None
    held_out_log_loss: Optional[dict[str, float]] = None
    expected_label: Optional[ScoreMap] = None
    weights: Optional[str] = None
    score: str = "cosine"
    note: Optional[str] = None

    @property
    def cut(self) -> Optional[float]:
        """For a decision fitted on graded labels made binary: the label above which a pair is a match."""
        return self.fitted_on.get("cut")

    @property
    def binary(self) -> bool:
        """Whether the decision says match or no match (binary labels, or graded ones with a cut)."""
        return self.thresholds is not None

    def threshold(self, rule: Optional[str] = None) -> float:
        """The threshold of ``rule`` (this decision's own by default); a ConfigError when there is
        none or the rule is unknown."""
        rule = rule or self.rule
        if rule not in RULES:
            raise ConfigError(f"unknown decision rule {rule!r}; the rules are {', '.join(RULES)}")
        if self.thresholds is None:
            raise ConfigError(f"{self._said()}: {self._no_binary()}")
        if rule not in self.thresholds:
            raise ConfigError(f"{self._said()}: has no {rule} threshold ({self.note})")
        return self.thresholds[rule]

    def matches(self, scores: ArrayLike, rule: Optional[str] = None) -> np.ndarray:
        """True where a score is above the threshold of ``rule`` (this decision's own by default)."""
        return np.asarray(scores, dtype=np.float64) > self.threshold(rule)

    def probability(self, scores: ArrayLike) -> np.ndarray:
        """The probability of a match for each score (float64)."""
        if self.calibration is None:
            why = self.note or self._no_binary()
            raise ConfigError(f"{self._said()}: no calibration map: {why}")
        return self.calibration(scores)

    def expected_labels(self, scores: ArrayLike) -> np.ndarray:
        """For a decision fitted on graded labels: the expected label of each score on their scale."""
        if self.expected_label is None:
            raise ConfigError(f"{self._said()}: fitted on binary labels, so it has no graded scale; use probability")
        return self.expected_label(scores)

    def _said(self) -> str:
        return f"the decision fitted on {self.fitted_on.get('file', 'unknown data')}"

    def _no_binary(self) -> str:
        low, high = self.fitted_on.get("label_range", ["?", "?"])
        return (
            f"its labels were graded ({low} to {high}) and no cut made them match / no match; recalibrate with "
            "a cut: cosent-tf calibrate MODEL_DIR FILE --cut LABEL (a label above LABEL is a match)"
        )

    def fit_warnings(self) -> list[str]:
        """:func:`decision_warnings` of the pairs the decision was fitted on: a threshold that decides
        (nearly) all of them alike, and an accuracy no better than answering them all alike. None for a
        decision fitted before those figures were recorded, or without thresholds."""
        fitted = self.fitted_on
        if self.thresholds is None or "majority_accuracy" not in fitted:
            return []
        figures = {**fitted, "threshold": self.thresholds.get("accuracy"), "f1_threshold": self.thresholds.get("f1")}
        return decision_warnings(figures, str(fitted.get("file")), int(fitted.get("pairs", 0)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": DECISION_FORMAT,
            "format_version": DECISION_FORMAT_VERSION,
            "score": self.score,
            "weights": self.weights,
            "fitted_on": self.fitted_on,
            "thresholds": self.thresholds,
            "rule": self.rule,
            "calibration": None if self.calibration is None else self.calibration.to_json(),
            "held_out_log_loss": self.held_out_log_loss,
            "expected_label": None if self.expected_label is None else self.expected_label.to_json(),
            "note": self.note,
        }

    @classmethod
    def from_json(cls, record: dict, where: str) -> MatchDecision:
        """The decision in ``record`` (read from ``where``, named in every error), checked."""
        if record.get("format") != DECISION_FORMAT:
            raise ConfigError(f"{where}: not a cosent-tf decision (format is not {DECISION_FORMAT!r})")
        version = json_field(record, "format_version", int, where)
        if version is None:
            raise ConfigError(f"{where}: has no format_version")
        if version > DECISION_FORMAT_VERSION:
            raise ConfigError(
                f"{where}: format_version {version} is newer than this cosent-tf reads "
                f"({DECISION_FORMAT_VERSION}); upgrade cosent-tf"
            )
        fitted_on = json_field(record, "fitted_on", dict, where, default={})
        thresholds = json_field(record, "thresholds", (dict, type(None)), where)
        rule = json_field(record, "rule", str, where, default=RULES[0])
        if rule not in RULES:
            raise ConfigError(f"{where}: rule {rule!r} is not one of {', '.join(RULES)}")
        if thresholds is not None:  # a folder from before 0.6 knows only its accuracy threshold
            unknown = sorted(set(thresholds) - set(RULES))
            if unknown or rule not in thresholds:
                raise ConfigError(
                    f"{where}: thresholds must name rules of {', '.join(RULES)}, the decision's rule {rule!r} among "
                    f"them{f'; {unknown[0]!r} is none' if unknown else ''}"
                )
            for name in thresholds:
                value = json_field(thresholds, name, (int, float), where, f"thresholds.{name}")
                if not math.isfinite(value):
                    raise ConfigError(f"{where}: thresholds.{name} must be a finite number")
            thresholds = {name: float(thresholds[name]) for name in RULES if name in thresholds}
        cut = fitted_on.get("cut")
        if cut is not None and (isinstance(cut, bool) or not isinstance(cut, (int, float)) or not math.isfinite(cut)):
            raise ConfigError(f"{where}: fitted_on.cut must be a finite number or null")
        calibration = record.get("calibration")
        expected = record.get("expected_label")
        label_range = fitted_on.get("label_range") or [0.0, 1.0]
        if not (
            isinstance(label_range, list)
            and len(label_range) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in label_range)
        ):
            raise ConfigError(f"{where}: fitted_on.label_range must be [lowest, highest], two numbers")
        losses = json_field(record, "held_out_log_loss", (dict, type(None)), where)
        if losses is not None and not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in losses.values()
        ):
            raise ConfigError(f"{where}: held_out_log_loss must map each method to a number")
        return cls(
            fitted_on=fitted_on,
            thresholds=thresholds,
            rule=rule,
            calibration=None if calibration is None else ScoreMap.from_json(calibration, f"{where}: calibration"),
            held_out_log_loss=losses,
            expected_label=None
            if expected is None
            else ScoreMap.from_json(expected, f"{where}: expected_label", *map(float, label_range)),
            weights=json_field(record, "weights", (str, type(None)), where),
            score=json_field(record, "score", str, where, default="cosine"),
            note=json_field(record, "note", (str, type(None)), where),
        )

    def summary(self) -> list[str]:
        """Lines that say what the decision is and what it was fitted on, for people."""
        fitted = self.fitted_on
        lines = [f"fitted on {fitted.get('file')}: {fitted.get('pairs')} pairs, {fitted.get('labels')} labels"]
        if self.binary:
            cut = f" (a label above {self.cut:g} is a match)" if self.cut is not None else ""
            lines[0] += f", {fitted.get('positive_rate', 0):.1%} matches{cut}"
            assert self.thresholds is not None
            lines.append(
                "thresholds: "
                + ", ".join(f"{rule} {format_threshold(value)}" for rule, value in self.thresholds.items())
                + f"; deciding by {self.rule}"
            )
            if "majority_accuracy" in fitted and "accuracy" in fitted:
                lines.append(
                    f"accuracy on these pairs {fitted['accuracy']:.4f} at the accuracy threshold "
                    f"({majority_said(fitted)})"
                )
        if self.calibration is not None and self.held_out_log_loss:
            losses = ", ".join(f"{m} {v:.4f}" for m, v in sorted(self.held_out_log_loss.items()))
            lines.append(f"calibration: {self.calibration.method} (held-out log-loss {losses})")
        elif self.note:
            lines.append(f"calibration: none ({self.note})")
        if self.expected_label is not None:
            low, high = fitted.get("label_range", [0, 1])
            lines.append(f"expected label: isotonic map onto {low:g} to {high:g}")
        return lines


def check_calibration_data(labels: ArrayLike, where: str) -> Optional[str]:
    """None when 0/1 ``labels`` can be calibrated; otherwise why not, naming ``where`` and how many
    pairs are needed."""
    y = np.asarray(labels) > 0.5
    positives, negatives = int(y.sum()), int((~y).sum())
    if len(y) < MIN_CALIBRATION_PAIRS or min(positives, negatives) < MIN_PAIRS_PER_CLASS:
        return (
            f"{where} has {len(y)} pairs ({positives} matches, {negatives} not); a calibration map needs at least "
            f"{MIN_CALIBRATION_PAIRS} pairs with at least {MIN_PAIRS_PER_CLASS} of each"
        )
    return None


def are_binary(labels: ArrayLike) -> bool:
    """Whether every label is 0 or 1 (a match or not), rather than graded."""
    return bool(np.all(np.isin(np.asarray(labels, dtype=np.float64), (0.0, 1.0))))


def label_matches(labels: ArrayLike, cut: Optional[float] = None) -> Optional[np.ndarray]:
    """Which pairs are matches: 0/1 labels as they are; graded labels above ``cut``, or None
    (graded labels say how alike two texts are, not whether they match, until a cut says so)."""
    values = np.asarray(labels, dtype=np.float64)
    if are_binary(values):
        return values > 0.5
    return None if cut is None else values > cut


def check_decision_labels(
    labels: ArrayLike, file: str, graded: bool, cut: Optional[float] = None, require_calibration: bool = True
) -> Optional[np.ndarray]:
    """What :func:`fit_decision` refuses on the labels alone, said before any pair is scored.

    Returns:
        Which pairs are matches (:func:`label_matches`), or None for graded labels without a cut.

    Raises:
        ConfigError: no pairs; graded labels of one value; a cut on 0/1 labels; labels other than 0/1
            not declared graded; one class only (after the cut); with ``require_calibration``, too
            few pairs for a calibration map (:func:`check_calibration_data`).
    """
    values = np.asarray(labels, dtype=np.float64)
    if len(values) == 0:
        raise ConfigError(f"{file}: no pairs to fit a decision on")
    low, high = float(values.min()), float(values.max())
    if graded:
        if low == high:
            raise ConfigError(f"{file}: every pair has the label {low:g}; a graded map needs at least two labels")
        if cut is None:
            return None
        matches = values > cut
    else:
        if cut is not None:
            raise ConfigError(f"{file}: --cut is for graded labels; these are 0/1 and already say match or not")
        if not are_binary(values):
            raise ConfigError(
                f"{file}: the labels are graded ({low:g} to {high:g}), not 0/1; fit them as graded, with a cut "
                "for a match / no match decision (cosent-tf calibrate MODEL_DIR FILE --cut LABEL)"
            )
        matches = values > 0.5
    positives = int(matches.sum())
    if positives in (0, len(values)):
        which = "a match" if positives else "no match"
        after = f" after the cut {cut:g}" if cut is not None else ""
        raise ConfigError(
            f"{file}: every one of its {len(values)} pairs is {which}{after}; a threshold and a calibration map need "
            "pairs of both classes"
        )
    if require_calibration:
        why_not = check_calibration_data(matches, file)
        if why_not is not None:
            raise ConfigError(why_not)
    return matches


def fit_decision(
    scores: ArrayLike,
    labels: ArrayLike,
    file: str,
    graded: bool = False,
    cut: Optional[float] = None,
    rule: str = RULES[0],
    score: str = "cosine",
    weights: Optional[str] = None,
    require_calibration: bool = True,
) -> MatchDecision:
    """Fit a model's decision on its scores of labelled pairs.

    Args:
        scores: one score per pair (a cosine or an interaction model's score).
        labels: the pairs' labels: 0/1, or graded (``graded``).
        file: what the pairs were read from, recorded and named in errors.
        graded: the labels are graded (STS-B's 0 to 5): the expected-label map is fitted, and with
            ``cut`` the binary decision on ``label > cut`` too.
        cut: for graded labels, the label above which a pair is a match.
        rule: the rule whose threshold decides by default (:data:`RULES`).
        score: what the scores are: the model kind's ``scored_by`` (``cosine`` or ``head``).
        weights: the fingerprint of the model (:func:`weights_fingerprint`).
        require_calibration: too few pairs for a calibration map is an error; otherwise the
            decision has thresholds but no map, and ``note`` says why.

    Raises:
        ConfigError: no pairs, non-finite scores, one class only (or one graded label), a cut that
            leaves one class, a cut on binary labels, labels other than 0/1 not said to be ``graded``,
            an unknown rule, or (``require_calibration``) too few pairs.
    """
    s = np.asarray(scores, dtype=np.float64)
    values = np.asarray(labels, dtype=np.float64)
    if rule not in RULES:
        raise ConfigError(f"unknown decision rule {rule!r}; the rules are {', '.join(RULES)}")
    if len(s) == 0 or len(s) != len(values):
        raise ConfigError(
            f"{file}: no pairs to fit a decision on" if len(s) == 0 else "scores and labels differ in length"
        )
    if not np.all(np.isfinite(s)):
        raise ConfigError(f"{file}: the model gave {int(np.sum(~np.isfinite(s)))} non-finite scores; nothing to fit")
    matches = check_decision_labels(values, file, graded, cut, require_calibration)
    fitted_on: dict[str, Any] = {
        "file": file,
        "pairs": len(s),
        "labels": "graded" if graded else "binary",
        "label_range": [float(values.min()), float(values.max())],
        "cut": cut,
    }
    expected_label = fit_isotonic(s, values) if graded else None
    if matches is None:
        return MatchDecision(fitted_on, expected_label=expected_label, weights=weights, score=score)
    positives = int(matches.sum())
    fitted_on.update(positives=positives, positive_rate=positives / len(s))
    accuracy_threshold, accuracy = best_threshold(s, matches)
    thresholds = {"accuracy": accuracy_threshold, "f1": best_f1_threshold(s, matches)[0]}
    # how the decision does on its own pairs, for fit_warnings and the summary
    fitted_on.update(
        accuracy=accuracy,
        majority_accuracy=majority_accuracy(matches),
        match_share=match_share_at(s, thresholds["accuracy"]),
        f1_match_share=match_share_at(s, thresholds["f1"]),
    )
    why_not = check_calibration_data(matches, file)
    if why_not is not None:  # (with require_calibration, check_decision_labels has refused already)
        return MatchDecision(
            fitted_on, thresholds, rule, expected_label=expected_label, weights=weights, score=score, note=why_not
        )
    losses = held_out_log_loss(s, matches)
    method = min(CALIBRATION_METHODS, key=lambda m: losses[m])
    calibration = CALIBRATION_FITS[method](s, matches)
    return MatchDecision(fitted_on, thresholds, rule, calibration, losses, expected_label, weights, score)


def decision_metrics(scores: ArrayLike, labels: ArrayLike, decision: Optional[MatchDecision]) -> dict[str, Any]:
    """How a decision does on labelled pairs.

    On 0/1 labels, or graded ones under the decision's cut: accuracy and F1 at its thresholds next
    to the best thresholds of these pairs themselves (the test oracle) and to the majority baseline
    (:func:`majority_baseline`), the share of pairs each threshold decides a match
    (``match_share``, ``f1_match_share``), and with a calibration map
    the log-loss, Brier score and ECE of its probabilities; the ECE of the score read as a
    probability (``ece_uncalibrated``) always. On graded labels with an expected-label map: that
    map's mean absolute error. Without a decision, only what needs none.
    """
    s = np.asarray(scores, dtype=np.float64)
    values = np.asarray(labels, dtype=np.float64)
    graded = not are_binary(values)
    metrics: dict[str, Any] = {}
    if graded and decision is not None and decision.expected_label is not None:
        metrics["expected_label_mae"] = float(np.mean(np.abs(decision.expected_labels(s) - values)))
    matches = label_matches(values, None if decision is None else decision.cut)
    if matches is None:
        return metrics  # no match / no match without a cut
    if matches.all() or not matches.any():
        return metrics
    threshold_oracle, accuracy_oracle = best_threshold(s, matches)
    f1_threshold_oracle, f1_oracle = best_f1_threshold(s, matches)
    metrics.update(
        **majority_baseline(matches),
        accuracy_oracle=accuracy_oracle,
        threshold_oracle=threshold_oracle,
        f1_oracle=f1_oracle,
        f1_threshold_oracle=f1_threshold_oracle,
        ece_uncalibrated=expected_calibration_error(uncalibrated_probability(s), matches),
    )
    if decision is None or not decision.binary:
        return metrics
    threshold = decision.threshold("accuracy")
    metrics.update(
        accuracy=accuracy_at(s, matches, threshold), threshold=threshold, match_share=match_share_at(s, threshold)
    )
    if decision.thresholds is not None and "f1" in decision.thresholds:
        f1_threshold = decision.threshold("f1")
        metrics.update(
            f1=f1_at(s, matches, f1_threshold),
            f1_threshold=f1_threshold,
            f1_match_share=match_share_at(s, f1_threshold),
        )
    if decision.calibration is not None:
        p = decision.probability(s)
        metrics.update(
            calibration=decision.calibration.method,
            log_loss=log_loss(p, matches),
            brier=brier_score(p, matches),
            ece=expected_calibration_error(p, matches),
        )
    return metrics


# --- the file in a model folder ------------------------------------------------------------------


def weights_fingerprint(folder: str | os.PathLike[str]) -> Optional[str]:
    """``sha256:<hex>`` of the first of :data:`WEIGHT_FILES` in ``folder``: what tells one model's
    scores from another's; None when the folder has none of them."""
    for name in WEIGHT_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return file_digest(path)
    return None


def read_decision(folder: str | os.PathLike[str]) -> Optional[MatchDecision]:
    """The decision in ``folder``/``decision.json``; None when there is none.

    Raises:
        ConfigError: the file is unreadable or malformed (a map edited to fall, a threshold that is
            no number), or was fitted for another model's weights than the folder's.
    """
    path = os.path.join(folder, DECISION_FILE)
    if not os.path.exists(path):
        return None
    decision = MatchDecision.from_json(read_json(path, "a cosent-tf decision"), path)
    fingerprint = weights_fingerprint(folder)
    if decision.weights and fingerprint and decision.weights != fingerprint:
        raise ConfigError(
            f"{path}: was fitted on another model's scores (its weights fingerprint is not this folder's), so its "
            f"thresholds and probabilities mean nothing here; fit one for this model: cosent-tf calibrate "
            f"{os.fspath(folder)} LABELLED_FILE"
        )
    return decision


def write_decision(folder: str | os.PathLike[str], decision: MatchDecision) -> str:
    """Write ``decision`` as ``folder``/``decision.json`` (atomically), stamped with the folder's
    weights fingerprint; returns the file's path."""
    decision = dataclasses.replace(decision, weights=weights_fingerprint(folder))
    path = os.path.join(folder, DECISION_FILE)
    write_json(path, decision.to_json())
    return path


def decision_or_threshold(
    decision: Optional[MatchDecision], threshold: Optional[float], where: str, score: str = "cosine"
) -> Optional[MatchDecision]:
    """The decision of a folder, or for a folder written before decisions existed (cosent-tf < 0.6)
    the accuracy threshold its description carried, as a decision without a calibration map."""
    if decision is not None or threshold is None:
        return decision
    return MatchDecision(
        fitted_on={"file": f"the training task's valid split (recorded in {where} by cosent-tf < 0.6)"},
        thresholds={"accuracy": float(threshold)},
        score=score,
        note="this model folder predates calibration; fit one: cosent-tf calibrate MODEL_DIR LABELLED_FILE",
    )


# --- the reliability diagram ---

UNCALIBRATED_CURVE = "score read as a probability"


def reliability_curves(
    scores: ArrayLike, matches: ArrayLike, decision: Optional[MatchDecision]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The curves a reliability diagram of a decision compares (for :func:`plot_reliability`): the
    score read as a probability and, when the decision has a map, the calibrated probability."""
    matches = np.asarray(matches, dtype=bool)
    curves = {UNCALIBRATED_CURVE: (uncalibrated_probability(scores), matches)}
    if decision is not None and decision.calibration is not None:
        curves[f"calibrated ({decision.calibration.method})"] = (decision.probability(scores), matches)
    return curves


def plot_reliability(
    path: str, curves: Mapping[str, tuple[ArrayLike, ArrayLike]], title: str, bins: int = ECE_BINS
) -> None:
    """Write the reliability diagram of each of ``curves`` (name -> (probabilities, 0/1 labels)) to
    the PNG ``path``: per bin of the probability, the share of pairs that match against their mean
    probability (a calibrated model lies on the diagonal), with each curve's ECE in the legend, and
    below it how many pairs each bin holds."""
    from .plotting import new_figure, save_png

    figure, (top, bottom) = new_figure(2, 1, figsize=(5.5, 6.5))
    top.plot([0, 1], [0, 1], color="0.6", linestyle=":", label="calibrated")
    edges = np.linspace(0.0, 1.0, bins + 1)
    width = 1.0 / bins / max(len(curves), 1)
    for i, (name, (probabilities, labels)) in enumerate(curves.items()):
        figures = reliability_bins(probabilities, labels, bins)
        used = figures["pairs"] > 0
        ece = expected_calibration_error(probabilities, labels, bins)
        top.plot(
            figures["mean_probability"][used],
            figures["share_matching"][used],
            marker="o",
            label=f"{name} (ECE {ece:.3f})",
        )
        bottom.bar(edges[:-1] + i * width, figures["pairs"], width=width, align="edge", label=name)
    top.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean probability in the bin", ylabel="share of pairs that match")
    top.set_title(title, fontsize=10)
    top.legend(fontsize=8, loc="upper left")
    bottom.set(xlim=(0, 1), xlabel="probability", ylabel="pairs")
    figure.tight_layout()
    save_png(figure, path)
