"""The Keras 3 route: cosent-tf's losses, pooling and encoders on Keras 3 (TensorFlow or JAX
backend) with keras-hub backbones, beside the Keras 2 engine.

The maths is the Keras 2 engine's (:mod:`cosent_tf.maths`), run on ``keras.ops``. A process holds
one Keras: importing this package checks that ``keras`` is Keras 3 and that the Keras 2 engine
has not been imported (:mod:`cosent_tf.keras3.runtime`). docs/keras3.md is the guide.
"""

from __future__ import annotations

from ..api import lazy_names
from .runtime import checked_keras

checked_keras()

_HOMES = {
    # losses (cosent_tf.keras3.losses): the Keras 2 engine's, same names and configs
    "CoSENTLoss": ".losses",
    "InteractionCoSENTLoss": ".losses",
    "SentenceBertHead": ".losses",
    "SentenceBertSoftmaxLoss": ".losses",
    "CosineMSELoss": ".losses",
    "ThresholdContrastiveLoss": ".losses",
    "MultipleNegativesRankingLoss": ".losses",
    "AnglELoss": ".losses",
    "CoSENTIBNLoss": ".losses",
    "MatryoshkaLoss": ".losses",
    # layers
    "Pooling": ".layers",
    "PaddingMask": ".layers",
    # keras-hub backbones from this project's readers and converters, and encoders on them
    "load_backbone": ".backbones",
    "backbone_from_config": ".backbones",
    "google_arrays": ".backbones",
    "LoadedBackbone": ".backbones",
    "build_encoder": ".encoder",
    "SentenceEncoder": ".encoder",
    # training and export
    "train": ".training",
    "export_saved_model": ".export",
    "export_sentence_transformers": ".export",
}

__all__ = list(_HOMES)

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
