"""Google-format checkpoint folders as files: their names, their config, where a checkpoint's files
are (and what a folder that holds none is instead), and their arrays read and written as
``{Google checkpoint name: numpy array}``, without Keras.

The Keras 2 engine (:mod:`cosent_tf.models.checkpoints`, which re-exports all of this) and the
Keras 3 route (:mod:`cosent_tf.keras3.backbones`) both read and write these folders; the latter
must not import :mod:`cosent_tf.backend`, which points ``keras`` at tf-keras, so what the two share
lives here. TensorFlow is imported only by the functions that read or write arrays (its checkpoint
format is TensorFlow's); importing TensorFlow changes no Keras.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from .. import huggingface
from ..errors import CheckpointError, ConfigError, where
from ..io import FolderKind, is_inside, json_field, read_json

CONFIG_FILE = "bert_config.json"
CHECKPOINT_PREFIX = "bert_model.ckpt"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_ENTRIES = (CONFIG_FILE, CHECKPOINT_PREFIX + ".*", "checkpoint", VOCAB_FILE)
CHECKPOINT_FOLDER = FolderKind("a checkpoint folder", CHECKPOINT_PREFIX + ".index", CHECKPOINT_ENTRIES)
REQUIRED_CONFIG = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
# A layer outside the transformer (an interaction model's head) is saved as HEAD_SCOPE<layer>/kernel|bias.
HEAD_SCOPE = "cosent/"
# A training run's folder (cosent_tf.training.run_folder) holds this marker, written first, and its
# best model as a model folder under RUN_MODEL_FOLDER; named here, below training, so that a run
# folder given where a checkpoint is expected is recognised.
RUN_MARKER = ".cosent-run"
RUN_MODEL_FOLDER = "model"
# The file that makes a folder a TensorFlow SavedModel (tf.saved_model.SAVED_MODEL_FILENAME_PB).
SAVED_MODEL_FILE = "saved_model.pb"
# TensorFlow's checkpoint readers look a prefix up as a glob pattern first (GetMatchingPaths), and
# then open it as a plain path: a prefix holding these characters cannot be read, escaped or not.
TF_GLOB_CHARACTERS = "*?[\\"
# The 'checkpoint' file of a folder whose one checkpoint is CHECKPOINT_PREFIX (tf.train.latest_checkpoint reads it).
CHECKPOINT_STATE = f'model_checkpoint_path: "{CHECKPOINT_PREFIX}"\nall_model_checkpoint_paths: "{CHECKPOINT_PREFIX}"\n'


def read_config(config_path: str) -> dict:
    """A BERT-style config json as a dict, checked as :func:`check_config` does.

    Args:
        config_path: a Google-format ``bert_config.json``, or a Hugging Face ``config.json``
            (it has ``model_type``), which is translated to the Google format.

    Returns:
        The Google-format config.

    Raises:
        ConfigError: the file is missing, no JSON object, or a size or rate is wrong; the
            message names the file (and line, or key).

    Example:
        >>> config = read_config("cosent_tf/configs/bert-small-random.json")
        >>> config["hidden_size"] > 0
        True
    """
    if not os.path.exists(config_path):
        raise ConfigError(f"{where(config_path)}: cannot read the model config (No such file or directory)")
    return check_config(read_json(config_path, "the model config"), config_path)


def check_config(config: dict, config_path: str) -> dict:
    """The parsed model config ``config`` (of ``config_path``, for messages) in the Google format,
    its sizes (positive integers) and rates (numbers from 0 to 1) checked; a Hugging Face config
    (it has ``model_type``) is translated first. A caller that has read the file once passes its
    content here instead of reading it again."""
    if "model_type" in config:
        config = huggingface.bert_config(config, config_path)
    missing = [k for k in (*REQUIRED_CONFIG, "hidden_act") if k not in config]
    if missing:
        raise ConfigError(f"{config_path}: model config lacks {', '.join(missing)}")
    huggingface.check_bert_values(config, config_path)
    json_field(config, "hidden_act", (str, list), config_path)
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ConfigError(
            f"{config_path}: hidden_size {config['hidden_size']} is not a multiple of "
            f"num_attention_heads {config['num_attention_heads']}"
        )
    return config


def no_pooler_error(shown: str, missing: list) -> CheckpointError:
    """The error of a checkpoint (named ``shown``) that lacks BERT's pooler (the ``missing`` names)
    for a model that reads it, the same on both Kerases: pooling ``pooler`` or ``--head pooler``."""
    return CheckpointError(
        f"{shown}: this checkpoint has no pooler ({', '.join(missing)} missing), so pooling 'pooler' cannot be "
        "used with it (nor --head pooler); choose cls, last-avg, first-last-avg or max (or --head cls)"
    )


def first_line(error: BaseException) -> str:
    """The first line of an error's message (TensorFlow's run on for pages), or its type's name."""
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def write_checkpoint_arrays(prefix: str, arrays: Mapping[str, Any]) -> list:
    """Write ``arrays`` ({Google checkpoint name: array}) as the TensorFlow checkpoint ``prefix``
    (``prefix.index`` and ``prefix.data-*``), each array with its own dtype.

    bert4keras's own writer needs TF1 sessions, so the arrays go through the ``SaveV2`` op, which
    both Kerases' processes can run: it makes no variable and touches no Keras.

    Returns:
        The names written, in order.
    """
    import tensorflow as tf

    names = list(arrays)
    values = [tf.constant(np.asarray(value)) for value in arrays.values()]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=values)
    return names


def write_checkpoint_folder_arrays(
    directory: str, arrays: Mapping[str, Any], config: dict, vocab_path: str | None = None
) -> list:
    """Write a Google-format checkpoint folder's files into the existing (temporary) folder
    ``directory``: ``arrays`` as ``bert_model.ckpt`` (:func:`write_checkpoint_arrays`), the
    ``checkpoint`` file, ``config`` as ``bert_config.json`` and, given ``vocab_path``, the
    vocabulary as ``vocab.txt`` (a Hugging Face ``tokenizer.json``'s tokens written out as one).

    Returns:
        The checkpoint names written, in order.
    """
    names = write_checkpoint_arrays(os.path.join(directory, CHECKPOINT_PREFIX), arrays)
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(CHECKPOINT_STATE)
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    if vocab_path is not None and os.fspath(vocab_path).endswith(".json"):  # a Hugging Face tokenizer.json
        huggingface.write_vocab(os.path.join(directory, VOCAB_FILE), huggingface.read_tokenizer_json(vocab_path)[0])
    elif vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, VOCAB_FILE))
    return names


def read_checkpoint_arrays(prefix: str, shown: str | None = None) -> dict[str, np.ndarray]:
    """Every variable of the TensorFlow checkpoint ``prefix`` as {name: numpy array}.

    Args:
        prefix: the checkpoint's prefix (``.../bert_model.ckpt``), readable by TensorFlow (see
            :func:`cosent_tf.models.checkpoints.readable_prefix` for paths with glob characters).
        shown: what to name in messages instead of ``prefix``.

    Raises:
        CheckpointError: no such checkpoint, or an unreadable (truncated, corrupted) one, naming it.
    """
    import tensorflow as tf

    shown = shown or prefix
    if not os.path.exists(prefix + ".index"):
        raise CheckpointError(f"{where(shown)}: checkpoint not found (no {os.path.basename(prefix)}.index)")
    try:
        reader = tf.train.load_checkpoint(prefix)
        return {name: np.asarray(reader.get_tensor(name)) for name in sorted(reader.get_variable_to_shape_map())}
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(
            f"{shown}: cannot read this checkpoint ({first_line(e)}); it may be truncated or corrupted"
        ) from None


def checkpoint_files(checkpoint: str) -> tuple:
    """(config, checkpoint, vocab) paths of a checkpoint folder, or of the folder of a Google prefix.

    Google format: ``bert_config.json``, the ``bert_model.ckpt`` prefix (or the one given),
    ``vocab.txt``. A Hugging Face (or sentence-transformers) folder: its transformer's
    ``config.json``, the folder itself, and ``vocab.txt`` or else ``tokenizer.json``. A hub
    name (nothing is downloaded) is a CheckpointError that says how to get the folder.
    """
    checkpoint = os.fspath(checkpoint)
    if huggingface.is_hf_folder(checkpoint):
        config = os.path.join(huggingface.transformer_folder(checkpoint), huggingface.CONFIG_FILE)
        return config, checkpoint, huggingface.vocab_path(checkpoint)
    refuse_hub_name(checkpoint)
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    prefix = os.path.join(folder, CHECKPOINT_PREFIX) if os.path.isdir(checkpoint) else checkpoint
    return os.path.join(folder, CONFIG_FILE), prefix, os.path.join(folder, VOCAB_FILE)


def refuse_other_folder(path: Any) -> None:
    """Raise CheckpointError when ``path`` is a folder that holds no checkpoint of any format read
    here, saying what it is instead: a training run's folder (whose ``model`` folder is the
    checkpoint), a SavedModel, or else what was looked for and what the folder holds. A path that
    is no folder, or a folder with a config or a checkpoint's ``.index``, passes: its files are
    checked as they are read.

    Args:
        path: what was given as the checkpoint.

    Raises:
        CheckpointError: ``path`` is a folder of another kind; the message names it.

    Example:
        >>> refuse_other_folder("chinese_L-12_H-768_A-12/")  # doctest: +SKIP
    """
    path = os.fspath(path)
    if not os.path.isdir(path) or huggingface.is_hf_folder(path):
        return
    names = sorted(os.listdir(path))
    run_model = os.path.join(path, RUN_MODEL_FOLDER)
    if RUN_MARKER in names or (
        CONFIG_FILE not in names and os.path.isfile(os.path.join(run_model, CHECKPOINT_PREFIX + ".index"))
    ):
        raise CheckpointError(f"{where(path)}: is a cosent-tf training run folder, not a checkpoint: pass {run_model}")
    if SAVED_MODEL_FILE in names:
        raise CheckpointError(
            f"{where(path)}: is a TensorFlow SavedModel (an export for serving), which cannot be trained or loaded "
            "from: pass the model folder it was exported from"
        )
    if CONFIG_FILE in names or any(name.endswith(".index") for name in names):
        return
    held = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "") if names else "nothing"
    raise CheckpointError(
        f"{where(path)}: no TensorFlow checkpoint or Hugging Face model in this folder: looked for {CONFIG_FILE} "
        f"and {CHECKPOINT_PREFIX}.index "
        f"(a Google-format checkpoint, or a cosent-tf model folder), and {huggingface.CONFIG_FILE} with "
        f"{' or '.join(huggingface.WEIGHT_FILES)} (a Hugging Face or sentence-transformers folder); it holds {held}"
    )


def refuse_hub_name(path: str) -> None:
    """A CheckpointError when ``path`` is no folder here but reads as a Hugging Face hub name."""
    if huggingface.looks_like_hub_name(path):
        raise CheckpointError(
            f"{where(path)}: no such folder here, and it reads as a Hugging Face hub name, but nothing is downloaded: "
            f"download the model where there is internet (huggingface-cli download {path} --local-dir FOLDER), "
            "then pass FOLDER"
        )


def list_checkpoint_variables(checkpoint_prefix: str, shown: Optional[str] = None) -> dict:
    """{name: shape} of a checkpoint; an unreadable one is a CheckpointError naming it (or ``shown``)."""
    import tensorflow as tf

    try:
        return dict(tf.train.list_variables(checkpoint_prefix))
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(
            f"{shown or checkpoint_prefix}: cannot read this checkpoint ({first_line(e)}); "
            "it may be truncated or corrupted"
        ) from None


def resolve_checkpoint(checkpoint_path: str) -> str:
    """Accept a checkpoint prefix (``.../bert_model.ckpt``) or the directory holding it."""
    import tensorflow as tf

    path = os.fspath(checkpoint_path)
    if os.path.isdir(path):
        # latest_checkpoint globs the path (see readable_prefix): such a folder is searched below
        globbed = any(c in os.path.abspath(path) for c in TF_GLOB_CHARACTERS)
        prefix = None if globbed else tf.train.latest_checkpoint(path)
        if prefix is not None and not is_inside(prefix, path):
            raise CheckpointError(
                f"{path}: its 'checkpoint' file names {prefix}, outside this folder; "
                "pass that checkpoint itself, or fix the file"
            )
        if prefix is None:
            candidates = sorted(f[: -len(".index")] for f in os.listdir(path) if f.endswith(".index"))
            if len(candidates) != 1:
                raise CheckpointError(f"{path}: no TensorFlow checkpoint (*.index) in this directory")
            prefix = os.path.join(path, candidates[0])
        return prefix
    if not os.path.exists(path + ".index"):
        raise CheckpointError(f"{where(path)}: checkpoint not found (no {os.path.basename(path)}.index)")
    return path


@dataclasses.dataclass
class CheckpointVariables:
    """A checkpoint's variables under Google names.

    ``where`` names it in messages; ``shapes`` is {name: shape}; ``source`` is what
    bert4keras loads from (a TF checkpoint prefix, or {name: array} of a Hugging Face
    folder); ``unused`` lists a Hugging Face folder's weights no Google name stands for, and
    ``own_names`` gives a Google name's state-dict key, which its messages use.
    """

    where: str
    shapes: dict
    source: object
    unused: list = dataclasses.field(default_factory=list)
    own_names: dict = dataclasses.field(default_factory=dict)

    def own_name(self, name):
        return self.own_names.get(name, name)

    def value(self, name):
        if isinstance(self.source, dict):
            return self.source[name]
        import tensorflow as tf

        return tf.train.load_variable(self.source, name)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every variable as {Google name: numpy array}, read at once (a Google checkpoint's through
        one reader)."""
        if isinstance(self.source, dict):
            return dict(self.source)
        return read_checkpoint_arrays(str(self.source), self.where)


def open_checkpoint(checkpoint_path: str, head_scope: Optional[str] = None) -> CheckpointVariables:
    """The variables of a Google-format checkpoint (prefix or folder) or a Hugging Face folder.

    ``head_scope`` (``cosent/<head layer>``) is the name a Hugging Face ``classifier`` is read as.
    """
    if huggingface.is_hf_folder(checkpoint_path):
        arrays, unused, names = huggingface.google_arrays(checkpoint_path, head_scope)
        shapes = {name: tuple(value.shape) for name, value in arrays.items()}
        return CheckpointVariables(os.fspath(checkpoint_path), shapes, arrays, unused, names)
    refuse_hub_name(checkpoint_path)
    prefix = resolve_checkpoint(checkpoint_path)
    readable, links = readable_prefix(prefix)
    try:
        checkpoint = CheckpointVariables(prefix, list_checkpoint_variables(readable, prefix), readable)
    except BaseException:
        if links is not None:
            shutil.rmtree(links, ignore_errors=True)
        raise
    if links is not None:  # the links live as long as the variables read through them
        weakref.finalize(checkpoint, shutil.rmtree, links, True)
    return checkpoint


def readable_prefix(prefix: str) -> tuple:
    """(a prefix TensorFlow can read the checkpoint ``prefix`` through, the folder of links made
    for it or None). A prefix with glob characters (a run folder ``run[1]/``) is read through
    links to its files from a new folder whose path has none; the caller removes that folder."""
    if not any(c in os.path.abspath(prefix) for c in TF_GLOB_CHARACTERS):
        return prefix, None
    links = tempfile.mkdtemp(prefix="cosent-tf-checkpoint-")
    if any(c in links for c in TF_GLOB_CHARACTERS):
        os.rmdir(links)
        raise CheckpointError(
            f"{prefix}: TensorFlow cannot read a checkpoint whose path holds any of {' '.join(TF_GLOB_CHARACTERS)}, "
            f"and the temporary folder {links} holds one too; rename the folder, or set TMPDIR to another"
        )
    for path in glob.glob(glob.escape(prefix) + ".*"):
        os.symlink(os.path.abspath(path), os.path.join(links, CHECKPOINT_PREFIX + path[len(prefix) :]))
    return os.path.join(links, CHECKPOINT_PREFIX), links
