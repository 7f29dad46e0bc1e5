"""The Keras 3 route: cosent-tf's losses, pooling and encoders on Keras 3 (TensorFlow or JAX
backend) with keras-hub backbones, beside the Keras 2 engine.

The losses and layers are the package's own, written once over the process's Keras
(:mod:`cosent_tf.process_keras`), and so Keras 3 classes here; their maths (:mod:`cosent_tf.maths`)
runs on ``keras.ops``. A process holds one Keras: importing this package chooses Keras 3 for it,
after checking that ``keras`` is Keras 3 and that the Keras 2 engine has not been imported
(:mod:`cosent_tf.keras3.runtime`). docs/keras3.md is the guide.
"""

from __future__ import annotations

from ..api import lazy_names
from ..losses import CLASSES as _LOSS_CLASSES
from .runtime import checked_keras

checked_keras()

_HOMES = {
    # the losses and the training head (cosent_tf.losses's, on Keras 3 in this process)
    **dict.fromkeys(_LOSS_CLASSES, ".losses"),
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
    # the models of a spec (both Kerases' contract) and the Google-named weights a model folder holds
    "build_from_spec": ".models",
    "model_arrays": ".models",
    "not_decayed_variables": ".models",
    # training and export
    "train": ".training",
    "export_saved_model": ".export",
    "export_sentence_transformers": ".export",
}

__all__ = list(_HOMES)

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
