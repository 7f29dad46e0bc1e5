"""Metrics as the original experiments report them: Spearman (and Pearson) of scores against
labels, and accuracy at the threshold that is best on valid. Scores come from
:mod:`cosent_tf.inference`."""

import warnings

import numpy as np
from scipy import stats

from . import inference


def spearman(scores, labels) -> float:
    return float(stats.spearmanr(scores, labels).correlation)


def pearson(scores, labels) -> float:
    return float(stats.pearsonr(scores, labels)[0])


def best_threshold(scores, labels) -> tuple:
    """The threshold on ``scores`` that maximises accuracy against 0/1 ``labels``.

    Exhaustive: every midpoint between consecutive distinct scores is tried (the original
    searched with Powell's method, which can stop in a local optimum). Predicts 1 for
    ``score > threshold``. Returns ``(threshold, accuracy)``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="stable")
    sorted_scores, sorted_positive = scores[order], positive[order]
    # Correct predictions when the first k sorted items are called negative:
    # negatives among them plus positives after them.
    negatives_below = np.concatenate([[0], np.cumsum(~sorted_positive)])
    positives_above = positive.sum() - np.concatenate([[0], np.cumsum(sorted_positive)])
    correct = negatives_below + positives_above
    # A cut is only possible between distinct scores (and at both ends).
    valid = np.concatenate([[True], sorted_scores[1:] > sorted_scores[:-1], [True]])
    correct = np.where(valid, correct, -1)
    k = int(np.argmax(correct))
    if k == 0:
        threshold = sorted_scores[0] - 1.0
    elif k == len(scores):
        threshold = sorted_scores[-1]
    else:
        threshold = (sorted_scores[k - 1] + sorted_scores[k]) / 2.0
    return float(threshold), float(correct[k] / len(scores))


def accuracy_at(scores, labels, threshold: float) -> float:
    return float(np.mean((np.asarray(scores) > threshold) == (np.asarray(labels) > 0.5)))


def pair_scores(model, kind: str, inputs, batch_size: int = 64) -> np.ndarray:
    """One score per pair: the cosine of a feature model's two vectors (``inputs`` = (ids_a,
    ids_b)), or an interaction model's score of the concatenated pair (``inputs`` = pair ids)."""
    if kind == "feature":
        return inference.cosine_scores(model, *inputs, batch_size=batch_size)
    if kind == "interaction":
        return inference.interaction_scores(model, inputs, batch_size=batch_size)
    raise ValueError(f"unknown model kind {kind!r}; choose feature or interaction")


def correlation_metrics(scores, labels) -> dict:
    return {"spearman": spearman(scores, labels), "pearson": pearson(scores, labels)}


def task_metrics(scores, labels, valid_scores=None, valid_labels=None, binary=False) -> dict:
    """Spearman and Pearson; for ``binary`` labels also accuracy at the threshold tuned on valid."""
    metrics = correlation_metrics(scores, labels)
    if binary and valid_scores is not None:
        threshold, _ = best_threshold(valid_scores, valid_labels)
        metrics.update(accuracy=accuracy_at(scores, labels, threshold), threshold=threshold)
    return metrics


def mean_over_tasks(per_task: dict) -> dict:
    """Flatten per-task metrics; with several tasks the headline is their mean Spearman."""
    if len(per_task) == 1:
        return dict(next(iter(per_task.values())))
    flat = {"spearman": float(np.mean([m["spearman"] for m in per_task.values()]))}
    for task, metrics in per_task.items():
        flat.update({f"{task}.{k}": v for k, v in metrics.items()})
    return flat


def pair_cosines(encoder, ids_a, ids_b, batch_size=64, show_progress=False):
    """Deprecated: :func:`cosent_tf.inference.cosine_scores`."""
    warnings.warn("pair_cosines is deprecated; use cosent_tf.inference.cosine_scores", DeprecationWarning, stacklevel=2)
    return inference.cosine_scores(encoder, ids_a, ids_b, batch_size, show_progress)
