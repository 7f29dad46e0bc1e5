"""Losses: CoSENT for feature and interaction models, and the baselines it is compared with.

One module per loss; :mod:`cosent_tf.losses.registry` is the table the engine reads. Each name
loads its module on first use (see :mod:`cosent_tf.api`), so that reading the table imports no
TensorFlow.
"""

from __future__ import annotations

from ..api import lazy_names

_HOMES = {
    "CoSENTLoss": ".cosent",
    "cosent_loss": ".cosent",
    "ranking_loss": ".cosent",
    "InteractionCoSENTLoss": ".interaction_cosent",
    "interaction_cosent_loss": ".interaction_cosent",
    "SentenceBertHead": ".softmax",
    "SentenceBertSoftmaxLoss": ".softmax",
    "sentence_bert_softmax_loss": ".softmax",
    "CosineMSELoss": ".mse",
    "cosine_mse_loss": ".mse",
    "ThresholdContrastiveLoss": ".contrastive",
    "threshold_contrastive_loss": ".contrastive",
    "MultipleNegativesRankingLoss": ".mnrl",
    "AnglELoss": ".angle",
    "CoSENTIBNLoss": ".cosent_ibn",
    "MatryoshkaLoss": ".matryoshka",
    "LOSSES": ".registry",
    "LossEntry": ".registry",
    "get_loss": ".registry",
    "loss_names": ".registry",
}

__all__ = list(_HOMES)

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
