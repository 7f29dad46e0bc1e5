"""Regression of the cosine of a pair onto its label scaled to [0, 1] (sentence-transformers'
CosineSimilarityLoss; the MSE baseline of "CoSENT (1)")::

    loss = mean_k (cos(u_k, v_k) - label_k / max_label)^2
"""

from __future__ import annotations

from typing import Any

from .ops import Ops
from .pairs import interleaved_cosines, pair_labels


def cosine_mse(ops: Ops, y_true: Any, y_pred: Any, max_label: float = 1.0) -> Any:
    """The loss of interleaved vectors (2B, d) and their labels (the formula above)."""
    cosines = interleaved_cosines(ops, y_pred)
    targets = pair_labels(ops, y_true, ops.dtype_name(cosines)) / ops.constant(max_label, cosines)
    return ops.mean(ops.square(cosines - targets))
