"""What, besides weights, a model needs to be used: :class:`ModelSpec`, the content of a model
folder's ``cosent_model.json``, reading and writing that file, and the spec a Hugging Face
folder is used as (:func:`hf_spec`).

It sits below :mod:`cosent_tf.models.sources`, which opens a model folder through
:func:`read_spec`; a source handed to :func:`read_spec` is recognised by what it holds.

Older folders still load: a ``format_version`` 1 file names the architecture ``model``
(see CHANGELOG.md for what each version added).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import numbers
import os
from collections.abc import Mapping
from typing import Any, Optional, Protocol, Union

from .. import huggingface
from ..calibration import DECISION_FILE, MatchDecision, decision_or_threshold, read_decision, write_decision
from ..errors import ConfigError
from ..exports import EXPORT_RECORD
from ..io import FolderKind, atomic_directory, is_inside, json_field, read_json
from .checkpoint_files import (
    CHECKPOINT_ENTRIES,
    CHECKPOINT_PREFIX,
    CONFIG_FILE,
    VOCAB_FILE,
    write_checkpoint_folder_arrays,
)
from .families import get_architecture
from .kinds import FEATURE, HEAD_INPUTS, INTERACTION, KINDS, get_kind

SPEC_FILE = "cosent_model.json"
# A model folder: a Google-format checkpoint folder plus SPEC_FILE (and the match decision), what
# cosent_tf.inference.model_dir writes for the Keras 2 engine and cosent_tf.keras3.training for Keras 3.
MODEL_FOLDER = FolderKind("a cosent-tf model folder", SPEC_FILE, CHECKPOINT_ENTRIES + (SPEC_FILE, DECISION_FILE))
FORMAT = "cosent-tf-model"
FORMAT_VERSION = 3

# The two Hugging Face formats, as ModelSource.format names them (see cosent_tf.models.sources).
HUGGING_FACE, SENTENCE_TRANSFORMERS = "huggingface", "sentence-transformers"


# The JSON type of each field of cosent_model.json (None: null).
SPEC_TYPES: dict[str, Any] = {
    "kind": str,
    "architecture": str,
    "pooling": (str, type(None)),
    "head": (str, type(None)),
    "head_input": str,
    "pair_segments": bool,
    "maxlen": int,
    "do_lower_case": bool,
    "word_level": bool,
    "threshold": (int, float, type(None)),
    "source": dict,
    "matryoshka_dims": (list, type(None)),
}


@dataclasses.dataclass
class ModelSpec:
    """What, besides weights, a model needs to be used: the content of ``cosent_model.json``.

    Args:
        kind: the :class:`~cosent_tf.models.kinds.ModelKind` name, ``feature`` or ``interaction``.
        architecture: the transformer's architecture (``bert``, ``nezha``, ...).
        pooling: a feature model's pooling (:data:`cosent_tf.layers.POOLING_MODES`).
        head: an interaction model's head (``score`` or ``softmax``).
        head_input: what an interaction head reads (:data:`cosent_tf.models.kinds.HEAD_INPUTS`).
        pair_segments: the second text of a pair has segment id 1 (as in BERT's pre-training and
            Hugging Face cross-encoders), rather than 0 as in the original interaction experiments.
        maxlen: the tokens per text (per pair, for an interaction model).
        do_lower_case: whether the tokenizer lower-cases.
        word_level: whether texts are cut into words with jieba first.
        threshold: only read from folders written before cosent-tf 0.6, whose training tuned an
            accuracy threshold on valid and kept it here; newer folders keep their thresholds and
            calibration in ``decision.json`` (:mod:`cosent_tf.calibration`) and leave this None.
        source: where the model came from (the run, its task and checkpoint).
        matryoshka_dims: a feature model trained with ``--matryoshka-dims``: the widths its loss
            trained (its vectors cut to one of them keep their quality); None: trained at its full
            width only.

    Example:
        >>> ModelSpec("interaction", pooling=None, head="score").kind
        'interaction'
    """

    kind: str = FEATURE.name
    architecture: str = "bert"
    pooling: Optional[str] = "cls"
    head: Optional[str] = None
    head_input: str = "cls"
    pair_segments: bool = False
    maxlen: int = 64
    do_lower_case: bool = True
    word_level: bool = False
    threshold: Optional[float] = None
    source: dict = dataclasses.field(default_factory=dict)
    matryoshka_dims: Optional[list] = None

    def check(self, where: str) -> None:
        """Raise ConfigError naming ``where`` and the field for a value of the wrong type or range.

        Args:
            where: what to name in messages (the file the spec came from).

        Raises:
            ConfigError: a field has the wrong type or a value this version does not know.
        """
        for name, expected in SPEC_TYPES.items():
            if name in ("maxlen", "threshold"):  # NumPy numbers are welcome here; checked below
                continue
            if not isinstance(getattr(self, name), expected):
                raise ConfigError(f"{where}: {name} has the wrong type ({getattr(self, name)!r})")
        threshold = self.threshold
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold)
        ):
            raise ConfigError(f"{where}: threshold must be a finite number or null, got {threshold!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"{where}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        kind = KINDS[self.kind]
        if kind.spec_field == "head":  # which head comes first, as it always has
            kind.check_spec(self, where)
        if self.head_input not in HEAD_INPUTS:
            raise ConfigError(f"{where}: head_input {self.head_input!r} is not one of {', '.join(HEAD_INPUTS)}")
        try:
            get_architecture(self.architecture)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        if kind.spec_field != "head":
            kind.check_spec(self, where)
        if isinstance(self.maxlen, bool) or not isinstance(self.maxlen, int) or self.maxlen < 3:
            raise ConfigError(f"{where}: maxlen must be an integer of at least 3, got {self.maxlen!r}")
        dims = self.matryoshka_dims
        if dims is not None and (
            not dims or any(isinstance(dim, bool) or not isinstance(dim, int) or dim < 1 for dim in dims)
        ):
            raise ConfigError(f"{where}: matryoshka_dims must be a list of positive integers or null, got {dims!r}")


def write_spec(folder: str, spec: ModelSpec) -> None:
    """Write ``spec`` as ``folder``/``cosent_model.json`` (the folder being written, not atomically:
    :func:`cosent_tf.inference.model_dir.save_model_dir` writes the folder as a whole)."""
    record = {"format": FORMAT, "format_version": FORMAT_VERSION, **dataclasses.asdict(spec)}
    if spec.threshold is None:  # the decision lives in decision.json; only an old folder's spec has one
        del record["threshold"]
    else:  # a NumPy scalar is not JSON
        record["threshold"] = float(spec.threshold)
    with open(os.path.join(folder, SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def warn_if_random_weights(spec: ModelSpec, shown: Any) -> None:
    """Say that the model of ``spec`` (a folder named ``shown``) was trained from random weights, where
    it was: said wherever a model folder is loaded, for inference or export, on either Keras."""
    if spec.source.get("random_weights"):
        logging.getLogger(__name__).warning(
            "%s: this model was trained from random weights (no --checkpoint), so it is only fit for trying "
            "the tools: unrelated sentences may score near 1",
            shown,
        )


def write_model_folder(
    directory: str,
    arrays: Mapping[str, Any],
    spec: ModelSpec,
    config: dict,
    vocab_path: str,
    overwrite: bool = False,
    decision: Optional[MatchDecision] = None,
) -> None:
    """Write a model folder from its weights as ``arrays`` ({Google checkpoint name: array}), atomically:
    the checkpoint folder's files (:func:`~cosent_tf.models.checkpoint_files.write_checkpoint_folder_arrays`),
    ``spec`` (checked first) and, given a ``decision``, ``decision.json`` stamped with these weights.
    Every writer ends here (:func:`cosent_tf.training.engine.train` on either Keras,
    :func:`cosent_tf.inference.model_dir.save_model_dir` from a Keras 2 model,
    :func:`cosent_tf.keras3.training.save_model_folder` from a bare keras-hub backbone), so that their
    folders are one kind.

    Raises:
        ConfigError: the spec is wrong, or ``directory`` holds something else (or a model folder
            and ``overwrite`` is false).
    """
    spec.check(SPEC_FILE)
    with atomic_directory(directory, MODEL_FOLDER, overwrite) as tmp:
        write_checkpoint_folder_arrays(tmp, arrays, config, vocab_path)
        write_spec(tmp, spec)
        if decision is not None:
            write_decision(tmp, decision)


class OpenedFolder(Protocol):
    """What :func:`read_spec` asks of a :class:`~cosent_tf.models.sources.ModelSource`."""

    @property
    def path(self) -> Optional[str]: ...

    @property
    def spec(self) -> Optional[ModelSpec]: ...


def read_spec(directory: Union[str, os.PathLike, OpenedFolder]) -> ModelSpec:
    """The :class:`ModelSpec` of a model folder, or of a Hugging Face folder (see
    :func:`hf_spec`).

    Args:
        directory: the folder, or a :class:`~cosent_tf.models.sources.ModelSource` opened from
            one (its spec was read when it was opened).

    Returns:
        The spec, checked.

    Raises:
        ConfigError: the folder is missing, is no model folder, is incomplete, links outside
            itself, or its ``cosent_model.json`` is wrong; the message names it.

    Example:
        >>> read_spec("runs/cosent-STS-B/model").kind  # doctest: +SKIP
        'feature'
    """
    if not isinstance(directory, (str, os.PathLike)):  # a ModelSource
        if directory.spec is None:
            raise ConfigError(f"{directory.path}: not a cosent-tf model folder (no {SPEC_FILE})")
        return directory.spec
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ConfigError(f"{directory}: model folder not found")
    spec_path = os.path.join(directory, SPEC_FILE)
    if not os.path.exists(spec_path) and hugging_face_format(directory) is not None:
        return hf_spec(directory)
    if not os.path.exists(spec_path):
        raise ConfigError(
            f"{directory}: not a cosent-tf model folder (no {SPEC_FILE}; a training run writes one as "
            "OUTPUT_DIR/model), nor a Hugging Face or sentence-transformers folder (config.json with "
            "model.safetensors or pytorch_model.bin)"
        )
    record = read_json(spec_path, "the model description")
    if json_field(record, "format", str, spec_path) != FORMAT:
        raise ConfigError(f"{spec_path}: not a cosent-tf model description (format is not {FORMAT!r})")
    version = json_field(record, "format_version", int, spec_path, default=0)
    if version > FORMAT_VERSION:
        raise ConfigError(
            f"{spec_path}: format version {version} is newer than this cosent-tf reads ({FORMAT_VERSION}); "
            "upgrade cosent-tf"
        )
    if "model" in record:  # format version 1
        record.setdefault("architecture", json_field(record, "model", str, spec_path))
    fields: dict[str, Any] = {
        name: json_field(record, name, expected, spec_path) for name, expected in SPEC_TYPES.items() if name in record
    }
    spec = ModelSpec(**fields)
    spec.check(spec_path)
    missing = [
        name
        for name in (CONFIG_FILE, VOCAB_FILE, CHECKPOINT_PREFIX + ".index")
        if not os.path.exists(os.path.join(directory, name))
    ]
    if missing:
        raise ConfigError(f"{directory}: incomplete model folder, missing {', '.join(missing)}")
    outside = [
        name for name in sorted(os.listdir(directory)) if not is_inside(os.path.join(directory, name), directory)
    ]
    if outside:  # a model folder holds its own files: a link elsewhere may change under it
        raise ConfigError(
            f"{directory}: {', '.join(outside)} link(s) to outside the model folder; copy the files in instead"
        )
    return spec


def hf_spec(directory: str, config: Optional[dict] = None) -> ModelSpec:
    """The :class:`ModelSpec` a Hugging Face folder is used as.

    A ``BertForSequenceClassification`` (num_labels 1: a score; 2: P(label 1)) is an interaction
    model with its head on the pooler; anything else is a feature model pooled as its
    sentence-transformers modules say, or (a bare transformers folder) by the mean, as
    sentence-transformers does. maxlen is ``max_seq_length``, else the tokenizer's
    ``model_max_length``, else the position embeddings' count.

    Args:
        directory: the Hugging Face or sentence-transformers folder.
        config: its transformer's ``config.json``, parsed, when the caller has read it already.

    Returns:
        The spec.

    Raises:
        ConfigError: the folder cannot be built here, or its classifier has another number of
            labels than 1 or 2.

    Example:
        >>> hf_spec("bert-base-chinese/").kind  # doctest: +SKIP
        'feature'
    """
    if config is None:
        config = huggingface.read_hf_config(directory)
    config_path = os.path.join(huggingface.transformer_folder(directory), huggingface.CONFIG_FILE)
    huggingface.bert_config(config, config_path)  # refuses what cannot be built, before anything else
    modules = None
    if hugging_face_format(directory) == SENTENCE_TRANSFORMERS:
        modules = huggingface.read_sentence_transformers(directory)
    settings: dict[str, Any] = dict(
        architecture="bert",
        maxlen=_hf_maxlen(directory, config, modules)[0],
        do_lower_case=huggingface.do_lower_case(directory),
        source={"huggingface": os.path.abspath(directory)},
    )
    labels = huggingface.classifier_labels(config, config_path)
    if labels is not None:
        if labels not in huggingface.CLASSIFIER_HEADS:
            raise ConfigError(
                f"{config_path}: a classifier of {labels} labels cannot be used as a pair scorer; "
                f"cosent-tf reads 1 (a score) or 2 (label 1 is 'similar')"
            )
        head = huggingface.CLASSIFIER_HEADS[labels]
        return ModelSpec(INTERACTION.name, pooling=None, head=head, head_input="pooler", pair_segments=True, **settings)
    return ModelSpec(FEATURE.name, pooling=modules.pooling if modules else "last-avg", **settings)


def _hf_maxlen(directory: str, config: dict, modules: Optional[Any]) -> tuple[int, str]:
    """The tokens per text of a Hugging Face folder (see :func:`hf_spec`), and how the folder
    states it, for messages: ``max_seq_length 256``, or what stands in for it."""
    positions = int(config.get("max_position_embeddings", 512))
    if modules is not None and modules.maxlen:
        stated, origin = modules.maxlen, f"max_seq_length {modules.maxlen}"
    else:
        tokenizer = huggingface.model_max_length(directory)
        stated = tokenizer or positions
        cause = "the tokenizer's model_max_length" if tokenizer else "the model's position embeddings"
        origin = f"the length {stated} ({'no max_seq_length: ' if modules is not None else ''}{cause})"
    if stated > positions:  # what sentence-transformers would give positions beyond the model's
        origin += f" cut to the model's {positions} position embeddings"
    return min(stated, positions), origin


@dataclasses.dataclass(frozen=True)
class FolderSetting:
    """A setting of the folder a run starts from, which the run takes unless its option is given.

    Attributes:
        name: the :class:`~cosent_tf.training.config.RunConfig` field (and option) it is the
            default of: ``maxlen`` or ``pooling``.
        value: the value, as that option takes it.
        origin: how the folder states it, for messages (``max_seq_length 256``, ``pooling mean``).

    Example:
        >>> FolderSetting("maxlen", 256, "max_seq_length 256").value
        256
    """

    name: str
    value: Any
    origin: str


def folder_settings(path: Any, config: Optional[dict] = None) -> tuple[FolderSetting, ...]:
    """The settings a run starting from ``path`` takes as its defaults: a sentence-transformers
    folder's length (``max_seq_length``, as :func:`hf_spec` reads it: no longer than the position
    embeddings) and pooling; none for any other source (its options' own defaults hold).

    Only JSON files are read, so that a run's settings are known before a model is built.

    Args:
        path: the run's ``--checkpoint``, or None.
        config: its transformer's ``config.json``, parsed, when the caller has read it already.

    Returns:
        The settings, ``maxlen`` first; empty for a source other than a sentence-transformers folder.

    Raises:
        ConfigError: a sentence-transformers folder whose files are damaged or unsupported.

    Example:
        >>> [s.origin for s in folder_settings("checkpoints/all-MiniLM-L6-v2")]  # doctest: +SKIP
        ['max_seq_length 256', 'pooling mean (last-avg here)']
    """
    if path is None or hugging_face_format(path) != SENTENCE_TRANSFORMERS:
        return ()
    path = os.fspath(path)
    if config is None:
        config = huggingface.read_hf_config(path)
    modules = huggingface.read_sentence_transformers(path)
    maxlen, maxlen_origin = _hf_maxlen(path, config, modules)
    mode = {layer_mode: st_mode for st_mode, layer_mode in huggingface.ST_POOLING.items()}[modules.pooling]
    pooling_origin = f"pooling {mode}" + (f" ({modules.pooling} here)" if mode != modules.pooling else "")
    return FolderSetting("maxlen", maxlen, maxlen_origin), FolderSetting("pooling", modules.pooling, pooling_origin)


def hugging_face_format(path: Any) -> Optional[str]:
    """:data:`SENTENCE_TRANSFORMERS` or :data:`HUGGING_FACE` when ``path`` is such a folder, else None."""
    if path is None or not huggingface.is_hf_folder(path):
        return None
    return SENTENCE_TRANSFORMERS if huggingface.is_sentence_transformers_folder(path) else HUGGING_FACE


def how_to_calibrate(folder: Union[str, os.PathLike[str], None]) -> str:
    """How a match decision gets fitted for the model in ``folder``, as a message's hint that works
    there: ``cosent-tf calibrate`` for a cosent-tf model folder, the one kind of folder it writes
    into; for an export of one (its record names the model folder), calibrating that folder and
    exporting it again; for any other folder (a Hugging Face one), and for a model held in memory
    (``folder`` None), a decision fitted in Python, which the matcher keeps in memory.

    Example:
        >>> how_to_calibrate("runs/bq-cosent/model")
        'cosent-tf calibrate runs/bq-cosent/model LABELLED_FILE'
    """
    if folder is None:
        return "calibrate(texts_a, texts_b, labels, source) on this matcher in Python"
    path = os.fspath(folder)
    if os.path.isfile(os.path.join(path, SPEC_FILE)) or not os.path.isdir(path):
        return f"cosent-tf calibrate {path} LABELLED_FILE"
    record = os.path.join(path, EXPORT_RECORD)
    if os.path.isfile(record):
        try:
            source = read_json(record, "cosent-tf's record of an export").get("model_dir") or "MODEL_DIR"
        except ConfigError:
            source = "MODEL_DIR"
        return (
            f"calibrate the cosent-tf model folder it was exported from (cosent-tf calibrate {source} LABELLED_FILE), "
            "then export it again; the export carries its decision"
        )
    return (
        f"in Python, cosent_tf.load_matcher({path!r}).calibrate(texts_a, texts_b, labels, source), which keeps the "
        "decision in memory (cosent-tf calibrate writes only into a cosent-tf model folder, not into another "
        "program's)"
    )


def read_model_decision(model_dir: str, kind: str, old_threshold: Optional[float] = None) -> Optional[MatchDecision]:
    """The match decision of the model folder ``model_dir``: its ``decision.json``, or for a folder
    written before decisions existed the accuracy threshold its description kept (a decision of
    this model kind's score); None without either.

    Args:
        model_dir: the model folder.
        kind: the kind of model it holds (its ``cosent_model.json``'s ``kind``).
        old_threshold: the ``threshold`` its ``cosent_model.json`` kept, if it was written before 0.6.

    Returns:
        The decision, or None.

    Raises:
        ConfigError: the ``decision.json`` is malformed (a map edited to fall), was fitted for other
            weights than the folder's (:func:`~cosent_tf.calibration.read_decision`), or on the other
            kind of score than this model's.

    Example:
        >>> spec = read_spec("runs/bq-cosent/model")
        >>> read_model_decision("runs/bq-cosent/model", spec.kind, spec.threshold).threshold()
        0.8312
    """
    shipped = read_decision(model_dir)
    scored_by = get_kind(kind).scored_by
    if shipped is not None and shipped.score != scored_by:
        raise ConfigError(
            f"{os.path.join(model_dir, DECISION_FILE)}: was fitted on {shipped.score} scores, but this "
            f"{kind} model scores pairs by {scored_by}; fit one for it: cosent-tf calibrate {model_dir} "
            "LABELLED_FILE"
        )
    return decision_or_threshold(shipped, old_threshold, os.path.join(model_dir, SPEC_FILE), scored_by)
