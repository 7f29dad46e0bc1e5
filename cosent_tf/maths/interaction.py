"""CoSENT on the scalar scores of an interaction (cross-encoder) model (Su, "CoSENT (2)")::

    loss = log(1 + sum_{label(i,j) > label(k,l)} exp(f(k, l) - f(i, j)))

No scale: the score is unbounded and learns its own. Scores are clipped to ±SCORE_LIMIT as in
the original, so that a diverging model cannot produce inf - inf.
"""

from __future__ import annotations

from typing import Any

from .ops import Ops
from .pairs import ranking_loss

SCORE_LIMIT = 1e6


def interaction_cosent(ops: Ops, y_true: Any, y_pred: Any, global_batch: bool = True) -> Any:
    """The loss of one score per pair (B,) or (B, 1) and its labels (the formula above)."""
    scores = ops.as_compute(y_pred)
    scores = ops.clip(ops.reshape(scores, [-1]), -SCORE_LIMIT, SCORE_LIMIT)
    labels = ops.cast(ops.reshape(ops.convert_to_tensor(y_true), [-1]), ops.dtype_name(scores))
    if global_batch:
        scores, labels = ops.gather_across_replicas(scores, labels)
    return ranking_loss(ops, scores, labels)
