"""BERT between the Hugging Face and the Google formats: the config both ways and the weight names.

A Hugging Face ``config.json`` becomes the Google-format BERT config bert4keras builds from
(:func:`bert_config`) and back (:func:`hf_config`); :func:`bert_name_table` pairs every Google
checkpoint name with its state-dict key, so a folder's weights become ``{Google name: array}``
(:func:`google_arrays`, what :mod:`cosent_tf.models.checkpoints` loads) and back
(:func:`hf_weights`). Keras-free.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from ..errors import ConfigError
from ..io import json_field, read_json
from .folders import CONFIG_FILE, NOTHING, PathLike, json_object, transformer_folder
from .weights import check_weight, weight_files

# Hugging Face hidden_act -> bert4keras activation. gelu is the exact (erf) GELU in both;
# gelu_new and gelu_pytorch_tanh are the tanh approximation.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
# bert4keras builds BERT's layer norms with this epsilon, whatever the config says.
LAYER_NORM_EPS = 1e-12
# Hugging Face model types of the other architectures cosent-tf builds, which it reads only
# as Google-format checkpoints so far.
OTHER_MODEL_TYPES = ("albert", "nezha", "roformer")
# A sequence-classification head's num_labels -> the interaction head that computes it.
CLASSIFIER_HEADS = {1: "score", 2: "softmax"}

# The Google-format BERT config's values, under the names Hugging Face's config.json shares with it:
# sizes, a size that may be 0 (no segment embeddings), and rates.
POSITIVE_SIZES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)
RATES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")


def check_bert_values(config: dict, path: PathLike) -> None:
    """Check the sizes and rates of a BERT config (Google or Hugging Face names).

    Args:
        config: the parsed config; keys that are absent are not checked.
        path: its file, for messages.

    Raises:
        ConfigError: naming ``path`` and the key, unless each size present is a positive
            integer (type_vocab_size: 0 or more) and each rate a number from 0 to 1.

    Example:
        >>> check_bert_values({"hidden_size": 312, "hidden_dropout_prob": 0.1}, "config.json")
    """
    for key in (*POSITIVE_SIZES, "type_vocab_size"):
        least = 1 if key in POSITIVE_SIZES else 0
        value = json_field(config, key, int, path)
        if value is not None and value < least:
            wanted = "a positive integer" if least else "an integer, 0 or more"
            raise ConfigError(f"{path}: {key} must be {wanted}, got {value!r}")
    for key in RATES:
        value = json_field(config, key, (int, float), path)
        if value is not None and not 0 <= value < 1:
            raise ConfigError(f"{path}: {key} must be a number from 0 to 1, got {value!r}")


def bert_config(hf_config: Any, path: PathLike) -> dict:
    """A Hugging Face ``config.json`` (already parsed) as a Google-format BERT config.

    Args:
        hf_config: the parsed ``config.json``.
        path: its file, for messages.

    Returns:
        The Google-format config (sizes, rates, ``hidden_act`` in bert4keras's names).

    Raises:
        ConfigError: settings bert4keras's BERT cannot reproduce, or values of the wrong JSON
            type, naming them.

    Example:
        >>> bert_config(read_hf_config("bge-small-zh"), "bge-small-zh/config.json")  # doctest: +SKIP
    """
    if not isinstance(hf_config, dict):
        raise ConfigError(f"{path}: the model config must be a JSON object")
    model_type = json_field(hf_config, "model_type", (str, NOTHING), path)
    if model_type != "bert":
        other = (
            f" cosent-tf builds {model_type} only from a Google-format TF checkpoint so far."
            if model_type in OTHER_MODEL_TYPES
            else ""
        )
        raise ConfigError(
            f"{path}: model_type {model_type!r} is not supported from Hugging Face folders; cosent-tf reads "
            f"model_type 'bert' (BERT, RoBERTa-wwm-ext, MacBERT, text2vec, bge-zh).{other}"
        )
    activation = json_field(hf_config, "hidden_act", str, path, default="gelu")
    if activation not in ACTIVATIONS:
        raise ConfigError(
            f"{path}: hidden_act {activation!r} is not supported; cosent-tf reads {', '.join(ACTIVATIONS)}"
        )
    unsupported = {
        "position_embedding_type": (
            json_field(hf_config, "position_embedding_type", str, path, default="absolute"),
            "absolute",
        ),
        "is_decoder": (json_field(hf_config, "is_decoder", bool, path, default=False), False),
        "add_cross_attention": (json_field(hf_config, "add_cross_attention", bool, path, default=False), False),
    }
    for key, (value, supported) in unsupported.items():
        if value != supported:
            raise ConfigError(f"{path}: {key} {value!r} is not supported (only {supported!r})")
    eps = json_field(hf_config, "layer_norm_eps", (int, float), path, default=LAYER_NORM_EPS)
    if not math.isclose(eps, LAYER_NORM_EPS, rel_tol=1e-6):
        raise ConfigError(f"{path}: layer_norm_eps {eps!r} is not supported (bert4keras's BERT uses {LAYER_NORM_EPS})")
    config = {key: hf_config[key] for key in (*POSITIVE_SIZES, "type_vocab_size", *RATES) if key in hf_config}
    check_bert_values(config, path)
    config["hidden_act"] = ACTIVATIONS[activation]
    config.setdefault("max_position_embeddings", 512)
    config.setdefault("type_vocab_size", 2)
    return config


def hf_config(
    google_config: dict, architectures: Sequence[str] = ("BertModel",), num_labels: Optional[int] = None
) -> dict:
    """A Google-format BERT config as a Hugging Face ``config.json`` (the inverse of :func:`bert_config`).

    Args:
        google_config: the Google-format config.
        architectures: the transformers classes the folder is for.
        num_labels: a sequence-classification head's outputs, or None for none.

    Returns:
        The ``config.json`` object.

    Raises:
        ConfigError: an activation Hugging Face has no name for.

    Example:
        >>> hf_config({"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
        ...            "num_attention_heads": 1, "intermediate_size": 8})["model_type"]
        'bert'
    """
    activations = {"gelu": "gelu", "gelu_erf": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
    activation = google_config.get("hidden_act", "gelu")
    if activation not in activations:
        raise ConfigError(f"hidden_act {activation!r} has no Hugging Face name; cannot write a Hugging Face folder")
    config = {
        "architectures": list(architectures),
        "model_type": "bert",
        "vocab_size": google_config["vocab_size"],
        "hidden_size": google_config["hidden_size"],
        "num_hidden_layers": google_config["num_hidden_layers"],
        "num_attention_heads": google_config["num_attention_heads"],
        "intermediate_size": google_config["intermediate_size"],
        "hidden_act": activations[activation],
        "max_position_embeddings": google_config.get("max_position_embeddings", 512),
        "type_vocab_size": google_config.get("type_vocab_size", 2),
        "hidden_dropout_prob": google_config.get("hidden_dropout_prob", 0.1),
        "attention_probs_dropout_prob": google_config.get("attention_probs_dropout_prob", 0.1),
        "initializer_range": google_config.get("initializer_range", 0.02),
        "layer_norm_eps": LAYER_NORM_EPS,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
    }
    if num_labels is not None:
        config["num_labels"] = num_labels
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    return config


def read_hf_config(folder: PathLike) -> Any:
    """The parsed ``config.json`` of a Hugging Face folder (of its transformer, for sentence-transformers).

    Args:
        folder: a Hugging Face or sentence-transformers folder.

    Returns:
        The parsed JSON, unchecked (:func:`bert_config` checks it).

    Raises:
        ConfigError: a missing or damaged file.

    Example:
        >>> read_hf_config("bge-small-zh")["model_type"]  # doctest: +SKIP
        'bert'
    """
    return read_json(os.path.join(transformer_folder(folder), CONFIG_FILE), "the model config")


def classifier_labels(hf_config: dict, path: PathLike = CONFIG_FILE) -> Optional[int]:
    """The number of outputs of a ``*ForSequenceClassification`` config's head.

    Args:
        hf_config: the parsed ``config.json``.
        path: its file, for messages.

    Returns:
        ``num_labels`` (else the size of ``id2label``, else 2); None for other models.

    Raises:
        ConfigError: values of the wrong type, or num_labels below 1.

    Example:
        >>> classifier_labels({"architectures": ["BertForSequenceClassification"], "num_labels": 1})
        1
    """
    architectures = json_field(hf_config, "architectures", (list, NOTHING), path) or []
    if not all(isinstance(name, str) for name in architectures):
        raise ConfigError(f"{path}: 'architectures' must be a JSON array of strings")
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        return None
    if "num_labels" in hf_config:
        labels = json_field(hf_config, "num_labels", int, path)
        if labels < 1:
            raise ConfigError(f"{path}: num_labels must be a positive integer, got {labels}")
        return int(labels)
    return len(json_object(hf_config, "id2label", path) or {0: 0, 1: 1})


# -- weight names ---------------------------------------------------------------------------------

_LAYER_PARTS = (
    "attention/self/query",
    "attention/self/key",
    "attention/self/value",
    "attention/output/dense",
    "intermediate/dense",
    "output/dense",
)
_NORMS = ("attention/output/LayerNorm", "output/LayerNorm")


def bert_name_table(num_layers: int, head_scope: Optional[str] = None) -> list[tuple[str, str, bool]]:
    """Every BERT weight's Google name, Hugging Face name and whether it is transposed; pooler included.

    Hugging Face names are those of ``BertModel``; a ``*For*`` model prefixes them with
    ``bert.``. Linear layers' weights are stored (out, in) by torch and (in, out) by
    TensorFlow, hence ``transposed``.

    Args:
        num_layers: the transformer's depth.
        head_scope: the Google scope of an interaction head (``cosent/<layer>``), added as a
            sequence-classification ``classifier``; None for no head.

    Returns:
        [(Google name, Hugging Face name, transposed)].

    Example:
        >>> bert_name_table(1)[0]
        ('bert/embeddings/word_embeddings', 'embeddings.word_embeddings.weight', False)
    """
    table = [
        ("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight", False),
        ("bert/embeddings/position_embeddings", "embeddings.position_embeddings.weight", False),
        ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight", False),
        ("bert/embeddings/LayerNorm/gamma", "embeddings.LayerNorm.weight", False),
        ("bert/embeddings/LayerNorm/beta", "embeddings.LayerNorm.bias", False),
    ]
    for i in range(num_layers):
        google, hf = f"bert/encoder/layer_{i}/", f"encoder.layer.{i}."
        for part in _LAYER_PARTS:
            dotted = part.replace("/", ".")
            table.append((f"{google}{part}/kernel", f"{hf}{dotted}.weight", True))
            table.append((f"{google}{part}/bias", f"{hf}{dotted}.bias", False))
        for part in _NORMS:
            dotted = part.replace("/", ".")
            table.append((f"{google}{part}/gamma", f"{hf}{dotted}.weight", False))
            table.append((f"{google}{part}/beta", f"{hf}{dotted}.bias", False))
    table.append(("bert/pooler/dense/kernel", "pooler.dense.weight", True))
    table.append(("bert/pooler/dense/bias", "pooler.dense.bias", False))
    if head_scope is not None:
        table.append((f"{head_scope}/kernel", "classifier.weight", True))
        table.append((f"{head_scope}/bias", "classifier.bias", False))
    return table


def _canonical(name: str) -> str:
    """A state-dict key as ``BertModel`` names it (prefix ``bert.`` off, old LayerNorm names)."""
    if name.startswith("bert."):
        name = name[len("bert.") :]
    if ".LayerNorm." in name or name.startswith("LayerNorm."):
        name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
    return name


def google_arrays(
    folder: PathLike, head_scope: Optional[str] = None
) -> tuple[dict[str, np.ndarray], list[str], dict[str, str]]:
    """A Hugging Face folder's weights under their Google checkpoint names.

    Args:
        folder: a Hugging Face or sentence-transformers folder.
        head_scope: the Google scope a ``classifier`` is read as (see :func:`bert_name_table`).

    Returns:
        ({Google name: array}, [unused state-dict keys], {Google name: state-dict key}); the
        last covers every BERT weight of its depth, present or not.

    Raises:
        CheckpointError: unreadable weight files, or a weight that is not finite floating point.

    Example:
        >>> arrays, unused, names = google_arrays("bge-small-zh")  # doctest: +SKIP
    """
    weights = {_canonical(name): (path, value, name) for name, (path, value) in weight_files(folder).items()}
    layers = [int(m.group(1)) for name in weights if (m := re.match(r"encoder\.layer\.(\d+)\.", name))]
    arrays, used, names = {}, set(), {}
    for google, hf, transposed in bert_name_table(max(layers, default=-1) + 1, head_scope):
        names[google] = hf
        if hf in weights:
            path, value, own_name = weights[hf]
            check_weight(value, path, own_name)
            arrays[google] = np.ascontiguousarray(value.T) if transposed else value
            used.add(hf)
    unused = sorted(name for name in weights if name not in used and not name.endswith("position_ids"))
    return arrays, unused, names


def hf_weights(
    arrays: dict[str, Any], num_layers: int, head_scope: Optional[str] = None, prefix: str = ""
) -> dict[str, np.ndarray]:
    """Google-named arrays under their state-dict keys (the inverse of :func:`google_arrays`).

    Args:
        arrays: {Google name: array}; names outside :func:`bert_name_table` are left out.
        num_layers: the transformer's depth.
        head_scope: the Google scope of an interaction head to write as ``classifier``, or None.
        prefix: goes before the transformer's keys (``"bert."`` for a ``*For*`` model).

    Returns:
        {state-dict key: contiguous float32 array}.

    Example:
        >>> hf_weights({"bert/pooler/dense/bias": [0.0, 1.0]}, 0)["pooler.dense.bias"]
        array([0., 1.], dtype=float32)
    """
    weights = {}
    for google, hf, transposed in bert_name_table(num_layers, head_scope):
        if google in arrays:
            value = np.asarray(arrays[google], dtype=np.float32)
            key = hf if hf.startswith("classifier.") else prefix + hf
            weights[key] = np.ascontiguousarray(value.T) if transposed else np.ascontiguousarray(value)
    return weights
