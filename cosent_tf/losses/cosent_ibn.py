"""AnglE's mix for labelled pairs: CoSENT + in-batch negatives over the positive pairs + angle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..maths import cosent_ibn as maths
from ..maths.mnrl import QUERY_TO_DOC, check_directions
from ..process_keras import ops, serializable
from .base import BatchLoss


def positive_pair_loss(
    y_true: Any, y_pred: Any, scale: float, positive_above: float, directions: Sequence[str] = (QUERY_TO_DOC,)
) -> Any:
    """In-batch negatives over the positive pairs of an interleaved batch: the first sentence of
    every pair whose label is above ``positive_above`` must pick its second sentence among the
    second sentences of all those pairs. The pairs that are not positive take no part; a batch
    without a positive pair gives 0."""
    return maths.positive_pairs_in_batch(ops(), y_true, y_pred, scale, positive_above, directions)


def cosent_ibn_loss(
    y_true: Any,
    y_pred: Any,
    cosine_w: float = 0.0,
    ibn_w: float = 20.0,
    angle_w: float = 1.0,
    cosine_scale: float = 20.0,
    ibn_scale: float = 20.0,
    angle_scale: float = 20.0,
    positive_above: float = 0.5,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    global_batch: bool = True,
) -> Any:
    """The weighted mix of an interleaved batch; usable as ``compile(loss=...)``.

    See :class:`CoSENTIBNLoss` for the formula, the inputs and the options. A part whose
    weight is 0 is not computed.
    """
    return maths.cosent_ibn(
        ops(),
        y_true,
        y_pred,
        cosine_w,
        ibn_w,
        angle_w,
        cosine_scale,
        ibn_scale,
        angle_scale,
        positive_above,
        directions,
        global_batch,
    )


@serializable
class CoSENTIBNLoss(BatchLoss):
    """AnglE's training objective for labelled pairs: weighted CoSENT, in-batch negatives over
    the positive pairs, and the angle ranking, for a feature-based model::

        loss = cosine_w * CoSENT(scale=cosine_scale)
             + ibn_w * InBatchNegatives(positive pairs, scale=ibn_scale)
             + angle_w * AnglE(scale=angle_scale)

    CoSENT and AnglE rank every pair of the batch by its label (see
    :class:`~cosent_tf.losses.cosent.CoSENTLoss` and :class:`~cosent_tf.losses.angle.AnglELoss`).
    The in-batch part is :class:`~cosent_tf.losses.mnrl.MultipleNegativesRankingLoss` on the
    pairs whose label is above ``positive_above``: the first sentence of each must pick its
    second sentence among the second sentences of those pairs; a batch without a positive pair
    adds 0. AnglE's own code scores every row against every other row of the batch for this
    part and averages over all rows, positive or not; here the part is exactly the in-batch
    negatives loss of the positive pairs, so it equals ``MultipleNegativesRankingLoss`` on
    them.

    The defaults are those of ``AngleLoss`` in the authors' ``angle_emb`` package (its 0.3
    to 0.5 releases): no CoSENT term (``cosine_w=0``), ``ibn_w=20``, ``angle_w=1``, and 20 for
    every scale. Earlier releases used other weights (1, 1, 1, with an angle scale of 1; and
    ``angle_w=0.02``), and the paper does not fix them: set them for the data at hand.

    Called as ``loss(y_true, y_pred)`` on

    * ``y_pred``: sentence vectors of shape (2B, d), interleaved: rows 2k and 2k+1 are the
      two sentences of pair k. Any float dtype; computed in float32.
    * ``y_true``: each pair's label on both of its rows, shape (2B,) or (2B, 1): 0/1 or
      graded.

    it returns one float32 scalar for the batch.

    Args:
        cosine_w: the weight of the CoSENT term.
        ibn_w: the weight of the in-batch negatives term.
        angle_w: the weight of the angle term.
        cosine_scale: CoSENT's scale (AnglE's ``cosine_tau``).
        ibn_scale: the in-batch negatives' scale (AnglE's ``ibn_tau``).
        angle_scale: the angle term's scale (AnglE's ``angle_tau``).
        positive_above: labels above it mark the positive pairs of the in-batch term (0.5 for
            0/1 labels; e.g. 2.5 or 4 for 0-5 scores).
        directions: the in-batch term's directions, as ``MultipleNegativesRankingLoss``'s
            (one joint softmax).
        global_batch: under a tf.distribute strategy with several replicas, every replica
            computes the loss of the whole global batch (vectors and labels gathered with their
            gradients), so the update equals one device's on that batch.
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Raises:
        ValueError: an unknown direction; and (when called) a batch with an odd number of rows.

    Example:
        >>> vectors = tf.constant([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
        >>> labels = tf.constant([1.0, 1.0, 1.0, 1.0])  # two matching pairs, far apart
        >>> round(float(CoSENTIBNLoss()(labels, vectors)), 6)
        0.0
        >>> encoder.compile(optimizer="adam", loss=CoSENTIBNLoss(cosine_w=1.0, ibn_w=1.0))  # doctest: +SKIP

    References: Xianming Li and Jing Li, "AoE: Angle-optimized Embeddings for Semantic
    Textual Similarity", ACL 2024, https://aclanthology.org/2024.acl-long.101/, with the
    authors' code at https://github.com/SeanLee97/AnglE.
    """

    def __init__(
        self,
        cosine_w: float = 0.0,
        ibn_w: float = 20.0,
        angle_w: float = 1.0,
        cosine_scale: float = 20.0,
        ibn_scale: float = 20.0,
        angle_scale: float = 20.0,
        positive_above: float = 0.5,
        directions: Sequence[str] = (QUERY_TO_DOC,),
        global_batch: bool = True,
        name: str = "cosent_ibn",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.cosine_w, self.ibn_w, self.angle_w = float(cosine_w), float(ibn_w), float(angle_w)
        self.cosine_scale, self.ibn_scale, self.angle_scale = float(cosine_scale), float(ibn_scale), float(angle_scale)
        self.positive_above = float(positive_above)
        self.directions = check_directions(directions, "joint")
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return cosent_ibn_loss(
            y_true,
            y_pred,
            self.cosine_w,
            self.ibn_w,
            self.angle_w,
            self.cosine_scale,
            self.ibn_scale,
            self.angle_scale,
            self.positive_above,
            self.directions,
            self.global_batch,
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "cosine_w": self.cosine_w,
            "ibn_w": self.ibn_w,
            "angle_w": self.angle_w,
            "cosine_scale": self.cosine_scale,
            "ibn_scale": self.ibn_scale,
            "angle_scale": self.angle_scale,
            "positive_above": self.positive_above,
            "directions": list(self.directions),
            "global_batch": self.global_batch,
        }
