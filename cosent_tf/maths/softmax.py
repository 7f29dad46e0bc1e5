"""Sentence-BERT's softmax objective (Reimers & Gurevych, 2019, section 3)::

    loss = mean_k  -log softmax(W [u_k, v_k, |u_k - v_k|] + b)[label_k]

Split as the Keras classes are: a training head turns the interleaved sentence vectors into class
log-probabilities (:func:`pair_features` is what its Dense layer reads), and the loss is their
cross-entropy (:func:`sentence_bert_log_softmax`). Log-probabilities, not probabilities: on JAX the
logits cannot be recovered from probabilities, whose cross-entropy Keras 3 clips at 1e-7 (30 against
16.1 for a confidently wrong pair).
"""

from __future__ import annotations

from typing import Any

from .ops import Ops
from .pairs import ODD_ROWS


def pair_features(ops: Ops, vectors: Any) -> Any:
    """[u, v, |u - v|] for every pair of interleaved vectors (2B, d) -> (B, 3d), in float32."""
    vectors = ops.check_rows(ops.cast(ops.convert_to_tensor(vectors), "float32"), 2, ODD_ROWS)
    first, second = vectors[::2], vectors[1::2]
    return ops.concatenate([first, second, ops.abs(first - second)], axis=1)


def sentence_bert_log_softmax(ops: Ops, y_true: Any, y_pred: Any) -> Any:
    """Mean cross-entropy of the head's log-probabilities (B, C) against each pair's class, read
    from the interleaved labels (2B,) or (2B, 1)."""
    labels = ops.cast(ops.reshape(ops.convert_to_tensor(y_true), [-1])[::2], "int32")
    log_probabilities = ops.cast(y_pred, "float32")
    picked = ops.take_along_axis(log_probabilities, labels[:, None], axis=1)
    return -ops.mean(picked)
