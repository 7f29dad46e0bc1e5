"""Where a model comes from, resolved once: the config, the vocabulary, the tokenizer settings,
the defaults a source implies and its weights, read from one :class:`ModelSource`.

A source is what a user points at: a Google-format checkpoint (``bert_config.json``,
``bert_model.ckpt.*``, ``vocab.txt``), a Hugging Face or sentence-transformers folder, a
cosent-tf model folder, or nothing (the bundled small random config). :func:`open_source`
tells them apart, reads and checks the config once, and hands the one object to everything
that needs it: :class:`~cosent_tf.models.tokenization.SentenceTokenizer`, the builders in
:mod:`cosent_tf.models.builders`, :func:`~cosent_tf.models.checkpoints.load_checkpoint` and
:func:`~cosent_tf.inference.model_dir.load_model_dir`. The vocabulary and the checkpoint's
variable list are read on first use and kept, so a caller holding a source never reads a file
twice.

Outside :mod:`cosent_tf.huggingface`, only this module and :func:`cosent_tf.models.spec.read_spec`
(which it calls) ask what kind of folder a path is (the checkpoint finders and the weights reader of
:mod:`cosent_tf.models.checkpoint_files` aside). Importing it imports no Keras and no TensorFlow (both
Kerases' engines open their sources here, and read their weights through :meth:`ModelSource.variables`);
reading a Google checkpoint's weights imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Any, Optional

from .. import huggingface
from ..errors import ConfigError
from ..io import read_json
from .checkpoint_files import (
    CheckpointVariables,
    check_config,
    checkpoint_files,
    open_checkpoint,
    read_config,
    refuse_other_folder,
)
from .families import get_architecture
from .spec import (
    HUGGING_FACE,
    SENTENCE_TRANSFORMERS,
    SPEC_FILE,
    FolderSetting,
    ModelSpec,
    folder_settings,
    hf_spec,
    hugging_face_format,
    read_spec,
)
from .tokenization import load_vocab

# The config a run without --checkpoint builds its random model from (it ships in the package).
SMALL_RANDOM_CONFIG = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "bert-small-random.json")

# What a source is, as ModelSource.format names it.
# (The two Hugging Face formats are named in cosent_tf.models.spec, which tells them apart.)
GOOGLE, COSENT_MODEL, CONFIG_ONLY = "google", "cosent-model", "config"
FORMATS = (GOOGLE, HUGGING_FACE, SENTENCE_TRANSFORMERS, COSENT_MODEL, CONFIG_ONLY)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """One model's origin, resolved once (see :func:`open_source`).

    Args:
        path: what the user gave (a checkpoint prefix or folder, a model folder), or None.
        format: one of :data:`FORMATS`.
        config_path: the config file read (for messages and for writing it out again).
        config: the Google-format config, checked (sizes, rates, ``max_position_embeddings``).
        vocab_path: the vocabulary file (``vocab.txt`` or a ``tokenizer.json``), or None when
            the source brings none (the bundled config).
        checkpoint: what the weights are read from (a Google prefix or a Hugging Face folder),
            or None: random weights.
        do_lower_case: whether the tokenizer lower-cases: a Hugging Face folder's tokenizer
            setting, a model folder's recorded one, else True (BERT's Chinese vocabularies).
        settings: what a sentence-transformers folder sets that a run from it takes as the
            defaults of its options (its length and pooling: :func:`~cosent_tf.models.spec.folder_settings`);
            empty for any other source.
        head_input: ``pooler`` for a ``*ForSequenceClassification`` folder, else None.
        spec: the :class:`~cosent_tf.models.spec.ModelSpec` a model folder records, or the one
            a Hugging Face folder is used as; None for a Google checkpoint or a bare config.

    Example:
        >>> source = open_source(None)
        >>> source.format, source.checkpoint
        ('config', None)
    """

    path: Optional[str]
    format: str
    config_path: str
    config: dict
    vocab_path: Optional[str] = None
    checkpoint: Optional[str] = None
    do_lower_case: bool = True
    settings: tuple[FolderSetting, ...] = ()
    head_input: Optional[str] = None
    spec: Optional[ModelSpec] = None
    # What is read on first use and kept: "vocab" (the token list) and the opened checkpoint.
    _read: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def vocab_size(self) -> int:
        """The config's ``vocab_size``."""
        return int(self.config["vocab_size"])

    @property
    def max_positions(self) -> int:
        """The position embeddings' count (``max_position_embeddings``, 512 when absent)."""
        return int(self.config.get("max_position_embeddings", 512))

    @property
    def random_weights(self) -> bool:
        """Whether a model built from this source starts from random weights: no checkpoint, or
        a model folder that was itself trained from random weights."""
        if self.checkpoint is None:
            return True
        return bool(self.spec is not None and self.format == COSENT_MODEL and self.spec.source.get("random_weights"))

    def vocab(self) -> list:
        """The vocabulary's tokens in id order, read on the first call only.

        Raises:
            ConfigError: the source has no vocabulary.
            DataError: the file cannot be read, is empty or repeats a token.
        """
        if "vocab" not in self._read:
            if self.vocab_path is None:
                raise ConfigError(f"{self.config_path}: no vocabulary given with this model config; pass one")
            self._read["vocab"] = load_vocab(self.vocab_path)
        return list(self._read["vocab"])

    def check_vocab(self) -> None:
        """Raise ConfigError unless the config's ``vocab_size`` is the vocabulary's length."""
        actual = len(self.vocab())
        if self.vocab_size != actual:
            raise ConfigError(
                f"{self.config_path}: vocab_size is {self.vocab_size} but {self.vocab_path} has {actual} tokens; "
                "the config and the vocabulary must come from the same checkpoint"
            )

    def check_maxlen(self, architecture: str, maxlen: int) -> None:
        """Raise ConfigError if ``maxlen`` tokens do not fit the position embeddings of
        ``architecture`` (one with learned positions)."""
        if get_architecture(architecture).learned_positions and maxlen > self.max_positions:
            raise ConfigError(
                f"{self.config_path}: maxlen {maxlen} is longer than the model's {self.max_positions} position "
                f"embeddings (max_position_embeddings); use --maxlen {self.max_positions} or less"
            )

    @property
    def weights_in_memory(self) -> bool:
        """Whether the weights are read into memory whole when first used (a Hugging Face or
        sentence-transformers folder's), rather than listed first and read by name (a Google
        checkpoint's, or none)."""
        return self.format in (HUGGING_FACE, SENTENCE_TRANSFORMERS)

    def weight_files(self) -> list:
        """The files the weights are read from: a Google checkpoint's ``.index`` and data files,
        or the weights file(s) of a Hugging Face folder; none without a checkpoint."""
        if self.checkpoint is None:
            return []
        if self.weights_in_memory:
            folder = huggingface.transformer_folder(self.checkpoint)
            single, index, torch_file = (os.path.join(folder, name) for name in huggingface.WEIGHT_FILES)
            if os.path.isfile(single):
                return [single]
            if os.path.isfile(index):
                return [index, *sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))]
            return [torch_file]
        prefix = checkpoint_files(self.checkpoint)[1]
        return sorted(p for p in glob.glob(glob.escape(prefix) + ".*") if os.path.isfile(p))

    def variables(self, head_scope: Optional[str] = None) -> Optional[CheckpointVariables]:
        """The checkpoint's variables, opened on the first call only (None without a checkpoint).

        ``head_scope`` is the name a Hugging Face ``classifier`` is read as (it changes which
        arrays a Hugging Face folder gives; a Google checkpoint's names are its own)."""
        if self.checkpoint is None:
            return None
        key = ("variables", head_scope if self.weights_in_memory else None)
        if key not in self._read:
            self._read[key] = open_checkpoint(self.checkpoint, head_scope)
        return self._read[key]


def open_source(
    checkpoint: Optional[str] = None, config: Optional[str] = None, vocab: Optional[str] = None
) -> ModelSource:
    """Resolve what a model is built from, reading and checking its config once.

    Args:
        checkpoint: a Google-format checkpoint prefix or its folder, a Hugging Face or
            sentence-transformers folder, or a cosent-tf model folder; None for random weights.
        config: a config file that replaces the checkpoint's (None: the checkpoint's, or the
            bundled small random config without a checkpoint).
        vocab: a vocabulary that replaces the checkpoint's.

    Returns:
        The :class:`ModelSource`.

    Raises:
        ConfigError: the config is unreadable or wrong, or a Hugging Face folder cannot be
            used (its message names the file).
        CheckpointError: a hub name was given (nothing is downloaded), or a folder that holds no
            checkpoint (a training run's folder, a SavedModel, another folder): the message says
            what it is and what to pass.

    Example:
        >>> source = open_source(None, vocab="vocab.txt")  # doctest: +SKIP
        >>> tokenizer = SentenceTokenizer(source, maxlen=64)  # doctest: +SKIP
        >>> encoder = build_encoder(source)  # doctest: +SKIP
    """
    if checkpoint is None:
        config_path = os.fspath(config) if config is not None else SMALL_RANDOM_CONFIG
        return ModelSource(None, CONFIG_ONLY, config_path, read_config(config_path), _path(vocab))
    checkpoint = os.fspath(checkpoint)
    if hugging_face_format(checkpoint) is not None:
        return _hugging_face_source(checkpoint, config, vocab)
    refuse_other_folder(checkpoint)  # before its files are looked for one by one
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    spec = read_spec(folder) if os.path.exists(os.path.join(folder, SPEC_FILE)) else None
    return _checkpoint_source(checkpoint, config, vocab, spec)


def open_model_folder(directory: Any) -> ModelSource:
    """The source of a cosent-tf model folder, or of a Hugging Face folder used as one; what is
    not such a folder is the error :func:`~cosent_tf.models.spec.read_spec` gives.

    Args:
        directory: the folder.

    Returns:
        The :class:`ModelSource`, its ``spec`` set.

    Raises:
        ConfigError: no model folder, or one whose files are wrong (naming it).

    Example:
        >>> open_model_folder("runs/cosent-STS-B/model").spec.kind  # doctest: +SKIP
        'feature'
    """
    directory = os.fspath(directory)
    if not os.path.exists(os.path.join(directory, SPEC_FILE)) and hugging_face_format(directory) is not None:
        return _hugging_face_source(directory, None, None)
    spec = read_spec(directory)
    return _checkpoint_source(directory, None, None, spec, weights_from_prefix=True)


def _checkpoint_source(
    checkpoint: str,
    config: Optional[str],
    vocab: Optional[str],
    spec: Optional[ModelSpec],
    weights_from_prefix: bool = False,
) -> ModelSource:
    """The source of a Google-format checkpoint, or of a model folder when ``spec`` is its; its
    weights are read from the path given, or (``weights_from_prefix``) the folder's own prefix."""
    own_config, prefix, own_vocab = checkpoint_files(checkpoint)
    config_path = os.fspath(config) if config is not None else own_config
    return ModelSource(
        checkpoint,
        COSENT_MODEL if spec is not None else GOOGLE,
        config_path,
        read_config(config_path),
        _path(vocab) or own_vocab,
        prefix if weights_from_prefix else checkpoint,
        do_lower_case=spec.do_lower_case if spec is not None else True,
        spec=spec,
    )


def _path(path: Any) -> Optional[str]:
    return None if path is None else os.fspath(path)


def _hugging_face_source(folder: str, config: Optional[str], vocab: Optional[str]) -> ModelSource:
    config_path = os.path.join(huggingface.transformer_folder(folder), huggingface.CONFIG_FILE)
    vocab_path = _path(vocab) or huggingface.vocab_path(folder)
    raw = read_json(config_path, "the model config")
    spec = hf_spec(folder, raw)  # also refuses a folder that cannot be built, before anything else
    if config is not None:
        config_path, google_config = os.fspath(config), read_config(config)
    else:
        google_config = check_config(raw, config_path)
    st_folder = hugging_face_format(folder) == SENTENCE_TRANSFORMERS
    return ModelSource(
        folder,
        SENTENCE_TRANSFORMERS if st_folder else HUGGING_FACE,
        config_path,
        google_config,
        vocab_path,
        folder,
        do_lower_case=spec.do_lower_case,
        settings=folder_settings(folder, raw),
        head_input=spec.head_input,
        spec=spec,
    )
