"""CoSENT: a ranking loss on the cosine of sentence vectors (Su, 2022)."""

from __future__ import annotations

from typing import Any

from ..maths import pairs
from ..process_keras import ops, serializable
from .base import BatchLoss


def ranking_loss(scores: Any, labels: Any) -> Any:
    """:func:`cosent_tf.maths.pairs.ranking_loss` on TensorFlow."""
    return pairs.ranking_loss(ops(), scores, labels)


def cosent_loss(y_true: Any, y_pred: Any, scale: float = 20.0, global_batch: bool = True) -> Any:
    """CoSENT loss of an interleaved batch; usable as ``compile(loss=cosent_loss)``.

    See :class:`CoSENTLoss` for the formula, the expected inputs and ``global_batch``.
    """
    return pairs.cosent(ops(), y_true, y_pred, scale, global_batch)


@serializable
class CoSENTLoss(BatchLoss):
    """CoSENT loss for a feature-based (siamese) model.

    For every two pairs in the batch whose labels are ordered, the pair with the larger
    label should have the larger cosine::

        loss = log(1 + sum_{label(i,j) > label(k,l)} exp(scale * (cos(u_k, u_l) - cos(u_i, u_j))))

    Called as ``loss(y_true, y_pred)`` on

    * ``y_pred``: sentence vectors of shape (2B, d), interleaved: rows 2k and 2k+1 are the
      two sentences of pair k. Any float dtype; computed in float32.
    * ``y_true``: each pair's label on both of its rows, shape (2B,) or (2B, 1). Labels only
      need an order: 0/1, NLI ranks 0/1/2, or float scores. Equal labels add nothing, so a
      batch whose labels are all equal has loss 0.

    it returns one float32 scalar for the batch (it is a ranking over pairs of pairs, not a
    mean of per-sample terms).

    Args:
        scale: the factor on the cosines (λ in the paper; 20 in the original experiments).
        global_batch: under a tf.distribute strategy with several replicas each replica gets a
            slice of the batch. When true (the default) the cosines and labels of every replica
            are gathered, so that every replica ranks the whole global batch and the update
            equals one device's on that batch (see
            :meth:`~cosent_tf.maths.ops.Ops.gather_across_replicas`); when false each replica
            ranks only the pairs of its own slice.
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Raises:
        ValueError: (when called) the batch has an odd number of rows.

    Example:
        >>> vectors = tf.constant([[1.0, 0.0], [1.0, 0.1], [1.0, 0.0], [0.0, 1.0]])
        >>> labels = tf.constant([1.0, 1.0, 0.0, 0.0])  # pair 0 is a match, pair 1 is not
        >>> round(float(CoSENTLoss()(labels, vectors)), 6)
        0.0
        >>> encoder.compile(optimizer="adam", loss=CoSENTLoss(scale=20.0))  # doctest: +SKIP

    References: Su Jianlin, "CoSENT (1)", https://kexue.fm/archives/8847 (2022), with the
    original bert4keras experiments at https://github.com/bojone/CoSENT; Huang et al.,
    "CoSENT: Consistent Sentence Embedding via Similarity Ranking", IEEE/ACM Transactions
    on Audio, Speech and Language Processing 32 (2024), 2800-2813.
    """

    def __init__(self, scale: float = 20.0, global_batch: bool = True, name: str = "cosent", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return cosent_loss(y_true, y_pred, self.scale, self.global_batch)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "global_batch": self.global_batch}
