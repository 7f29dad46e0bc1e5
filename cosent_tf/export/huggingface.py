"""Export a model folder as a Hugging Face folder: a sentence-transformers model (feature models)
or a ``BertForSequenceClassification`` (interaction models scoring through BERT's pooler), with
its tokenizer files, a model card and this tool's export record (:mod:`.savedmodel`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import numpy as np

from .. import huggingface
from ..backend import keras
from ..errors import ConfigError
from ..inference.model_dir import load_model_dir
from ..io import FolderKind, atomic_directory
from ..models.builders import head_layer_name
from ..models.checkpoints import HEAD_SCOPE, checkpoint_files, model_arrays, read_config
from ..models.kinds import FEATURE, INTERACTION
from ..models.spec import ModelSpec
from .savedmodel import EXPORT_RECORD, check_export_folder, write_export_record

HF_FOLDER = FolderKind(
    "a Hugging Face export",
    EXPORT_RECORD,
    (
        huggingface.CONFIG_FILE,
        huggingface.SAFETENSORS_FILE,
        huggingface.VOCAB_FILE,
        huggingface.TOKENIZER_CONFIG,
        "special_tokens_map.json",
        huggingface.MODULES_FILE,
        huggingface.SENTENCE_CONFIG,
        "1_Pooling",
        "2_Normalize",
        "README.md",
        EXPORT_RECORD,
    ),
)


# Architectures whose weights and tokenizer are Hugging Face's BertModel and BertTokenizer.
HF_ARCHITECTURES = ("bert", "roberta")


def export_hf(model_dir: str, out_dir: str, overwrite: bool = False) -> str:
    """Write ``out_dir`` (atomically) as a Hugging Face folder of the model folder ``model_dir``.

    A feature model becomes a sentence-transformers folder (``BertModel`` weights as
    ``model.safetensors``, the tokenizer, ``modules.json`` with its pooling and Normalize) that
    ``SentenceTransformer(out_dir)`` loads and encodes as :class:`cosent_tf.SentenceEncoder`
    does. An interaction model trained with ``--head pooler`` becomes a
    ``BertForSequenceClassification`` (num_labels 1 for a score, 2 for the softmax head) that
    ``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` load.
    The folder also holds :data:`~cosent_tf.export.savedmodel.EXPORT_RECORD`, which transformers
    and sentence-transformers do not read.

    Args:
        model_dir: a model folder written by training (or ``save_model_dir``).
        out_dir: the folder to write; an existing one must be empty, or this tool's export and
            ``overwrite`` true (:func:`~cosent_tf.export.savedmodel.check_export_folder`).
        overwrite: replace an earlier export in ``out_dir``.

    Returns:
        What was written: ``"sentence-transformers"`` or ``"sequence-classification"``.

    Raises:
        ConfigError: the model cannot be expressed as a Hugging Face BERT folder (another
            architecture, a word-level vocabulary, a pooling sentence-transformers lacks, an
            interaction head that does not read BERT's pooler), or ``out_dir`` may not be written.

    Example:
        >>> export_hf("runs/bq-cosent/model", "exports/bq-cosent-hf")
        'sentence-transformers'
        >>> from sentence_transformers import SentenceTransformer
        >>> vectors = SentenceTransformer("exports/bq-cosent-hf").encode(["花呗如何还钱"])
    """
    check_export_folder(out_dir, HF_FOLDER, overwrite, model_dir)
    spec, model, tokenizer = load_model_dir(model_dir)
    if spec.architecture not in HF_ARCHITECTURES or spec.word_level:
        raise ConfigError(
            f"{model_dir}: a {spec.architecture} model cannot be written as a Hugging Face BERT folder "
            f"(only {', '.join(HF_ARCHITECTURES)} with a character vocabulary); export it as a SavedModel"
        )
    hf_format = HF_FORMATS[spec.kind]
    hf_format.check(spec, model_dir)
    config = read_config(checkpoint_files(model_dir)[0])
    arrays = model_arrays(model, config, spec.architecture)
    tokens = list(tokenizer.token_dict)
    with atomic_directory(out_dir, HF_FOLDER, overwrite, inputs=[model_dir]) as tmp:
        hf_format.write(tmp, spec, model, config, arrays)
        huggingface.write_tokenizer(tmp, tokens, spec.do_lower_case, spec.maxlen)
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(_model_card(spec, hf_format, model_dir))
        write_export_record(tmp, hf_format.written, model_dir, spec)
    return hf_format.written


def _check_sentence_transformers_pooling(spec: ModelSpec, model_dir: str) -> None:
    if spec.pooling not in huggingface.ST_POOLING.values():
        raise ConfigError(
            f"{model_dir}: pooling {spec.pooling!r} cannot be expressed in sentence-transformers, which pools with "
            f"{', '.join(huggingface.ST_POOLING)} ({', '.join(huggingface.ST_POOLING.values())} here); "
            "export it as a SavedModel"
        )


def _write_sentence_transformers(
    folder: str, spec: ModelSpec, model: keras.Model, config: dict[str, Any], arrays: dict[str, np.ndarray]
) -> None:
    if "bert/pooler/dense/kernel" not in arrays:
        # BertModel always has a pooler, which sentence-transformers' pooling never reads: zeros
        # keep transformers from reporting it missing at every load.
        hidden = config["hidden_size"]
        arrays["bert/pooler/dense/kernel"] = np.zeros((hidden, hidden), np.float32)
        arrays["bert/pooler/dense/bias"] = np.zeros((hidden,), np.float32)
    weights = huggingface.hf_weights(arrays, config["num_hidden_layers"])
    huggingface.write_hf_folder(folder, weights, huggingface.hf_config(config))
    huggingface.write_sentence_transformers_modules(
        folder, spec.pooling, config["hidden_size"], spec.maxlen, spec.do_lower_case
    )


def _check_head_reads_pooler(spec: ModelSpec, model_dir: str) -> None:
    if not (spec.head_input == "pooler" and spec.pair_segments):
        raise ConfigError(
            f"{model_dir}: this interaction model's head reads the [CLS] hidden state directly (as the original "
            "experiments), which BertForSequenceClassification cannot express: it scores through BERT's pooler. "
            "Train with --head pooler to export to Hugging Face, or export it as a SavedModel"
        )


def _write_sequence_classification(
    folder: str, spec: ModelSpec, model: keras.Model, config: dict[str, Any], arrays: dict[str, np.ndarray]
) -> None:
    assert spec.head is not None  # an interaction model's spec names its head (ModelSpec checks it)
    scope = HEAD_SCOPE + head_layer_name(spec.head)
    head = model.get_layer(head_layer_name(spec.head))
    arrays[scope + "/kernel"], arrays[scope + "/bias"] = (w.numpy() for w in head.weights)
    weights = huggingface.hf_weights(arrays, config["num_hidden_layers"], scope, prefix="bert.")
    labels = {value: key for key, value in huggingface.CLASSIFIER_HEADS.items()}[spec.head]
    hf_config = huggingface.hf_config(config, ("BertForSequenceClassification",), num_labels=labels)
    huggingface.write_hf_folder(folder, weights, hf_config)


@dataclasses.dataclass(frozen=True)
class _HfFormat:
    """What a model of one kind becomes in Hugging Face's terms."""

    written: str  # export_hf's answer and the export record's "export"
    check: Callable[[ModelSpec, str], None]  # a ConfigError naming model_dir when it cannot be expressed
    # Writes the weights (the model's arrays, by checkpoint name) and config.json into the folder.
    write: Callable[[str, ModelSpec, keras.Model, dict[str, Any], dict[str, np.ndarray]], None]
    usage: str  # the model card's example


# The Hugging Face folder of each model kind (cosent_tf.models.kinds): a feature model becomes a
# sentence-transformers model, an interaction model a BertForSequenceClassification.
HF_FORMATS = {
    FEATURE.name: _HfFormat(
        "sentence-transformers",
        _check_sentence_transformers_pooling,
        _write_sentence_transformers,
        "from sentence_transformers import SentenceTransformer\n"
        "model = SentenceTransformer('THIS_FOLDER')\n"
        "vectors = model.encode(['第一句', '第二句'])",
    ),
    INTERACTION.name: _HfFormat(
        "sequence-classification",
        _check_head_reads_pooler,
        _write_sequence_classification,
        "from sentence_transformers import CrossEncoder\n"
        "model = CrossEncoder('THIS_FOLDER')\n"
        "scores = model.predict([('第一句', '第二句')])",
    ),
}


def _model_card(spec: ModelSpec, hf_format: _HfFormat, model_dir: str) -> str:
    """The README.md of an export: where it came from and how to load it."""
    source = json.dumps(spec.source, ensure_ascii=False, sort_keys=True)
    return (
        f"# {hf_format.written} model exported by cosent-tf\n\n"
        f"Exported from the cosent-tf model folder `{os.path.abspath(model_dir)}` "
        f"({spec.kind} model, {spec.pooling or spec.head}, maxlen {spec.maxlen}).\n\n"
        f"Training record: `{source}`\n\n```python\n{hf_format.usage}\n```\n"
    )
