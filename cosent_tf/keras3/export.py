"""Exports of a model folder from the Keras 3 route: a TensorFlow SavedModel that takes raw strings,
and a sentence-transformers folder.

The model folder is the one both Kerases write and read (``cosent_model.json`` + a Google-format
checkpoint). The SavedModel serves the keras-hub encoder (:func:`cosent_tf.keras3.encoder.build_encoder`)
behind this project's tokenisation as TensorFlow ops (:class:`cosent_tf.export.graph_tokenization.GraphTokenizer`),
so it needs the TensorFlow backend. The sentence-transformers folder needs no Keras at all: the
checkpoint's arrays are renamed to Hugging Face's by :mod:`cosent_tf.huggingface`, as the Keras 2
export (:mod:`cosent_tf.export.huggingface`) does.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import huggingface
from ..errors import ConfigError
from ..exports import EXPORT_FORMAT, EXPORT_RECORD, HF_FOLDER, SAVED_MODEL
from ..io import atomic_directory, write_json
from ..models.checkpoint_files import CHECKPOINT_PREFIX, CONFIG_FILE, read_checkpoint_arrays, read_config
from ..models.kinds import FEATURE
from ..models.spec import read_spec
from .runtime import backend_name

# The SavedModel's signature: raw UTF-8 strings (batch,) in, L2-normalised float32 vectors
# (batch, hidden) out, as SentenceEncoder.encode gives them.
SIGNATURE = "serving_default"
OUTPUT = "vectors"


def _feature_spec(model_dir: str) -> Any:
    spec = read_spec(model_dir)
    if spec.kind != FEATURE.name:
        raise ConfigError(
            f"{model_dir}: a {spec.kind} model; the Keras 3 exports are of feature models (sentence encoders): "
            "export it with `cosent-tf export`"
        )
    return spec


def _record(folder: str, written: str, model_dir: str, spec: Any, **extra: Any) -> None:
    from .. import __version__

    write_json(
        os.path.join(folder, EXPORT_RECORD),
        {
            "format": EXPORT_FORMAT,
            "export": written,
            "model_dir": os.path.abspath(model_dir),
            "kind": spec.kind,
            "cosent_tf_version": __version__,
            **extra,
        },
    )


def export_saved_model(model_dir: str, out: str, overwrite: bool = False) -> str:
    """Write ``out`` (atomically) as a SavedModel of the feature model folder ``model_dir``, served by
    Keras 3 on the TensorFlow backend.

    Its ``serving_default`` signature takes a batch of raw strings (``tf.string``, shape (batch,)),
    tokenises them in the graph exactly as :class:`~cosent_tf.models.tokenization.SentenceTokenizer`
    does (tensorflow-text's WordPiece; ``import tensorflow_text`` before ``tf.saved_model.load``) and
    returns ``{"vectors": float32 (batch, hidden)}``, L2-normalised as ``SentenceEncoder.encode`` gives.

    Returns:
        ``out``.

    Raises:
        ConfigError: the JAX backend (a SavedModel is TensorFlow's), an interaction model, or an
            ``out`` that holds something other than an earlier export (or one, without ``overwrite``).
    """
    backend = backend_name()
    if backend != "tensorflow":
        raise ConfigError(
            f"a SavedModel is TensorFlow's graph: export with KERAS_BACKEND=tensorflow (this process runs {backend})"
        )
    import tensorflow as tf

    from ..export.graph_tokenization import GraphTokenizer
    from ..models.tokenization import SentenceTokenizer
    from .backbones import load_backbone
    from .encoder import build_encoder

    spec = _feature_spec(model_dir)
    loaded = load_backbone(model_dir)
    encoder = build_encoder(loaded.backbone, pooling=spec.pooling)
    if spec.word_level or loaded.vocab_path is None:
        raise ConfigError(f"{model_dir}: no character vocabulary (vocab.txt) to tokenise with in the graph")
    tokenizer = SentenceTokenizer(loaded.vocab_path, spec.maxlen, spec.word_level, spec.do_lower_case)
    graph_tokenizer = GraphTokenizer(tokenizer.token_dict, spec.maxlen, spec.do_lower_case)

    class Served(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="cosent_keras3")
            self.tokenizer = graph_tokenizer
            self.weights = [variable.value for variable in encoder.variables]  # tracked, so saved

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
        def serve(self, texts: Any) -> dict:
            vectors = tf.cast(encoder(self.tokenizer.encode(texts), training=False), tf.float32)
            return {OUTPUT: tf.math.l2_normalize(vectors, axis=1, epsilon=1e-24)}

    served = Served()
    with atomic_directory(out, SAVED_MODEL, overwrite, inputs=[model_dir]) as tmp:
        tf.saved_model.save(served, tmp, signatures={SIGNATURE: served.serve})
        _record(tmp, "saved-model", model_dir, spec, keras=3, signature=SIGNATURE, output=OUTPUT)
    return out


def export_sentence_transformers(model_dir: str, out: str, overwrite: bool = False) -> str:
    """Write ``out`` (atomically) as a sentence-transformers folder of the feature model folder
    ``model_dir``: ``BertModel`` weights (``model.safetensors``), the tokenizer files and
    ``modules.json`` with the model's pooling and Normalize, which ``SentenceTransformer(out)`` loads.

    No Keras runs: the folder's Google-format arrays are renamed to Hugging Face's
    (:func:`cosent_tf.huggingface.hf_weights`), on either backend.

    Returns:
        ``out``.

    Raises:
        ConfigError: an interaction model, an architecture other than BERT or RoBERTa, a pooling
            sentence-transformers has not, or an ``out`` that may not be written.
    """
    spec = _feature_spec(model_dir)
    if spec.architecture not in ("bert", "roberta") or spec.word_level:
        raise ConfigError(
            f"{model_dir}: a {spec.architecture} model cannot be written as a Hugging Face BERT folder "
            "(only bert and roberta, with a character vocabulary)"
        )
    if spec.pooling not in huggingface.ST_POOLING.values():
        raise ConfigError(
            f"{model_dir}: pooling {spec.pooling!r} cannot be expressed in sentence-transformers, which pools with "
            f"{', '.join(huggingface.ST_POOLING)} ({', '.join(huggingface.ST_POOLING.values())} here)"
        )
    config = read_config(os.path.join(model_dir, CONFIG_FILE))
    arrays = read_checkpoint_arrays(os.path.join(model_dir, CHECKPOINT_PREFIX), model_dir)
    if "bert/pooler/dense/kernel" not in arrays:  # BertModel has a pooler, which no pooling reads
        hidden = config["hidden_size"]
        arrays["bert/pooler/dense/kernel"] = np.zeros((hidden, hidden), np.float32)
        arrays["bert/pooler/dense/bias"] = np.zeros((hidden,), np.float32)
    from ..models.tokenization import load_vocab

    tokens = load_vocab(os.path.join(model_dir, huggingface.VOCAB_FILE))
    with atomic_directory(out, HF_FOLDER, overwrite, inputs=[model_dir]) as tmp:
        weights = huggingface.hf_weights(arrays, config["num_hidden_layers"])
        huggingface.write_hf_folder(tmp, weights, huggingface.hf_config(config))
        huggingface.write_sentence_transformers_modules(
            tmp, spec.pooling, config["hidden_size"], spec.maxlen, spec.do_lower_case, None
        )
        huggingface.write_tokenizer(tmp, tokens, spec.do_lower_case, spec.maxlen)
        _record(tmp, "sentence-transformers", model_dir, spec, keras=3)
    return out
