"""CoSENT on the scalar score of an interaction (cross-encoder) model."""

from __future__ import annotations

from typing import Any

from ..maths.interaction import SCORE_LIMIT as SCORE_LIMIT  # the clip on scores, re-exported
from ..maths.interaction import interaction_cosent
from ..process_keras import ops, serializable
from .base import BatchLoss


def interaction_cosent_loss(y_true: Any, y_pred: Any, global_batch: bool = True) -> Any:
    """CoSENT over the scores of a cross-encoder; see :class:`InteractionCoSENTLoss`."""
    return interaction_cosent(ops(), y_true, y_pred, global_batch)


@serializable
class InteractionCoSENTLoss(BatchLoss):
    """CoSENT ranking loss for an interaction model's scalar scores f(i, j)::

        loss = log(1 + sum_{label(i,j) > label(k,l)} exp(f(k, l) - f(i, j)))

    No scale: the score is unbounded and learns its own. Scores are clipped to ±1e6 as
    in the original.

    Called as ``loss(y_true, y_pred)`` on

    * ``y_pred``: one score per pair, shape (B, 1) or (B,) (a Dense(1) on the [CLS] vector of
      the concatenated pair, no activation);
    * ``y_true``: labels, shape (B,) or (B, 1), in any order-carrying form (0/1, ranks, scores);

    it returns one float32 scalar for the batch.

    Args:
        global_batch: under a tf.distribute strategy with several replicas, rank the scores of
            every replica together, as one device would (the default), or only each replica's
            slice; see :class:`~cosent_tf.losses.CoSENTLoss`.
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Example:
        >>> scores = tf.constant([[30.0], [-30.0]])  # the match scored far above the mismatch
        >>> round(float(InteractionCoSENTLoss()(tf.constant([1.0, 0.0]), scores)), 6)
        0.0

    References: Su Jianlin, "CoSENT (2)", https://kexue.fm/archives/9341 (2022); the
    original experiments at https://github.com/bojone/CoSENT.
    """

    def __init__(self, global_batch: bool = True, name: str = "interaction_cosent", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return interaction_cosent_loss(y_true, y_pred, self.global_batch)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "global_batch": self.global_batch}
