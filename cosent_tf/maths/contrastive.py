"""Direct cosine optimisation with a negative threshold ε (the CoSENT paper's Table I)::

loss = mean_k [ y_k (1 - cos_k) + (1 - y_k) max(0, cos_k - ε) ],  y_k = label_k > positive_above
"""

from __future__ import annotations

from typing import Any

from .ops import Ops
from .pairs import interleaved_cosines, pair_labels


def threshold_contrastive(ops: Ops, y_true: Any, y_pred: Any, epsilon: float = 0.5, positive_above: float = 0.5) -> Any:
    """The loss of interleaved vectors (2B, d) and their labels (the formula above)."""
    cosines = interleaved_cosines(ops, y_pred)
    positive = pair_labels(ops, y_true, ops.dtype_name(cosines)) > positive_above
    pull = ops.constant(1.0, cosines) - cosines
    push = ops.relu(cosines - ops.constant(epsilon, cosines))
    return ops.mean(ops.where(positive, pull, push))
