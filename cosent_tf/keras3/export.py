"""Exports of a model folder from a Keras 3 process: the names earlier versions gave, over the one
export module per format (:mod:`cosent_tf.export`), which runs on the process's Keras.

The model folder is the one both Kerases write and read (``cosent_model.json`` + a Google-format
checkpoint); here it is built on keras-hub (:func:`cosent_tf.models.adapter.build_model`). A SavedModel
(and an ONNX file, :func:`cosent_tf.export.onnx_export.export_onnx`) is a TensorFlow graph of it, so
it needs the TensorFlow backend; the sentence-transformers folder is written on any backend.
"""

from __future__ import annotations

from ..export.huggingface import export_hf
from ..export.savedmodel import export_saved_model as _export_saved_model


def export_saved_model(model_dir: str, out: str, overwrite: bool = False) -> str:
    """Write ``out`` (atomically) as the SavedModel of the model folder ``model_dir`` that
    ``cosent-tf export`` writes (:func:`cosent_tf.export.savedmodel.export_saved_model`): raw strings
    in (``serving_default(sentences)``), tokenised in the graph (``import tensorflow_text`` before
    ``tf.saved_model.load``); a feature model's L2-normalised ``embeddings``, an interaction model's
    ``scores``; ``decide`` and ``assets.extra/decision.json`` when the folder has a match decision.

    Returns:
        ``out``.

    Raises:
        ConfigError: the JAX backend (a SavedModel is TensorFlow's graph), or as ``export_saved_model``.
    """
    _export_saved_model(model_dir, out, overwrite)
    return out


def export_sentence_transformers(model_dir: str, out: str, overwrite: bool = False) -> str:
    """Write ``out`` (atomically) as the Hugging Face folder of the model folder ``model_dir`` that
    ``cosent-tf export --format hf`` writes (:func:`cosent_tf.export.huggingface.export_hf`): a
    sentence-transformers folder of a feature model (``SentenceTransformer(out)`` loads it), a
    ``BertForSequenceClassification`` of an interaction model with a pooler head, on either backend.

    Returns:
        ``out``.

    Raises:
        ConfigError: as ``export_hf`` (an architecture other than BERT or RoBERTa, a pooling
            sentence-transformers has not, an ``out`` that may not be written).
    """
    export_hf(model_dir, out, overwrite)
    return out
