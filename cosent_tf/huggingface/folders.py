"""Hugging Face and sentence-transformers folders: reading them as checkpoints, writing them back.

A Hugging Face model folder holds ``config.json`` (``model_type: bert``), the weights
(``model.safetensors``, possibly sharded, or ``pytorch_model.bin``) and the tokenizer
(``vocab.txt``, or only ``tokenizer.json`` as transformers 5 saves it, and
``tokenizer_config.json``). A sentence-transformers folder adds ``modules.json``,
``sentence_bert_config.json`` and a pooling module (and optionally ``Normalize``) around one.

This module knows those files and nothing of Keras: it turns a folder into a Google-format
BERT config and ``{Google checkpoint name: array}`` (what :mod:`cosent_tf.models.checkpoints` loads),
and such arrays back into a folder that transformers and sentence-transformers load. Weights
are read with the ``safetensors`` package's NumPy API; ``pytorch_model.bin`` needs torch.
"""

import dataclasses
import json
import math
import os
import re

import numpy as np

from ..errors import CheckpointError, ConfigError
from ..io import is_inside, json_field, read_json

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MODULES_FILE = "modules.json"
SENTENCE_CONFIG = "sentence_bert_config.json"
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX, TORCH_FILE)

# Hugging Face hidden_act -> bert4keras activation. gelu is the exact (erf) GELU in both;
# gelu_new and gelu_pytorch_tanh are the tanh approximation.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
# bert4keras builds BERT's layer norms with this epsilon, whatever the config says.
LAYER_NORM_EPS = 1e-12
# Hugging Face model types of the other architectures cosent-tf builds, which it reads only
# as Google-format checkpoints so far.
OTHER_MODEL_TYPES = ("albert", "nezha", "roformer")
# sentence-transformers pooling modes and the Pooling layer mode each one is.
ST_POOLING = {"cls": "cls", "mean": "last-avg", "max": "max"}
ST_MODULE_TYPES = ("Transformer", "Pooling", "Normalize")
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
NOTHING = type(None)


def check_bert_values(config: dict, path) -> None:
    """Raise ConfigError naming ``path`` and the key unless each size of a BERT config present
    is a positive integer (type_vocab_size: 0 or more) and each rate a number from 0 to 1."""
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


def _object(record: dict, key: str, path, what=None) -> dict:
    """``record[key]``, which must be a JSON object, or null or missing (then {})."""
    return json_field(record, key, (dict, NOTHING), path, what) or {}


def is_sentence_transformers_folder(path) -> bool:
    return path is not None and os.path.isdir(path) and os.path.isfile(os.path.join(path, MODULES_FILE))


def is_hf_folder(path) -> bool:
    """Whether ``path`` is a Hugging Face model folder or a sentence-transformers folder."""
    if is_sentence_transformers_folder(path):
        return True
    return (
        path is not None
        and os.path.isdir(path)
        and os.path.isfile(os.path.join(path, CONFIG_FILE))
        and any(os.path.isfile(os.path.join(path, name)) for name in WEIGHT_FILES)
    )


def looks_like_hub_name(text) -> bool:
    """Whether ``text`` reads as a hub model id (``owner/name``) rather than a local path."""
    text = os.fspath(text)
    parts = text.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not text.startswith((".", "~"))
        and not os.path.exists(text)
        and not os.path.exists(parts[0])
    )


@dataclasses.dataclass(frozen=True)
class SentenceTransformersModules:
    """What cosent-tf reads of a sentence-transformers folder: where the transformer is, its
    pooling (as a :data:`cosent_tf.layers.POOLING_MODES` name) and the tokenizer settings
    (``maxlen`` is ``max_seq_length``, or None). A Normalize module needs nothing more:
    ``SentenceEncoder.encode`` returns unit vectors by default."""

    transformer_folder: str
    pooling: str
    maxlen: int
    do_lower_case: bool


def read_sentence_transformers(folder) -> SentenceTransformersModules:
    """The modules of a sentence-transformers folder (old and new ``modules.json`` layouts).

    Supported: one Transformer, one Pooling (cls, mean or max), optionally Normalize.
    Anything else is a ConfigError naming the module or setting.
    """
    modules_path = os.path.join(folder, MODULES_FILE)
    modules = read_json(modules_path, "the sentence-transformers modules", expect=list)
    found = {}
    for number, module in enumerate(modules):
        if not isinstance(module, dict) or "type" not in module:
            raise ConfigError(f"{modules_path}: module {number} is not a JSON object with a 'type'")
        where = f"module {number}'s"
        kind = json_field(module, "type", str, modules_path, f"{where} 'type'").rsplit(".", 1)[-1]
        if kind not in ST_MODULE_TYPES or kind in found:
            raise ConfigError(
                f"{modules_path}: module {module.get('name', module.get('idx'))!r} ({module['type']}) is not "
                f"supported; cosent-tf reads one each of {', '.join(ST_MODULE_TYPES)} (Normalize optional)"
            )
        found[kind] = os.path.join(
            folder, json_field(module, "path", (str, NOTHING), modules_path, f"{where} 'path'") or ""
        )
    if "Transformer" not in found or "Pooling" not in found:
        raise ConfigError(f"{modules_path}: needs a Transformer and a Pooling module")
    transformer = found["Transformer"]
    settings = {}
    settings_path = os.path.join(transformer, SENTENCE_CONFIG)
    if os.path.isfile(settings_path):
        settings = read_json(settings_path, "the sentence-transformers settings")
    maxlen = json_field(settings, "max_seq_length", (int, NOTHING), settings_path)
    if maxlen is not None and maxlen < 3:
        raise ConfigError(f"{settings_path}: max_seq_length {maxlen} leaves no room for [CLS], [SEP] and a token")
    return SentenceTransformersModules(
        transformer_folder=transformer,
        pooling=_st_pooling(os.path.join(found["Pooling"], CONFIG_FILE)),
        maxlen=maxlen,
        do_lower_case=json_field(settings, "do_lower_case", bool, settings_path, default=False),
    )


def _st_pooling(path):
    """The Pooling layer mode of a sentence-transformers pooling config (old or new keys)."""
    config = read_json(path, "the pooling config")
    if "pooling_mode" in config:  # sentence-transformers 6
        modes = json_field(config, "pooling_mode", (str, list), path)
        modes = [modes] if isinstance(modes, str) else modes
        if not all(isinstance(mode, str) for mode in modes):
            raise ConfigError(f"{path}: 'pooling_mode' must be a JSON string or an array of strings, not {modes!r}")
    else:
        keys = [key for key in config if key.startswith("pooling_mode_")]
        modes = [key[len("pooling_mode_") :] for key in keys if json_field(config, key, bool, path)]
        modes = [{"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max"}.get(m, m) for m in modes]
    if len(modes) != 1 or modes[0] not in ST_POOLING:
        raise ConfigError(
            f"{path}: pooling {' + '.join(modes) or 'none'} is not supported; cosent-tf pools with one of "
            f"{', '.join(ST_POOLING)}"
        )
    return ST_POOLING[modes[0]]


def transformer_folder(path) -> str:
    """The folder holding the transformer's config and weights: ``path`` itself, or the
    Transformer module's folder of a sentence-transformers folder."""
    if is_sentence_transformers_folder(path):
        return read_sentence_transformers(path).transformer_folder
    return os.fspath(path)


def bert_config(hf_config: dict, path: str) -> dict:
    """A Hugging Face ``config.json`` (already parsed) as a Google-format BERT config.

    Settings bert4keras's BERT cannot reproduce, and values of the wrong JSON type, are a
    ConfigError naming them.
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


def hf_config(google_config: dict, architectures=("BertModel",), num_labels: int = None) -> dict:
    """A Google-format BERT config as a Hugging Face ``config.json`` (the inverse of :func:`bert_config`)."""
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


def read_hf_config(folder) -> dict:
    """The parsed ``config.json`` of a Hugging Face folder (of its transformer, for sentence-transformers)."""
    return read_json(os.path.join(transformer_folder(folder), CONFIG_FILE), "the model config")


def classifier_labels(hf_config: dict, path=CONFIG_FILE):
    """num_labels of a ``*ForSequenceClassification`` config (``path``, for messages); None for other models."""
    architectures = json_field(hf_config, "architectures", (list, NOTHING), path) or []
    if not all(isinstance(name, str) for name in architectures):
        raise ConfigError(f"{path}: 'architectures' must be a JSON array of strings")
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        return None
    if "num_labels" in hf_config:
        labels = json_field(hf_config, "num_labels", int, path)
        if labels < 1:
            raise ConfigError(f"{path}: num_labels must be a positive integer, got {labels}")
        return labels
    return len(_object(hf_config, "id2label", path) or {0: 0, 1: 1})


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


def bert_name_table(num_layers: int, head_scope: str = None) -> list:
    """(Google name, Hugging Face name, transposed) of every BERT weight, pooler included.

    Hugging Face names are those of ``BertModel``; a ``*For*`` model prefixes them with
    ``bert.``. Linear layers' weights are stored (out, in) by torch and (in, out) by
    TensorFlow, hence ``transposed``. ``head_scope`` (the Google scope of an interaction
    head, ``cosent/<layer>``) adds that head as a sequence-classification ``classifier``.
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


def _canonical(name):
    """A state-dict key as ``BertModel`` names it (prefix ``bert.`` off, old LayerNorm names)."""
    if name.startswith("bert."):
        name = name[len("bert.") :]
    if ".LayerNorm." in name or name.startswith("LayerNorm."):
        name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
    return name


def read_hf_weights(folder) -> dict:
    """{state-dict key: float32 array} of a Hugging Face folder's weights.

    ``model.safetensors`` (or its sharded index) is read without torch; ``pytorch_model.bin``
    needs torch (``pip install cosent-tf[torch]``).
    """
    return {name: value for name, (_, value) in _weight_files(folder).items()}


def _weight_files(folder) -> dict:
    """{state-dict key: (the file it is in, its array)} of a Hugging Face folder."""
    folder = transformer_folder(folder)
    single, index, torch_file = (os.path.join(folder, name) for name in WEIGHT_FILES)
    if os.path.isfile(single):
        return _read_safetensors([single])
    if os.path.isfile(index):
        return _read_safetensors(_shards(index, folder))
    if os.path.isfile(torch_file):
        return _read_torch(torch_file)
    raise CheckpointError(f"{folder}: no weights ({', '.join(WEIGHT_FILES)})")


def _shards(index, folder) -> list:
    """The weight files a ``model.safetensors.index.json`` names, each a file of ``folder``."""
    weight_map = json_field(read_json(index, "the safetensors index"), "weight_map", dict, index, default={})
    shards = set()
    for name in weight_map:
        shard = json_field(weight_map, name, str, index, f"the file of {name!r} in weight_map")
        path = os.path.join(folder, shard)
        if not is_inside(path, folder) or os.path.realpath(path) == os.path.realpath(folder):
            raise ConfigError(f"{index}: weight_map names {shard!r}, which is not a file of {folder}")
        shards.add(path)
    return sorted(shards)


def _read_safetensors(paths):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    weights = {}
    for path in paths:
        try:
            loaded = load_file(path)
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            raise CheckpointError(f"{path}: cannot read these weights ({e}); the file may be truncated") from None
        weights.update({name: (path, _float32(value)) for name, value in loaded.items()})
    return weights


def _read_torch(path):
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path}: reading pytorch_model.bin needs torch: pip install cosent-tf[torch] (or save the "
            "model as model.safetensors, which needs no torch)"
        ) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a bad file
        raise CheckpointError(f"{path}: cannot read these weights ({e}); the file may be truncated") from None
    return {
        name: (path, _float32(value.numpy() if not value.is_floating_point() else value.float().numpy()))
        for name, value in state.items()
    }


def _float32(value):
    """Floating-point weights (float16 or float64 too) as float32; integer buffers as they are."""
    return np.asarray(value, dtype=np.float32) if np.issubdtype(value.dtype, np.floating) else value


def check_weight(value, path, name):
    """Raise CheckpointError naming the file and tensor unless ``value`` holds floating-point
    numbers, every one finite (NaN or infinity would make every vector NaN, silently)."""
    dtype = np.dtype(value.dtype)
    if not np.issubdtype(dtype, np.floating):
        raise CheckpointError(
            f"{path}: tensor {name} holds {dtype.name} values, not floating-point weights; this file does not hold "
            "a model's trained weights (or holds them under other names)"
        )
    broken = value.size - int(np.count_nonzero(np.isfinite(value)))
    if broken:
        raise CheckpointError(
            f"{path}: tensor {name} holds {broken} NaN or infinite value(s) of {value.size} (as float32); "
            "these weights are broken: use an intact copy of the model"
        )


def google_arrays(folder, head_scope: str = None) -> tuple:
    """({Google name: array}, [unused state-dict keys], {Google name: state-dict key}) of a
    Hugging Face folder's weights; the last covers every BERT weight of its depth, present or not.

    ``head_scope`` is the Google scope a ``classifier`` is read as (see :func:`bert_name_table`).
    """
    weights = {_canonical(name): (path, value, name) for name, (path, value) in _weight_files(folder).items()}
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


def hf_weights(arrays: dict, num_layers: int, head_scope: str = None, prefix: str = "") -> dict:
    """{state-dict key: array} of Google-named arrays (the inverse of :func:`google_arrays`).

    ``prefix`` (``"bert."`` for a ``*For*`` model) goes before the transformer's keys.
    """
    weights = {}
    for google, hf, transposed in bert_name_table(num_layers, head_scope):
        if google in arrays:
            value = np.asarray(arrays[google], dtype=np.float32)
            key = hf if hf.startswith("classifier.") else prefix + hf
            weights[key] = np.ascontiguousarray(value.T) if transposed else np.ascontiguousarray(value)
    return weights


# -- tokenizer ------------------------------------------------------------------------------------


def vocab_path(folder) -> str:
    """The vocabulary of a Hugging Face folder: ``vocab.txt``, else ``tokenizer.json``."""
    folder = transformer_folder(folder)
    for name in (VOCAB_FILE, TOKENIZER_FILE):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise ConfigError(f"{folder}: no vocabulary ({VOCAB_FILE} or {TOKENIZER_FILE})")


def read_tokenizer_json(path) -> tuple:
    """(tokens in id order, do_lower_case) of a WordPiece ``tokenizer.json``.

    The normaliser and pre-tokeniser are checked against what cosent-tf's tokenizer does
    (BERT's: clean text, split Chinese characters, lower-case and strip accents together);
    anything else is a ConfigError naming the setting.
    """
    spec = read_json(path, "the tokenizer")
    model = _object(spec, "model", path)
    kind = json_field(model, "type", (str, NOTHING), path, "model.type")
    if kind != "WordPiece":
        raise ConfigError(f"{path}: tokenizer model {kind!r} is not supported (only WordPiece)")
    prefix = json_field(model, "continuing_subword_prefix", str, path, "model.continuing_subword_prefix", "##")
    if prefix != "##" or json_field(model, "unk_token", str, path, "model.unk_token", "[UNK]") != "[UNK]":
        raise ConfigError(f"{path}: WordPiece must use '##' sub-words and '[UNK]' (as BERT's vocabulary does)")
    normalizer = _object(spec, "normalizer", path)
    kind = json_field(normalizer, "type", (str, NOTHING), path, "normalizer.type")
    if kind != "BertNormalizer":
        raise ConfigError(f"{path}: normalizer {kind!r} is not supported (only BertNormalizer)")
    lowercase = json_field(normalizer, "lowercase", bool, path, "normalizer.lowercase", True)
    strip_accents = json_field(normalizer, "strip_accents", (bool, NOTHING), path, "normalizer.strip_accents")
    checks = {
        "clean_text": (json_field(normalizer, "clean_text", bool, path, "normalizer.clean_text", True), True),
        "handle_chinese_chars": (
            json_field(normalizer, "handle_chinese_chars", bool, path, "normalizer.handle_chinese_chars", True),
            True,
        ),
        "strip_accents": (lowercase if strip_accents is None else strip_accents, lowercase),
    }
    for key, (value, needed) in checks.items():
        if value != needed:
            raise ConfigError(
                f"{path}: normalizer {key} {value!r} is not supported (cosent-tf's tokenizer does {needed!r}"
                + (" with lowercase" if key == "strip_accents" else "")
                + ")"
            )
    pre_tokenizer = json_field(_object(spec, "pre_tokenizer", path), "type", (str, NOTHING), path, "pre_tokenizer.type")
    if pre_tokenizer != "BertPreTokenizer":
        raise ConfigError(f"{path}: pre_tokenizer {pre_tokenizer!r} is not supported (only BertPreTokenizer)")
    vocab = _object(model, "vocab", path, "model.vocab")
    for token in vocab:
        json_field(vocab, token, int, path, f"the id of {token!r} in model.vocab")
    ids = sorted(vocab.values())
    if ids != list(range(len(vocab))):
        raise ConfigError(f"{path}: the WordPiece ids are not 0..{len(vocab) - 1} without gaps")
    return sorted(vocab, key=vocab.get), lowercase


def do_lower_case(folder) -> bool:
    """Whether a Hugging Face folder's tokenizer lower-cases (BertTokenizer's default: yes)."""
    modules = read_sentence_transformers(folder) if is_sentence_transformers_folder(folder) else None
    folder = transformer_folder(folder)
    tokenizer = os.path.join(folder, TOKENIZER_FILE)
    config_path = os.path.join(folder, TOKENIZER_CONFIG)
    config = read_json(config_path, "the tokenizer config") if os.path.isfile(config_path) else {}
    if "do_lower_case" in config:
        lower = json_field(config, "do_lower_case", bool, config_path)
    elif os.path.isfile(tokenizer):
        lower = read_tokenizer_json(tokenizer)[1]
    else:
        lower = True
    return lower or bool(modules and modules.do_lower_case)


def model_max_length(folder):
    """The tokenizer config's ``model_max_length``, or None when absent (or the 'no limit' sentinel)."""
    path = os.path.join(transformer_folder(folder), TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        return None
    value = json_field(read_json(path, "the tokenizer config"), "model_max_length", (int, float, NOTHING), path)
    return int(value) if value is not None and 3 <= value < 1_000_000 else None


def write_vocab(path, tokens) -> None:
    """A BERT ``vocab.txt``: one token a line, in id order."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in tokens)


def write_tokenizer(folder, tokens, lower_case: bool, maxlen: int) -> None:
    """``vocab.txt``, ``tokenizer_config.json`` and ``special_tokens_map.json`` of a BERT tokenizer."""
    write_vocab(os.path.join(folder, VOCAB_FILE), tokens)
    specials = {
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    _write_json(
        os.path.join(folder, TOKENIZER_CONFIG),
        {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": lower_case,
            "strip_accents": None,
            "tokenize_chinese_chars": True,
            "model_max_length": maxlen,
            **specials,
        },
    )
    _write_json(os.path.join(folder, "special_tokens_map.json"), specials)


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_hf_folder(folder, weights: dict, config: dict) -> None:
    """``config.json`` and ``model.safetensors`` (``{state-dict key: array}``) into ``folder``."""
    from safetensors.numpy import save_file

    _write_json(os.path.join(folder, CONFIG_FILE), config)
    save_file(weights, os.path.join(folder, SAFETENSORS_FILE), metadata={"format": "pt"})


def write_sentence_transformers_modules(folder, pooling: str, dimension: int, maxlen: int, lower_case: bool) -> None:
    """The sentence-transformers files around a transformer saved in ``folder`` itself:
    ``modules.json`` (Transformer, Pooling, Normalize), ``sentence_bert_config.json`` and the
    pooling config, in the layout every sentence-transformers version since 2 reads."""
    mode = {layer_mode: st_mode for st_mode, layer_mode in ST_POOLING.items()}.get(pooling)
    if mode is None:
        raise ConfigError(
            f"pooling {pooling!r} cannot be expressed in sentence-transformers, which pools with "
            f"{', '.join(ST_POOLING)} ({', '.join(ST_POOLING.values())} here)"
        )
    _write_json(
        os.path.join(folder, MODULES_FILE),
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
    )
    _write_json(os.path.join(folder, SENTENCE_CONFIG), {"max_seq_length": maxlen, "do_lower_case": False})
    os.makedirs(os.path.join(folder, "1_Pooling"))
    _write_json(
        os.path.join(folder, "1_Pooling", CONFIG_FILE),
        {
            "word_embedding_dimension": dimension,
            "pooling_mode_cls_token": mode == "cls",
            "pooling_mode_mean_tokens": mode == "mean",
            "pooling_mode_max_tokens": mode == "max",
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    os.makedirs(os.path.join(folder, "2_Normalize"))
