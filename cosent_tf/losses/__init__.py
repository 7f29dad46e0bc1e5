"""Losses: CoSENT for feature and interaction models, and the baselines it is compared with.

One module per loss, each class written once over this process's Keras
(:mod:`cosent_tf.process_keras`: tf-keras, or Keras 3 where :mod:`cosent_tf.keras3` was imported
first); :mod:`cosent_tf.losses.registry` is the table the engine reads. Each name loads its module
on first use (see :mod:`cosent_tf.api`), so that reading the table imports no Keras.
"""

from __future__ import annotations

from ..api import lazy_names

# The Keras classes (the losses and Sentence-BERT's training head): the names that cosent_tf and
# cosent_tf.keras3 give at their top too.
CLASSES = {
    "CoSENTLoss": ".cosent",
    "InteractionCoSENTLoss": ".interaction_cosent",
    "SentenceBertHead": ".softmax",
    "SentenceBertSoftmaxLoss": ".softmax",
    "CosineMSELoss": ".mse",
    "ThresholdContrastiveLoss": ".contrastive",
    "MultipleNegativesRankingLoss": ".mnrl",
    "AnglELoss": ".angle",
    "CoSENTIBNLoss": ".cosent_ibn",
    "MatryoshkaLoss": ".matryoshka",
}

_HOMES = {
    **CLASSES,
    "BatchLoss": ".base",
    "cosent_loss": ".cosent",
    "ranking_loss": ".cosent",
    "interaction_cosent_loss": ".interaction_cosent",
    "sentence_bert_softmax_loss": ".softmax",
    "cosine_mse_loss": ".mse",
    "threshold_contrastive_loss": ".contrastive",
    "LOSSES": ".registry",
    "LossEntry": ".registry",
    "get_loss": ".registry",
    "loss_names": ".registry",
}

__all__ = list(_HOMES)

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
