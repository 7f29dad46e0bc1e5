"""The model an export is written from, on the process's Keras (:mod:`cosent_tf.process_keras`): a
model folder built by the backbone adapter (:func:`cosent_tf.models.adapter.build_model`), bert4keras
on Keras 2 and keras-hub on Keras 3, so that each export format is written by one module for both.

A SavedModel and an ONNX file are TensorFlow graphs of the model: on Keras 3 they need the TensorFlow
backend (:func:`require_tensorflow_graph`). The Hugging Face folder is written from the model's
Google-named weights, which every backend gives.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Union

from ..errors import ConfigError
from ..models.sources import ModelSource, open_model_folder
from ..process_keras import KERAS_MAJOR, keras


def require_tensorflow_graph(what: str) -> None:
    """Refuse by name a Keras 3 process on another backend than TensorFlow, whose model cannot be
    traced into the TensorFlow graph that ``what`` (an export format) is.

    Raises:
        ConfigError: the process runs Keras 3 on JAX (or another backend).
    """
    if KERAS_MAJOR == 3 and keras.backend.backend() != "tensorflow":
        raise ConfigError(
            f"{what} is a TensorFlow graph of the model, which Keras 3 traces only on its TensorFlow backend: "
            f"export with KERAS_BACKEND=tensorflow (this process runs {keras.backend.backend()}); the Hugging "
            "Face folder (--format hf) is written on any backend"
        )


def load_engine_model(directory: Union[str, os.PathLike, ModelSource], precision: str = "float32") -> tuple:
    """(spec, model, SentenceTokenizer) of a model folder (or a Hugging Face folder) on this process's
    Keras, for an export: on Keras 2 :func:`cosent_tf.inference.model_dir.load_model_dir`; on Keras 3
    the keras-hub model of the same spec and weights (:func:`cosent_tf.models.adapter.build_model`),
    an interaction model's head required, as Keras 2 requires it.

    Raises:
        ConfigError: as ``load_model_dir``; on Keras 3, ``precision`` other than float32 (a bfloat16
            export is the Keras 2 engine's) or an architecture keras-hub has no backbone for.
        CheckpointError: the weights are unreadable or do not fit the config.
    """
    if KERAS_MAJOR == 2:
        from ..inference.model_dir import load_model_dir

        return load_model_dir(directory, precision)
    from ..models.adapter import build_model
    from ..models.kinds import get_kind
    from ..models.spec import read_spec, warn_if_random_weights
    from ..models.tokenization import SentenceTokenizer

    if precision != "float32":
        raise ConfigError(
            f"--precision {precision}: a bfloat16 export is written by the Keras 2 engine (leave out --keras 3); "
            "on Keras 3 exports are float32"
        )
    source = directory if isinstance(directory, ModelSource) else open_model_folder(directory)
    spec = read_spec(source)
    source.check_maxlen(spec.architecture, spec.maxlen)
    model = build_model(spec, source, require_head=get_kind(spec.kind).spec_field == "head")
    tokenizer = SentenceTokenizer(source, spec.maxlen, spec.word_level, spec.do_lower_case)
    warn_if_random_weights(spec, source.path)
    return spec, model, tokenizer


def model_width(model: Any) -> int:
    """The width of a model's output (a feature model's vectors), on either Keras."""
    return int(model.outputs[0].shape[-1])


@contextlib.contextmanager
def tracing_precision(model: Any) -> Iterator[None]:
    """The block in which ``model`` is traced into a graph: on Keras 2 under the dtype policy it was
    built with (:func:`cosent_tf.backend.model_precision`: bert4keras makes a layer inside its call);
    a Keras 3 model's layers keep their own policies."""
    if KERAS_MAJOR == 2:
        from ..backend import model_precision

        with model_precision(model):
            yield
    else:
        yield
