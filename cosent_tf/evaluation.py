"""Metrics as the original experiments report them, and the validate-and-keep-best callback."""
import logging
import math

import numpy as np
from scipy import stats

from .backend import keras
from .io import atomic_path
from .pipeline import restore_order, sentence_dataset

logger = logging.getLogger(__name__)


def spearman(scores, labels):
    return float(stats.spearmanr(scores, labels).correlation)


def pearson(scores, labels):
    return float(stats.pearsonr(scores, labels)[0])


def best_threshold(scores, labels):
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


def accuracy_at(scores, labels, threshold):
    return float(np.mean((np.asarray(scores) > threshold) == (np.asarray(labels) > 0.5)))


def encode(encoder, token_ids, batch_size=64):
    """Sentence vectors (float32 numpy) in input order, computed in length-sorted batches."""
    dataset, order = sentence_dataset(token_ids, batch_size)
    return restore_order(np.asarray(encoder.predict(dataset, verbose=0), dtype=np.float32), order)


def pair_cosines(encoder, ids_a, ids_b, batch_size=64):
    """Cosine of each pair's two sentence vectors (both sides encoded in one pass)."""
    vectors = encode(encoder, list(ids_a) + list(ids_b), batch_size)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    first, second = vectors[: len(ids_a)], vectors[len(ids_a):]
    return np.sum(first * second, axis=1)


def interaction_scores(model, pair_ids, batch_size=64):
    """A cross-encoder's score per pair: the scalar, or P(similar) for a two-way softmax."""
    outputs = encode(model, pair_ids, batch_size)
    return outputs[:, -1]


def correlation_metrics(scores, labels):
    return {"spearman": spearman(scores, labels), "pearson": pearson(scores, labels)}


class ValidationCheckpoint(keras.callbacks.Callback):
    """Evaluate after each epoch, log ``val_<metric>``, and keep the best weights.

    ``evaluate(model) -> dict`` computes the metrics; the weights of the best epoch by
    ``monitor`` (higher is better) are written atomically to ``weights_path``, so a crash
    leaves the previous best file intact. With ``restore_best`` the model ends training
    holding the best weights.
    """

    def __init__(self, evaluate, weights_path=None, monitor="spearman", restore_best=True):
        super().__init__()
        self.evaluate = evaluate
        self.weights_path = weights_path
        self.monitor = monitor
        self.restore_best = restore_best
        self.best = -math.inf
        self.best_epoch = None
        self.history = []
        self._best_weights = None

    def on_epoch_end(self, epoch, logs=None):
        metrics = self.evaluate(self.model)
        self.history.append({"epoch": epoch + 1, **metrics})
        if logs is not None:
            logs.update({f"val_{k}": v for k, v in metrics.items()})
        value = metrics[self.monitor]
        improved = value > self.best
        if improved:
            self.best, self.best_epoch = value, epoch + 1
            self._best_weights = self.model.get_weights()
            if self.weights_path:
                with atomic_path(self.weights_path) as tmp:
                    self.model.save_weights(tmp)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(f"epoch {epoch + 1} valid: {shown}" + ("  (best so far)" if improved else
              f"  (best {self.best:.4f} at epoch {self.best_epoch})"), flush=True)

    def on_train_end(self, logs=None):
        if self.restore_best and self._best_weights is not None:
            self.model.set_weights(self._best_weights)
