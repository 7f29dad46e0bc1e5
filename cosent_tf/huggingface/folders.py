"""Hugging Face and sentence-transformers folders: their files, how to recognise them, their tokenizer.

A Hugging Face model folder holds ``config.json`` (``model_type: bert``), the weights
(``model.safetensors``, possibly sharded, or ``pytorch_model.bin``) and the tokenizer
(``vocab.txt``, or only ``tokenizer.json`` as transformers 5 saves it, and
``tokenizer_config.json``). A sentence-transformers folder adds ``modules.json``,
``sentence_bert_config.json`` and a pooling module (and optionally ``Normalize``) around one;
this tool's exports at a width add a Dense module that keeps the pooled vector's first dimensions,
which it writes but does not read (it reads the model folder and cuts the vectors itself).

This module knows those files and nothing of Keras. The BERT config and the weight names
are :mod:`cosent_tf.huggingface.bert`; reading the weight files is
:mod:`cosent_tf.huggingface.weights`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from typing import Any, Optional, Union

import numpy as np

from ..errors import ConfigError
from ..io import atomic_path, json_field, read_json

# A file or folder as the user gives it.
PathLike = Union[str, "os.PathLike[str]"]

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

# sentence-transformers pooling modes and the Pooling layer mode each one is.
ST_POOLING = {"cls": "cls", "mean": "last-avg", "max": "max"}
ST_MODULE_TYPES = ("Transformer", "Pooling", "Normalize")
# The module folders of the sentence-transformers folders written here, as sentence-transformers
# names them (index_type): Pooling and Normalize at full width; Pooling, Dense and Normalize when the
# vectors are cut to a width (:func:`write_sentence_transformers_modules`).
ST_MODULE_FOLDERS = ("1_Pooling", "2_Normalize", "2_Dense", "3_Normalize")
# The Dense module's activation that leaves its output as it is (``fullname(torch.nn.Identity())``):
# sentence-transformers imports an activation named under torch. without trust_remote_code.
IDENTITY_ACTIVATION = "torch.nn.modules.linear.Identity"
# The type json_field accepts for JSON null.
NOTHING = type(None)


def json_object(record: dict, key: str, path: PathLike, what: Optional[str] = None) -> dict:
    """``record[key]``, which must be a JSON object, or null or missing (then {}).

    Args:
        record: a parsed JSON object.
        key: the key to read.
        path: the file ``record`` came from, for messages.
        what: how messages name the value (default: ``key``).

    Returns:
        The object, or {} where it is null or missing.

    Raises:
        ConfigError: the value is another JSON type.

    Example:
        >>> json_object({"model": {"type": "WordPiece"}}, "model", "tokenizer.json")
        {'type': 'WordPiece'}
    """
    return json_field(record, key, (dict, NOTHING), path, what or repr(key)) or {}


def is_sentence_transformers_folder(path: Optional[PathLike]) -> bool:
    """Whether ``path`` is a sentence-transformers folder (it holds ``modules.json``).

    Args:
        path: a file or folder, or None.

    Returns:
        True for a folder with ``modules.json``; False otherwise (None included).

    Example:
        >>> is_sentence_transformers_folder("no/such/folder")
        False
    """
    return path is not None and os.path.isdir(path) and os.path.isfile(os.path.join(path, MODULES_FILE))


def is_hf_folder(path: Optional[PathLike]) -> bool:
    """Whether ``path`` is a Hugging Face model folder or a sentence-transformers folder.

    Args:
        path: a file or folder, or None.

    Returns:
        True for a sentence-transformers folder, or a folder with ``config.json`` and one of
        :data:`WEIGHT_FILES`; False otherwise.

    Example:
        >>> is_hf_folder(None)
        False
    """
    if is_sentence_transformers_folder(path):
        return True
    return (
        path is not None
        and os.path.isdir(path)
        and os.path.isfile(os.path.join(path, CONFIG_FILE))
        and any(os.path.isfile(os.path.join(path, name)) for name in WEIGHT_FILES)
    )


def looks_like_hub_name(text: PathLike) -> bool:
    """Whether ``text`` reads as a hub model id (``owner/name``) rather than a local path.

    Args:
        text: what the user gave as a model.

    Returns:
        True for two non-empty parts of which neither the whole nor the first exists here.

    Example:
        >>> looks_like_hub_name("shibing624/text2vec-base-chinese")
        True
    """
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
    """What cosent-tf reads of a sentence-transformers folder.

    A Normalize module needs nothing more: ``SentenceEncoder.encode`` returns unit vectors by default.

    Attributes:
        transformer_folder: the folder of the Transformer module (config, weights, tokenizer).
        pooling: its pooling, as a :data:`cosent_tf.layers.POOLING_MODES` name.
        maxlen: ``max_seq_length``, or None.
        do_lower_case: the module's own lower-casing setting.

    Example:
        >>> SentenceTransformersModules("m", "cls", 128, False).pooling
        'cls'
    """

    transformer_folder: str
    pooling: str
    maxlen: Optional[int]
    do_lower_case: bool


def read_sentence_transformers(folder: PathLike) -> SentenceTransformersModules:
    """The modules of a sentence-transformers folder (old and new ``modules.json`` layouts).

    Supported: one Transformer, one Pooling (cls, mean or max), optionally Normalize.

    Args:
        folder: a sentence-transformers folder.

    Returns:
        Its :class:`SentenceTransformersModules`.

    Raises:
        ConfigError: another module or setting, naming it, or a damaged file.

    Example:
        >>> read_sentence_transformers("text2vec-base-chinese").pooling  # doctest: +SKIP
        'last-avg'
    """
    modules_path = os.path.join(folder, MODULES_FILE)
    modules = read_json(modules_path, "the sentence-transformers modules", expect=list)
    found = {}
    for number, module in enumerate(modules):
        if not isinstance(module, dict) or "type" not in module:
            raise ConfigError(f"{modules_path}: module {number} is not a JSON object with a 'type'")
        where = f"module {number}'s"
        kind = json_field(module, "type", str, modules_path, f"{where} 'type'").rsplit(".", 1)[-1]
        if kind == "Dense":
            raise ConfigError(
                f"{modules_path}: module {module.get('name', module.get('idx'))!r} ({module['type']}) is not "
                "supported: a Dense module changes the pooled vectors (the one cosent-tf export --dim writes "
                "keeps their first dimensions), and cosent-tf reads a sentence-transformers folder's pooled "
                "vectors only; load the model folder it was exported from, or an export at full width, and cut "
                "its vectors with --dim (dim= in Python)"
            )
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


def _st_pooling(path: str) -> str:
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


def transformer_folder(path: PathLike) -> str:
    """The folder holding the transformer's config and weights.

    Args:
        path: a Hugging Face or sentence-transformers folder.

    Returns:
        ``path`` itself, or the Transformer module's folder of a sentence-transformers folder.

    Raises:
        ConfigError: a sentence-transformers folder whose modules cannot be read.

    Example:
        >>> transformer_folder("no/such/folder")
        'no/such/folder'
    """
    if is_sentence_transformers_folder(path):
        return read_sentence_transformers(path).transformer_folder
    return os.fspath(path)


# -- tokenizer ------------------------------------------------------------------------------------


def vocab_path(folder: PathLike) -> str:
    """The vocabulary of a Hugging Face folder: ``vocab.txt``, else ``tokenizer.json``.

    Args:
        folder: a Hugging Face or sentence-transformers folder.

    Returns:
        The path of the vocabulary file.

    Raises:
        ConfigError: the folder has neither.

    Example:
        >>> vocab_path("bge-small-zh")  # doctest: +SKIP
        'bge-small-zh/vocab.txt'
    """
    folder = transformer_folder(folder)
    for name in (VOCAB_FILE, TOKENIZER_FILE):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise ConfigError(f"{folder}: no vocabulary ({VOCAB_FILE} or {TOKENIZER_FILE})")


def read_tokenizer_json(path: PathLike) -> tuple[list[str], bool]:
    """The vocabulary and lower-casing of a WordPiece ``tokenizer.json``.

    The normaliser and pre-tokeniser are checked against what cosent-tf's tokenizer does
    (BERT's: clean text, split Chinese characters, lower-case and strip accents together).

    Args:
        path: the ``tokenizer.json`` file.

    Returns:
        (tokens in id order, do_lower_case).

    Raises:
        ConfigError: another model, normaliser or pre-tokeniser, naming the setting, or ids
            that are not 0..n-1.

    Example:
        >>> tokens, lower = read_tokenizer_json("bge-small-zh/tokenizer.json")  # doctest: +SKIP
    """
    spec = read_json(path, "the tokenizer")
    model = json_object(spec, "model", path)
    kind = json_field(model, "type", (str, NOTHING), path, "model.type")
    if kind != "WordPiece":
        raise ConfigError(f"{path}: tokenizer model {kind!r} is not supported (only WordPiece)")
    prefix = json_field(model, "continuing_subword_prefix", str, path, "model.continuing_subword_prefix", "##")
    if prefix != "##" or json_field(model, "unk_token", str, path, "model.unk_token", "[UNK]") != "[UNK]":
        raise ConfigError(f"{path}: WordPiece must use '##' sub-words and '[UNK]' (as BERT's vocabulary does)")
    normalizer = json_object(spec, "normalizer", path)
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
    pre_tokenizer = json_field(
        json_object(spec, "pre_tokenizer", path), "type", (str, NOTHING), path, "pre_tokenizer.type"
    )
    if pre_tokenizer != "BertPreTokenizer":
        raise ConfigError(f"{path}: pre_tokenizer {pre_tokenizer!r} is not supported (only BertPreTokenizer)")
    vocab = json_object(model, "vocab", path, "model.vocab")
    for token in vocab:
        json_field(vocab, token, int, path, f"the id of {token!r} in model.vocab")
    ids = sorted(vocab.values())
    if ids != list(range(len(vocab))):
        raise ConfigError(f"{path}: the WordPiece ids are not 0..{len(vocab) - 1} without gaps")
    return sorted(vocab, key=vocab.__getitem__), lowercase


def do_lower_case(folder: PathLike) -> bool:
    """Whether a Hugging Face folder's tokenizer lower-cases (BertTokenizer's default: yes).

    Args:
        folder: a Hugging Face or sentence-transformers folder.

    Returns:
        ``tokenizer_config.json``'s ``do_lower_case``, else ``tokenizer.json``'s normaliser,
        else True; or True where a sentence-transformers folder's settings say so.

    Raises:
        ConfigError: a damaged or unsupported tokenizer file.

    Example:
        >>> do_lower_case("bge-small-zh")  # doctest: +SKIP
        True
    """
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


def model_max_length(folder: PathLike) -> Optional[int]:
    """The tokenizer config's ``model_max_length``.

    Args:
        folder: a Hugging Face or sentence-transformers folder.

    Returns:
        The length, or None when absent (or the 'no limit' sentinel).

    Raises:
        ConfigError: a value of the wrong JSON type.

    Example:
        >>> model_max_length("no/such/folder") is None
        True
    """
    path = os.path.join(transformer_folder(folder), TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        return None
    value = json_field(read_json(path, "the tokenizer config"), "model_max_length", (int, float, NOTHING), path)
    return int(value) if value is not None and 3 <= value < 1_000_000 else None


def write_vocab(path: PathLike, tokens: Iterable[str]) -> None:
    """A BERT ``vocab.txt``: one token a line, in id order.

    Args:
        path: the file to write.
        tokens: the tokens in id order.

    Example:
        >>> write_vocab("vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]"])  # doctest: +SKIP
    """
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in tokens)


def write_tokenizer(folder: PathLike, tokens: Iterable[str], lower_case: bool, maxlen: int) -> None:
    """``vocab.txt``, ``tokenizer_config.json`` and ``special_tokens_map.json`` of a BERT tokenizer.

    Args:
        folder: an existing folder to write them into.
        tokens: the vocabulary in id order.
        lower_case: the tokenizer's ``do_lower_case``.
        maxlen: its ``model_max_length``.

    Example:
        >>> write_tokenizer("out", tokens, lower_case=True, maxlen=64)  # doctest: +SKIP
    """
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


def _write_json(path: PathLike, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _write_safetensors(path: str, weights: dict) -> None:
    """``weights`` as a safetensors file at ``path``, through the project's writer: safetensors'
    own ``save_file`` makes a file only its owner may read (0600), which a server running as
    another user could not load; the writer gives it the mode the umask gives, as every output."""
    from safetensors.numpy import save_file

    with atomic_path(path) as tmp:
        save_file(weights, tmp, metadata={"format": "pt"})


def write_hf_folder(folder: PathLike, weights: dict, config: dict) -> None:
    """``config.json`` and ``model.safetensors`` into ``folder``.

    Args:
        folder: an existing folder.
        weights: {state-dict key: array}, as :func:`cosent_tf.huggingface.bert.hf_weights` gives.
        config: the Hugging Face config (:func:`cosent_tf.huggingface.bert.hf_config`).

    Example:
        >>> write_hf_folder("out", hf_weights(arrays, 12), hf_config(google_config))  # doctest: +SKIP
    """
    _write_json(os.path.join(folder, CONFIG_FILE), config)
    _write_safetensors(os.path.join(folder, SAFETENSORS_FILE), weights)


def write_sentence_transformers_modules(
    folder: PathLike, pooling: str, dimension: int, maxlen: int, lower_case: bool, dim: Optional[int] = None
) -> None:
    """The sentence-transformers files around a transformer saved in ``folder`` itself.

    ``modules.json`` (Transformer, Pooling, Normalize), ``sentence_bert_config.json`` and the
    pooling config, in the layout every sentence-transformers version since 2 reads. With ``dim``,
    a Dense module between Pooling and Normalize keeps the first ``dim`` dimensions of the pooled
    vector (:func:`write_slice_module`), so that the folder's vectors are those dimensions
    renormalised, with no argument to ``SentenceTransformer`` or ``encode``.

    Args:
        folder: the Hugging Face folder to complete.
        pooling: a :data:`cosent_tf.layers.POOLING_MODES` name that :data:`ST_POOLING` has.
        dimension: the pooled vector's size.
        maxlen: ``max_seq_length``.
        lower_case: unused: the tokenizer config carries lower-casing.
        dim: the width the vectors are cut to, below ``dimension``; None keeps them whole.

    Raises:
        ConfigError: a pooling sentence-transformers cannot express.

    Example:
        >>> write_sentence_transformers_modules("out", "cls", 768, 64, True)  # doctest: +SKIP
        >>> write_sentence_transformers_modules("out-128", "cls", 768, 64, True, dim=128)  # doctest: +SKIP
    """
    mode = {layer_mode: st_mode for st_mode, layer_mode in ST_POOLING.items()}.get(pooling)
    if mode is None:
        raise ConfigError(
            f"pooling {pooling!r} cannot be expressed in sentence-transformers, which pools with "
            f"{', '.join(ST_POOLING)} ({', '.join(ST_POOLING.values())} here)"
        )
    pooling_folder, *after = ("1_Pooling", "2_Normalize") if dim is None else ("1_Pooling", "2_Dense", "3_Normalize")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": pooling_folder, "type": "sentence_transformers.models.Pooling"},
    ]
    for idx, path in enumerate(after, start=2):
        modules.append(
            {"idx": idx, "name": str(idx), "path": path, "type": f"sentence_transformers.models.{path.split('_')[1]}"}
        )
    _write_json(os.path.join(folder, MODULES_FILE), modules)
    _write_json(os.path.join(folder, SENTENCE_CONFIG), {"max_seq_length": maxlen, "do_lower_case": False})
    os.makedirs(os.path.join(folder, pooling_folder))
    _write_json(
        os.path.join(folder, pooling_folder, CONFIG_FILE),
        {
            "word_embedding_dimension": dimension,
            "pooling_mode_cls_token": mode == "cls",
            "pooling_mode_mean_tokens": mode == "mean",
            "pooling_mode_max_tokens": mode == "max",
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    if dim is not None:
        write_slice_module(os.path.join(folder, after[0]), dimension, dim)
    os.makedirs(os.path.join(folder, after[-1]))


def write_slice_module(folder: PathLike, dimension: int, dim: int) -> None:
    """A sentence-transformers Dense module that keeps the first ``dim`` of ``dimension`` inputs:
    weight the first ``dim`` rows of the identity, bias zero, no activation (each output is one
    input times 1 plus zeros, so the slice is exact in float32).

    ``config.json`` holds the keys every version's Dense takes (``in_features``, ``out_features``,
    ``bias``, ``activation_function``), and ``model.safetensors`` its ``linear.weight``
    (``dim`` x ``dimension``) and ``linear.bias``, which sentence-transformers reads since 2.3
    (before ``pytorch_model.bin``, which needs torch to write).

    Args:
        folder: the module's folder, made here.
        dimension: the pooled vector's size.
        dim: how many of its first dimensions to keep, 1 to ``dimension``.

    Raises:
        ValueError: ``dim`` outside 1 .. ``dimension``.

    Example:
        >>> write_slice_module("out/2_Dense", 768, 128)  # doctest: +SKIP
    """
    if not 1 <= dim <= dimension:
        raise ValueError(f"a slice of {dimension} dimensions keeps 1 to {dimension} of them, not {dim}")
    os.makedirs(folder)
    _write_json(
        os.path.join(folder, CONFIG_FILE),
        {"in_features": dimension, "out_features": dim, "bias": True, "activation_function": IDENTITY_ACTIVATION},
    )
    weights = {"linear.weight": np.eye(dim, dimension, dtype=np.float32), "linear.bias": np.zeros(dim, np.float32)}
    _write_safetensors(os.path.join(folder, SAFETENSORS_FILE), weights)
