"""A trained matcher's folder: everything needed to use it again, and nothing from elsewhere.

Layout (a Google-format checkpoint folder plus one file)::

    MODEL_DIR/
      cosent_model.json        kind, architecture, pooling or head (and what the head reads),
                               maxlen, tokenizer settings, tuned threshold (when known), and
                               the run it came from
      bert_config.json         the transformer's config
      bert_model.ckpt.*        the transformer's weights under Google names (an
                               interaction model's head under ``cosent/<layer>/...``)
      vocab.txt
      decision.json            the match decision fitted on labelled pairs (thresholds, calibration
                               map; :mod:`cosent_tf.calibration`), when one was

Because the weights are a Google-format checkpoint, the folder also serves as
``--checkpoint`` for further fine-tuning and loads in bert4keras itself.

:func:`load_model_dir` also loads a Hugging Face folder as a model: a sentence-transformers
folder (or a bare ``BertModel``, mean-pooled as sentence-transformers would) as a feature
model, and a ``BertForSequenceClassification`` as an interaction model with its head.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from ..backend import dtype_policy, inference_policy_name, keras
from ..calibration import MatchDecision
from ..models.builders import build_from_spec, head_layer_name
from ..models.checkpoints import head_variables, model_arrays, read_config
from ..models.kinds import get_kind

# The spec's home (hf_spec's and read_model_decision's too) is cosent_tf.models.spec, which imports no
# TensorFlow; this module names them too, as it did before 0.4.
from ..models.sources import ModelSource, open_model_folder
from ..models.spec import (
    FORMAT,
    FORMAT_VERSION,
    MODEL_FOLDER,
    SPEC_FILE,
    SPEC_TYPES,
    ModelSpec,
    hf_spec,
    read_model_decision,
    read_spec,
    warn_if_random_weights,
    write_model_folder,
)
from ..models.tokenization import SentenceTokenizer

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MODEL_FOLDER",
    "SPEC_FILE",
    "SPEC_TYPES",
    "ModelSpec",
    "hf_spec",
    "load_model_dir",
    "read_model_decision",
    "read_spec",
    "save_model_dir",
]


def save_model_dir(
    directory: str,
    keras_model: keras.Model,
    spec: ModelSpec,
    config: Union[dict, str],
    vocab_path: str,
    overwrite: bool = False,
    decision: Optional[MatchDecision] = None,
) -> None:
    """Write a model folder for ``keras_model`` (from build_encoder / build_interaction_model).

    Args:
        directory: the folder to write, atomically: it is complete or untouched. An existing
            one must be empty, or a model folder and ``overwrite`` true.
        keras_model: the model (an interaction model's head is saved under ``cosent/<layer>``).
        spec: what besides weights the model needs (checked first).
        config: the BERT config dict, or its json file.
        vocab_path: the vocabulary to copy in.
        overwrite: whether an existing model folder may be replaced.
        decision: the match decision to ship in the folder (``decision.json``, stamped with the
            weights written here).

    Raises:
        ConfigError: the spec is wrong, or ``directory`` holds something else.

    Example:
        >>> save_model_dir("my-model", encoder, ModelSpec("feature", pooling="cls"), config, vocab)  # doctest: +SKIP
    """
    spec.check(SPEC_FILE)
    if not isinstance(config, dict):
        config = read_config(config)
    write_model_folder(
        directory, model_folder_arrays(keras_model, spec, config), spec, config, vocab_path, overwrite, decision
    )


def model_folder_arrays(keras_model: keras.Model, spec: ModelSpec, config: dict) -> dict:
    """{Google checkpoint name: array} of a bert4keras model of ``spec``: its transformer's weights,
    and an interaction head's under ``cosent/<head layer>`` (a head outside the transformer)."""
    arrays = model_arrays(keras_model, config, spec.architecture)
    if get_kind(spec.kind).spec_field == "head":
        arrays.update(
            {name: weight.numpy() for name, weight in head_variables(keras_model, head_layer_name(str(spec.head)))}
        )
    return arrays


def load_model_dir(directory: Union[str, os.PathLike, ModelSource], precision: str = "float32") -> tuple:
    """(spec, Keras model, SentenceTokenizer) of a model folder (or a Hugging Face folder), for
    inference.

    Args:
        directory: the folder, or a :class:`~cosent_tf.models.sources.ModelSource` opened from
            one (then nothing is read again).
        precision: ``float32``, or ``bf16`` to build the model to compute in bfloat16 with its
            weights stored in bfloat16 (the same outputs as mixed bfloat16; not for training).

    Returns:
        ``(spec, model, tokenizer)``.

    Raises:
        ConfigError: the folder is no model folder, or its files do not fit together.
        CheckpointError: its weights are unreadable or do not fit its config.

    Example:
        >>> spec, model, tokenizer = load_model_dir("runs/cosent-STS-B/model")  # doctest: +SKIP
    """
    source = directory if isinstance(directory, ModelSource) else open_model_folder(directory)
    spec = read_spec(source)
    source.check_maxlen(spec.architecture, spec.maxlen)
    kind = get_kind(spec.kind)
    options: dict[str, Any] = {"require_head": True} if kind.spec_field == "head" else {}
    with dtype_policy(inference_policy_name(precision)):
        model = build_from_spec(spec, source, **options)
    tokenizer = SentenceTokenizer(source, spec.maxlen, spec.word_level, spec.do_lower_case)
    warn_if_random_weights(spec, directory.path if isinstance(directory, ModelSource) else directory)
    return spec, model, tokenizer
