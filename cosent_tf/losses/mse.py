"""Mean squared error between the cosine of a pair and its normalised label."""

from __future__ import annotations

from typing import Any

from ..maths.mse import cosine_mse
from ..process_keras import ops, serializable
from .base import BatchLoss


def cosine_mse_loss(y_true: Any, y_pred: Any, max_label: float = 1.0) -> Any:
    """See :class:`CosineMSELoss`."""
    return cosine_mse(ops(), y_true, y_pred, max_label)


@serializable
class CosineMSELoss(BatchLoss):
    """Regress the cosine onto the label scaled to [0, 1]::

        loss = mean_k (cos(u_k, v_k) - label_k / max_label)^2

    Called as ``loss(y_true, y_pred)`` on interleaved vectors (2B, d) and labels (2B,) or
    (2B, 1) as for :class:`CoSENTLoss`; returns a float32 scalar.

    Args:
        max_label: the largest label: 1 for 0/1 labels, 5 for STS-B scores, 2 for NLI ranks.
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Raises:
        ValueError: (when called) the batch has an odd number of rows.

    Example:
        >>> vectors = tf.constant([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> round(float(CosineMSELoss(max_label=5.0)(tf.constant([5.0, 5.0, 0.0, 0.0]), vectors)), 6)
        0.0

    Reference: sentence-transformers' CosineSimilarityLoss (https://www.sbert.net); the MSE
    baseline of Su Jianlin, "CoSENT (1)", https://kexue.fm/archives/8847 (2022).
    """

    def __init__(self, max_label: float = 1.0, name: str = "cosine_mse", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.max_label = float(max_label)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return cosine_mse_loss(y_true, y_pred, self.max_label)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_label": self.max_label}
