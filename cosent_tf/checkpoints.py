"""Google-format TF checkpoints (``bert_config.json``, ``bert_model.ckpt.*``, ``vocab.txt``):
reading and checking the config, finding, checking and loading the weights, and writing them."""

import json
import os
import re
import shutil

from .backend import keras, tf, transformer_class
from .errors import CheckpointError, ConfigError
from .io import FolderKind, atomic_directory, is_inside

CONFIG_FILE = "bert_config.json"
CHECKPOINT_PREFIX = "bert_model.ckpt"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_ENTRIES = (CONFIG_FILE, CHECKPOINT_PREFIX + ".*", "checkpoint", VOCAB_FILE)
CHECKPOINT_FOLDER = FolderKind("a checkpoint folder", CHECKPOINT_PREFIX + ".index", CHECKPOINT_ENTRIES)
REQUIRED_CONFIG = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def read_config(config_path: str) -> dict:
    """A BERT-style config json as a dict, its sizes checked; errors name the file (and line)."""
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except OSError as e:
        raise ConfigError(f"{config_path}: cannot read the model config ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{config_path}, line {e.lineno}: not valid JSON ({e.msg})") from e
    missing = [k for k in (*REQUIRED_CONFIG, "hidden_act") if k not in config]
    if missing:
        raise ConfigError(f"{config_path}: model config lacks {', '.join(missing)}")
    for key in REQUIRED_CONFIG:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{config_path}: {key} must be a positive integer, got {value!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ConfigError(
            f"{config_path}: hidden_size {config['hidden_size']} is not a multiple of "
            f"num_attention_heads {config['num_attention_heads']}"
        )
    return config


def list_checkpoint_variables(checkpoint_prefix: str) -> dict:
    """{name: shape} of a checkpoint; an unreadable one is a CheckpointError naming it."""
    try:
        return dict(tf.train.list_variables(checkpoint_prefix))
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(
            f"{checkpoint_prefix}: cannot read this checkpoint ({_first_line(e)}); it may be truncated or corrupted"
        ) from None


def _first_line(error):
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def resolve_checkpoint(checkpoint_path: str) -> str:
    """Accept a checkpoint prefix (``.../bert_model.ckpt``) or the directory holding it."""
    path = os.fspath(checkpoint_path)
    if os.path.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
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
        raise CheckpointError(f"{path}: checkpoint not found (no {os.path.basename(path)}.index)")
    return path


def _mapped_variables(transformer):
    """(checkpoint name, Keras variable) for every variable the built transformer has."""
    mapping = {transformer.prefixed(k): v for k, v in transformer.variable_mapping().items()}
    pairs = []
    for layer_name, names in mapping.items():
        if layer_name in transformer.layers:
            pairs.extend(zip(names, transformer.layers[layer_name].trainable_weights))
    return pairs


def check_checkpoint(transformer, checkpoint_prefix: str) -> None:
    """Raise CheckpointError listing every variable the model needs that is absent or misshapen."""
    available = list_checkpoint_variables(checkpoint_prefix)
    missing, wrong_shape = [], []
    for name, variable in _mapped_variables(transformer):
        if name not in available:
            missing.append(name)
        elif tuple(available[name]) != tuple(variable.shape):
            wrong_shape.append(f"{name} {tuple(available[name])} != {tuple(variable.shape)}")
    problems = []
    if missing and all("pooler" in name for name in missing):
        raise CheckpointError(
            f"{checkpoint_prefix}: this checkpoint has no pooler ({', '.join(missing)} missing), so pooling "
            "'pooler' cannot be used with it; choose cls, last-avg, first-last-avg or max"
        )
    if missing:
        problems.append(
            f"missing {len(missing)} variable(s): {', '.join(missing[:10])}" + (" ..." if len(missing) > 10 else "")
        )
    if wrong_shape:
        problems.append("shape (checkpoint != config) differs for " + "; ".join(wrong_shape[:10]))
    layers = getattr(transformer, "num_hidden_layers", None)
    deeper = sorted(
        name
        for name in available
        if layers is not None and (match := re.search(r"/encoder/layer_(\d+)/", name)) and int(match.group(1)) >= layers
    )
    if deeper:
        problems.append(
            f"the checkpoint has {len(deeper)} variable(s) of layers beyond the config's "
            f"num_hidden_layers {layers} ({deeper[0]} ...)"
        )
    if problems:
        raise CheckpointError(f"{checkpoint_prefix}: does not fit the model config: " + ". ".join(problems))


def load_checkpoint(transformer, checkpoint_path: str) -> str:
    """Load a checkpoint (prefix or folder) into a built bert4keras transformer, checked first.

    Returns the checkpoint prefix loaded.
    """
    prefix = resolve_checkpoint(checkpoint_path)
    check_checkpoint(transformer, prefix)
    try:
        transformer.load_weights_from_checkpoint(prefix)
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(
            f"{prefix}: cannot read this checkpoint's weights ({_first_line(e)}); it may be truncated or corrupted"
        ) from None
    return prefix


def _write_variables(keras_model, config, architecture, prefix, extra=None):
    """Write ``keras_model``'s transformer weights under Google checkpoint names to ``prefix``.

    bert4keras's own writer needs TF1 sessions, so the variables go through the ``SaveV2``
    op. ``extra`` ({name: array}) adds variables of layers outside the transformer;
    loaders that do not know them ignore them.
    """
    config = dict(config)
    config.setdefault("max_position", config.get("max_position_embeddings", 512))
    mapping = transformer_class(architecture)(**config).variable_mapping()
    names, values = [], []
    layer_names = {layer.name for layer in keras_model.layers}
    for layer_name, checkpoint_names in mapping.items():
        if layer_name not in layer_names:
            continue
        weights = keras_model.get_layer(layer_name).trainable_weights
        for name, weight in zip(checkpoint_names, weights):
            value = weight.numpy()
            if name == "cls/seq_relationship/output_weights":
                value = value.T
            names.append(name)
            values.append(tf.constant(value))
    for name, value in (extra or {}).items():
        names.append(name)
        values.append(tf.constant(value))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=values)
    return names


def save_checkpoint(
    model: keras.Model,
    directory: str,
    config,
    architecture: str = "bert",
    vocab_path: str = None,
    overwrite: bool = False,
    model_type: str = None,
) -> list:
    """Write ``model``'s transformer weights as a Google-format checkpoint folder.

    Args:
        model: a Keras model holding the transformer's layers (from :func:`build_encoder`
            or :func:`build_interaction_model`); heads outside the transformer are not saved.
        directory: the folder to create, atomically: it is complete or untouched. An
            existing one must be empty, or a checkpoint folder and ``overwrite`` true.
        config: the BERT config dict, or the path of its json file.
        architecture: the one the transformer was built as (it fixes the variable names).
        vocab_path: copied in as ``vocab.txt`` when given.
        model_type: deprecated name of ``architecture``.

    Returns the list of checkpoint variable names written. The folder loads back with
    ``build_encoder(dir/bert_config.json, dir/bert_model.ckpt)`` and with bert4keras.
    """
    architecture = model_type or architecture
    with atomic_directory(directory, CHECKPOINT_FOLDER, overwrite) as tmp:
        return write_checkpoint_folder(model, tmp, config, architecture, vocab_path)


def write_checkpoint_folder(model, directory, config, architecture="bert", vocab_path=None, extra=None):
    """:func:`save_checkpoint` into an existing (temporary) folder, not atomically."""
    if not isinstance(config, dict):
        config = read_config(config)
    names = _write_variables(model, config, architecture, os.path.join(directory, CHECKPOINT_PREFIX), extra)
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{CHECKPOINT_PREFIX}"\nall_model_checkpoint_paths: "{CHECKPOINT_PREFIX}"\n')
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, VOCAB_FILE))
    return names


def checkpoint_files(directory: str) -> tuple:
    """(config, checkpoint prefix, vocab) paths of a Google-format checkpoint folder."""
    return (
        os.path.join(directory, CONFIG_FILE),
        os.path.join(directory, CHECKPOINT_PREFIX),
        os.path.join(directory, VOCAB_FILE),
    )
