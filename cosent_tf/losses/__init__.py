"""Losses: CoSENT for feature and interaction models, and the baselines it is compared with."""
from .contrastive import ThresholdContrastiveLoss, threshold_contrastive_loss
from .cosent import CoSENTLoss, cosent_loss, ranking_loss
from .interaction_cosent import InteractionCoSENTLoss, interaction_cosent_loss
from .mse import CosineMSELoss, cosine_mse_loss
from .softmax import SentenceBertHead, SentenceBertSoftmaxLoss, sentence_bert_softmax_loss

__all__ = [
    "CoSENTLoss", "cosent_loss", "ranking_loss",
    "InteractionCoSENTLoss", "interaction_cosent_loss",
    "SentenceBertHead", "SentenceBertSoftmaxLoss", "sentence_bert_softmax_loss",
    "CosineMSELoss", "cosine_mse_loss",
    "ThresholdContrastiveLoss", "threshold_contrastive_loss",
]
