"""AnglE: CoSENT on the angle difference of sentence vectors in complex space (Li & Li, 2024)."""

from __future__ import annotations

from typing import Any

from ..maths import angle as maths
from ..process_keras import ops, serializable
from .base import BatchLoss


def angle_similarities(y_pred: Any) -> Any:
    """The AnglE score of rows 2k and 2k+1 for every pair k, in float32 (or float64).

    Each vector is read as a complex vector: its first half the real parts, its second half the
    imaginary parts (an odd width gets a zero last dimension). For unit vectors ``x`` and ``y``
    the score is ``|Re + Im|`` of the sum of the components of ``x / y``, which is
    ``|cos(x, y) + sum(Im(x) * Re(y) - Re(x) * Im(y))|``; it is not a geometric angle
    (:func:`cosent_tf.maths.angle.angle_similarities` on TensorFlow).
    """
    return maths.angle_similarities(ops(), y_pred)


def angle_loss(y_true: Any, y_pred: Any, scale: float = 20.0, global_batch: bool = True) -> Any:
    """AnglE loss of an interleaved batch; usable as ``compile(loss=angle_loss)``.

    See :class:`AnglELoss` for the formula, the expected inputs and ``global_batch``.
    """
    return maths.angle(ops(), y_true, y_pred, scale, global_batch)


@serializable
class AnglELoss(BatchLoss):
    """AnglE loss for a feature-based (siamese) model: CoSENT's ranking on an angle score.

    Near cos = ±1 the cosine's gradient vanishes; AnglE ranks the pairs by a score taken from
    the division of the two vectors read as complex vectors (``z = x / y``, the angle
    difference in complex space) instead::

        s(x, y) = | sum_m Re(z_m) + Im(z_m) |  (x, y normalised; see angle_similarities)
        loss = log(1 + sum_{label(i,j) > label(k,l)} exp(scale * (s(u_k, u_l) - s(u_i, u_j))))

    This is sentence-transformers' ``AnglELoss`` (``pairwise_angle_sim``; checked against 6.2)
    and the ``angle_loss`` of the authors' code with its ``sum`` pooling.

    Called as ``loss(y_true, y_pred)`` on

    * ``y_pred``: sentence vectors of shape (2B, d), interleaved: rows 2k and 2k+1 are the
      two sentences of pair k. Any float dtype; computed in float32.
    * ``y_true``: each pair's label on both of its rows, shape (2B,) or (2B, 1); only their
      order counts, as for :class:`~cosent_tf.losses.cosent.CoSENTLoss`.

    it returns one float32 scalar for the batch.

    Args:
        scale: the factor on the scores (AnglE's ``angle_tau``; 20 as in sentence-transformers).
        global_batch: under a tf.distribute strategy with several replicas, rank the scores of
            the whole global batch on every replica (as ``CoSENTLoss`` does); when false each
            replica ranks its own slice.
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Raises:
        ValueError: (when called) the batch has an odd number of rows.

    Example:
        >>> vectors = tf.constant([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
        >>> labels = tf.constant([1.0, 1.0, 0.0, 0.0])  # pair 0 is a match, pair 1 is not
        >>> round(float(AnglELoss()(labels, vectors)), 6)  # log(1 + exp(20 * (0 - 1)))
        0.0
        >>> encoder.compile(optimizer="adam", loss=AnglELoss(scale=20.0))  # doctest: +SKIP

    References: Xianming Li and Jing Li, "AoE: Angle-optimized Embeddings for Semantic
    Textual Similarity", ACL 2024, https://aclanthology.org/2024.acl-long.101/ (first as
    "AnglE-optimized Text Embeddings", arXiv:2309.12871), code at
    https://github.com/SeanLee97/AnglE; sentence-transformers' ``AnglELoss``.
    """

    def __init__(self, scale: float = 20.0, global_batch: bool = True, name: str = "angle", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return angle_loss(y_true, y_pred, self.scale, self.global_batch)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "global_batch": self.global_batch}
