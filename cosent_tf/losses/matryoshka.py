"""Matryoshka representation learning: one feature loss applied to the leading dimensions of the
sentence vectors at several widths, so that a vector cut to any of them still works."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from ..backend import keras, tf


def check_dims(dims: Sequence[Any], weights: Optional[Sequence[Any]] = None) -> tuple[list[int], list[float]]:
    """``(dims, weights)`` as lists, or a ValueError naming what is wrong: each width a distinct
    positive integer, one weight per width (default 1 each), finite, none negative, not all 0.

    Example:
        >>> check_dims([256, 64], [1, 0.5])
        ([256, 64], [1.0, 0.5])
    """
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
        raise ValueError(f"matryoshka dims: give a list of widths, got {dims!r}")
    dims = list(dims)
    if not dims:
        raise ValueError("matryoshka dims: give at least one width")
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise ValueError(f"matryoshka dims: each width must be a positive integer, got {dim!r}")
    dims = [int(dim) for dim in dims]
    if len(set(dims)) != len(dims):
        raise ValueError(f"matryoshka dims: {dims} names a width twice")
    if weights is None:
        weights = [1.0] * len(dims)
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Iterable):
        raise ValueError(f"matryoshka weights: give a list of weights, got {weights!r}")
    try:
        weights = [float(weight) for weight in weights]
    except (TypeError, ValueError):
        raise ValueError(f"matryoshka weights: each must be a number, got {list(weights)}") from None
    if len(weights) != len(dims):
        raise ValueError(f"matryoshka weights: {len(weights)} weights for {len(dims)} widths {dims}; give one each")
    if any(not (math.isfinite(weight) and weight >= 0) for weight in weights):
        raise ValueError(f"matryoshka weights: each must be a finite number of at least 0, got {weights}")
    if not any(weights):
        raise ValueError("matryoshka weights: every weight is 0, so the loss is 0: give one a weight")
    return dims, weights


@keras.utils.register_keras_serializable(package="cosent_tf")
class MatryoshkaLoss(keras.losses.Loss):
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
        ValueError: bad ``dims`` or ``weights`` (:func:`check_dims`); when called, a width above
            the vectors' width.

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
        self.loss, (self.dims, self.weights) = loss, check_dims(dims, weights)

    def call(self, y_true: Any, y_pred: Any) -> tf.Tensor:
        vectors = tf.convert_to_tensor(y_pred)
        width = vectors.shape[-1]
        if width is not None and max(self.dims) > width:
            raise ValueError(
                f"matryoshka dims {self.dims}: the vectors have {width} dimensions, fewer than {max(self.dims)}"
            )
        terms = [self.loss.call(y_true, vectors[:, :dim]) for dim, weight in zip(self.dims, self.weights) if weight]
        weights = [weight for weight in self.weights if weight]
        return tf.add_n([tf.cast(weight, term.dtype) * term for weight, term in zip(weights, terms)])

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
