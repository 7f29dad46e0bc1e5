"""Matryoshka representation learning: one feature loss applied to the leading dimensions of the
sentence vectors at several widths, so that a vector cut to any of them still works."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..maths.matryoshka import check_dims, matryoshka
from ..process_keras import keras, ops, serializable
from .base import BatchLoss


@serializable
class MatryoshkaLoss(BatchLoss):
    """Any feature loss at several widths of the sentence vectors (Kusupati et al., "Matryoshka
    Representation Learning", NeurIPS 2022; sentence-transformers' ``MatryoshkaLoss``)::

        loss = sum_i weight_i * inner(y_true, y_pred[:, :dim_i])

    Each width's vectors are the first ``dim_i`` dimensions of the full ones; the inner losses
    compare vectors by cosine, which normalises them, so the truncated vectors need no
    renormalising here. The vectors are computed once and sliced, so a width costs one more
    loss, not one more forward pass. Under a tf.distribute strategy and in the gradient cache
    the wrapper is what the model is compiled with, and each inner loss gathers the global batch
    as it does alone.

    Called as the inner loss is: ``y_pred`` the (rows, d) sentence vectors in the inner loss's
    layout (interleaved pairs, or groups), ``y_true`` its labels; one float32 scalar.

    Args:
        loss: a feature loss that reads sentence vectors (CoSENTLoss, AnglELoss,
            MultipleNegativesRankingLoss, CoSENTIBNLoss, CosineMSELoss, ThresholdContrastiveLoss);
            not one behind a training head, which reads the whole vector.
        dims: the widths, each at most the vectors' width (checked when called).
        weights: one per width (default 1 each).
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Raises:
        ValueError: bad ``dims`` or ``weights`` (:func:`check_dims`), or a ``loss`` that is not a
            Keras loss; when called, a width above the vectors' width.

    Example:
        >>> from cosent_tf.losses import CoSENTLoss
        >>> vectors = tf.constant([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [-1.0, 0.0, 1.0]])
        >>> labels = tf.constant([0.0, 0.0, 1.0, 1.0])  # pair 1 should be the closer, but is not at either width
        >>> round(float(MatryoshkaLoss(CoSENTLoss(scale=1.0), dims=[3, 1])(labels, vectors)), 4)
        3.7588
        >>> encoder.compile(optimizer="adam", loss=MatryoshkaLoss(CoSENTLoss(), dims=[312, 128, 64]))  # doctest: +SKIP
    """

    def __init__(
        self,
        loss: keras.losses.Loss,
        dims: Sequence[int],
        weights: Optional[Sequence[float]] = None,
        name: str = "matryoshka",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        if not isinstance(loss, keras.losses.Loss):
            raise ValueError(
                f"MatryoshkaLoss wraps a loss of this process's Keras (CoSENTLoss, AnglELoss ...), got {loss!r}"
            )
        self.loss, (self.dims, self.weights) = loss, check_dims(dims, weights)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return matryoshka(ops(), self.loss.call, y_true, y_pred, self.dims, self.weights)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "loss": keras.losses.serialize(self.loss),
            "dims": self.dims,
            "weights": self.weights,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> MatryoshkaLoss:
        config = dict(config)
        config["loss"] = keras.losses.deserialize(config["loss"])
        return cls(**config)
