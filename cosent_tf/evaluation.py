"""Metrics as the original experiments report them, and the validate-and-keep-best callback."""
import csv
import logging
import math
import os
import weakref

import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from .backend import keras, model_precision, tf
from .io import atomic_path
from .pipeline import length_sorted_batches, restore_order

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


_INFERENCE_FUNCTIONS = weakref.WeakKeyDictionary()
_IDS = tf.TensorSpec(shape=(None, None), dtype=tf.int32)


def inference_function(model):
    """``model`` in inference mode as a tf.function traced once for every batch shape."""
    function = _INFERENCE_FUNCTIONS.get(model)
    if function is None:
        @tf.function(input_signature=[_IDS, _IDS])
        def function(token_ids, segment_ids):
            with model_precision(model):  # runs while tracing
                return tf.cast(model([token_ids, segment_ids], training=False), tf.float32)

        _INFERENCE_FUNCTIONS[model] = function
    return function


def encode(model, token_ids, batch_size=64, show_progress=False):
    """A model's outputs (float32 numpy) in input order, computed in length-sorted batches.

    Each batch is padded only to its own longest sequence; segment ids are all 0.
    """
    function = inference_function(model)
    order, batches = length_sorted_batches(token_ids, batch_size)
    outputs = [function(ids, np.zeros_like(ids)).numpy()
               for _, ids in tqdm(batches, total=-(-len(order) // batch_size), unit="batch",
                                  desc="encoding", disable=not show_progress)]
    if not outputs:
        return np.zeros((0,) + tuple(model.output_shape[1:]), dtype=np.float32)
    return restore_order(np.concatenate(outputs), order)


def l2_normalize(vectors):
    """Rows scaled to unit length (a zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def pair_cosines(encoder, ids_a, ids_b, batch_size=64, show_progress=False):
    """Cosine of each pair's two sentence vectors (both sides encoded in one pass)."""
    vectors = l2_normalize(encode(encoder, list(ids_a) + list(ids_b), batch_size, show_progress))
    first, second = vectors[: len(ids_a)], vectors[len(ids_a):]
    return np.sum(first * second, axis=1)


def interaction_scores(model, pair_ids, batch_size=64, show_progress=False):
    """A cross-encoder's score per pair: the scalar, or P(similar) for a two-way softmax."""
    outputs = encode(model, pair_ids, batch_size, show_progress)
    return outputs[:, -1]


def correlation_metrics(scores, labels):
    return {"spearman": spearman(scores, labels), "pearson": pearson(scores, labels)}


class ValidationCheckpoint(keras.callbacks.Callback):
    """Evaluate on valid after each epoch (and every ``every_steps`` steps), keep the best.

    ``evaluate(model) -> dict`` computes the metrics. Epoch-end results are logged as
    ``val_<metric>``; the weights of the best epoch by ``monitor`` (higher is better) are
    written atomically to ``weights_path``, so a crash leaves the previous best intact.
    Every evaluation becomes a row (epoch, step, end_of_epoch, metrics...) of ``csv_path``,
    rewritten atomically; a resumed run reloads the rows up to the restored step and
    carries on. With ``restore_best`` the model ends training holding the best weights.
    Best weights are chosen at epoch ends only, as in the original experiments.
    """

    def __init__(self, evaluate, weights_path=None, monitor="spearman", restore_best=True,
                 every_steps=0, csv_path=None):
        super().__init__()
        self.evaluate = evaluate
        self.weights_path = weights_path
        self.monitor = monitor
        self.restore_best = restore_best
        self.every_steps = int(every_steps or 0)
        self.csv_path = csv_path
        self.best = -math.inf
        self.best_epoch = None
        self.history = []
        self._best_weights = None
        self._resume_checked = False

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs=None):
        self._resume_checked = False

    def _resume(self):
        """Reload the history up to the restored step (a backup callback restores it in on_train_begin)."""
        self._resume_checked = True
        step = self._step()
        if step and self.csv_path and os.path.exists(self.csv_path):
            self.history = [row for row in read_history(self.csv_path) if row["step"] <= step]
            for row in self.history:
                if row["end_of_epoch"] and row[self.monitor] > self.best:
                    self.best, self.best_epoch = row[self.monitor], row["epoch"]
            print(f"resumed at step {step}: best valid {self.monitor} so far "
                  f"{self.best:.4f} (epoch {self.best_epoch})", flush=True)

    def on_train_batch_end(self, batch, logs=None):
        if not self.every_steps or batch + 1 == self.params.get("steps"):
            return
        step = self._step()
        if step % self.every_steps == 0:
            metrics = self._record(self._epoch + 1, step, False)
            print(f"step {step} valid: " + _format(metrics), flush=True)

    def on_epoch_begin(self, epoch, logs=None):
        if not self._resume_checked:
            self._resume()
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        metrics = self._record(epoch + 1, self._step(), True)
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
        print(f"epoch {epoch + 1} valid: {_format(metrics)}" + ("  (best so far)" if improved else
              f"  (best {self.best:.4f} at epoch {self.best_epoch})"), flush=True)

    def _record(self, epoch, step, end_of_epoch):
        metrics = self.evaluate(self.model)
        self.history.append({"epoch": epoch, "step": step, "end_of_epoch": end_of_epoch, **metrics})
        if self.csv_path:
            _write_history(self.csv_path, self.history)
        return metrics

    def on_train_end(self, logs=None):
        if not self._resume_checked:  # resumed after the last epoch: no epoch ran
            self._resume()
        if not self.restore_best:
            return
        if self._best_weights is not None:
            self.model.set_weights(self._best_weights)
        elif self.best_epoch is not None and self.weights_path and os.path.exists(self.weights_path):
            self.model.load_weights(self.weights_path)  # best epoch came before a resume


def _format(metrics):
    return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def _write_history(path, rows):
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)


def read_history(path):
    """Rows of a ``valid_metrics.csv`` written by :class:`ValidationCheckpoint`."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [{key: (int(value) if key in ("epoch", "step") else value == "True" if key == "end_of_epoch"
                   else float(value)) for key, value in row.items()} for row in rows]
