"""The losses under their Keras 3 names: the classes of :mod:`cosent_tf.losses`, which are written
once over this process's Keras (:mod:`cosent_tf.process_keras`) and so are Keras 3 classes here,
computed by :mod:`cosent_tf.maths` on ``keras.ops`` (TensorFlow and JAX backends)."""

from __future__ import annotations

from ..losses.angle import AnglELoss
from ..losses.base import BatchLoss
from ..losses.contrastive import ThresholdContrastiveLoss
from ..losses.cosent import CoSENTLoss
from ..losses.cosent_ibn import CoSENTIBNLoss
from ..losses.interaction_cosent import InteractionCoSENTLoss
from ..losses.matryoshka import MatryoshkaLoss
from ..losses.mnrl import MultipleNegativesRankingLoss
from ..losses.mse import CosineMSELoss
from ..losses.softmax import SentenceBertHead, SentenceBertSoftmaxLoss

__all__ = [
    "AnglELoss",
    "BatchLoss",
    "CoSENTIBNLoss",
    "CoSENTLoss",
    "CosineMSELoss",
    "InteractionCoSENTLoss",
    "MatryoshkaLoss",
    "MultipleNegativesRankingLoss",
    "SentenceBertHead",
    "SentenceBertSoftmaxLoss",
    "ThresholdContrastiveLoss",
]
