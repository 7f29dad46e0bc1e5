"""Google-format TF checkpoints (``bert_config.json``, ``bert_model.ckpt.*``, ``vocab.txt``)."""
import json
import os
import shutil

from . import backend
from .io import FolderKind, atomic_directory

CONFIG_FILE = "bert_config.json"
CHECKPOINT_PREFIX = "bert_model.ckpt"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_ENTRIES = (CONFIG_FILE, CHECKPOINT_PREFIX + ".*", "checkpoint", VOCAB_FILE)
CHECKPOINT_FOLDER = FolderKind("a checkpoint folder", CHECKPOINT_PREFIX + ".index", CHECKPOINT_ENTRIES)


def save_checkpoint(model, directory, config, model_type="bert", vocab_path=None, overwrite=False):
    """Write ``model``'s transformer weights as a Google-format checkpoint folder.

    Args:
        model: a Keras model holding the transformer's layers (from :func:`build_encoder`
            or :func:`build_interaction_model`); heads outside the transformer are not saved.
        directory: the folder to create, atomically: it is complete or untouched. An
            existing one must be empty, or a checkpoint folder and ``overwrite`` true.
        config: the BERT config dict, or the path of its json file.
        model_type: the ``model`` the transformer was built as (it fixes the variable names).
        vocab_path: copied in as ``vocab.txt`` when given.

    Returns the list of checkpoint variable names written. The folder loads back with
    ``build_encoder(dir/bert_config.json, dir/bert_model.ckpt)`` and with bert4keras.
    """
    with atomic_directory(directory, CHECKPOINT_FOLDER, overwrite) as tmp:
        return write_checkpoint_folder(model, tmp, config, model_type, vocab_path)


def write_checkpoint_folder(model, directory, config, model_type="bert", vocab_path=None, extra=None):
    """:func:`save_checkpoint` into an existing (temporary) folder, not atomically."""
    if not isinstance(config, dict):
        config = backend.read_config(config)
    names = backend.write_checkpoint_variables(
        model, config, model_type, os.path.join(directory, CHECKPOINT_PREFIX), extra)
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{CHECKPOINT_PREFIX}"\n'
                f'all_model_checkpoint_paths: "{CHECKPOINT_PREFIX}"\n')
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, VOCAB_FILE))
    return names


def checkpoint_files(directory):
    """(config, checkpoint prefix, vocab) paths of a Google-format checkpoint folder."""
    return (os.path.join(directory, CONFIG_FILE), os.path.join(directory, CHECKPOINT_PREFIX),
            os.path.join(directory, VOCAB_FILE))
