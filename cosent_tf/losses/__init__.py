"""Losses: CoSENT for feature and interaction models, and the baselines it is compared with.

One module per loss; :mod:`cosent_tf.losses.registry` is the table the engine reads.
"""

from __future__ import annotations

from .contrastive import ThresholdContrastiveLoss, threshold_contrastive_loss
from .cosent import CoSENTLoss, cosent_loss, ranking_loss
from .interaction_cosent import InteractionCoSENTLoss, interaction_cosent_loss
from .mse import CosineMSELoss, cosine_mse_loss
from .registry import LOSSES, LossEntry, get_loss, loss_names
from .softmax import SentenceBertHead, SentenceBertSoftmaxLoss, sentence_bert_softmax_loss

__all__ = [
    "CoSENTLoss",
    "cosent_loss",
    "ranking_loss",
    "InteractionCoSENTLoss",
    "interaction_cosent_loss",
    "SentenceBertHead",
    "SentenceBertSoftmaxLoss",
    "sentence_bert_softmax_loss",
    "CosineMSELoss",
    "cosine_mse_loss",
    "ThresholdContrastiveLoss",
    "threshold_contrastive_loss",
    "LOSSES",
    "LossEntry",
    "get_loss",
    "loss_names",
]
