"""Checkpoints: reading and checking the config, finding, checking and loading the weights,
and writing them.

Two formats are read: Google-format TF checkpoints (``bert_config.json``,
``bert_model.ckpt.*``, ``vocab.txt``), which is also what cosent-tf writes, and Hugging Face
(or sentence-transformers) folders, whose weights :mod:`cosent_tf.huggingface.folders` renames to the
Google names first. Either way the weights arrive as a :class:`CheckpointVariables`.

The folder's file names, its config and its arrays as files are
:mod:`cosent_tf.models.checkpoint_files`' (Keras-free, shared with the Keras 3 route), re-exported here.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Optional, Union

import numpy as np

from .. import huggingface
from ..backend import keras, tf
from ..compat import renamed_keyword
from ..errors import CheckpointError
from ..io import atomic_directory
from .architectures import transformer_class
from .checkpoint_files import (  # noqa: F401  (their home is checkpoint_files, which the Keras 3 route imports)
    CHECKPOINT_ENTRIES,
    CHECKPOINT_FOLDER,
    CHECKPOINT_PREFIX,
    CHECKPOINT_STATE,
    CONFIG_FILE,
    HEAD_SCOPE,
    REQUIRED_CONFIG,
    RUN_MARKER,
    RUN_MODEL_FOLDER,
    SAVED_MODEL_FILE,
    TF_GLOB_CHARACTERS,
    VOCAB_FILE,
    CheckpointVariables,
    check_config,
    checkpoint_files,
    list_checkpoint_variables,
    no_pooler_error,
    open_checkpoint,
    read_config,
    readable_prefix,
    refuse_other_folder,
    resolve_checkpoint,
    write_checkpoint_arrays,
    write_checkpoint_folder_arrays,
)
from .checkpoint_files import first_line as _first_line

logger = logging.getLogger(__name__)


def _mapped_variables(transformer):
    """(checkpoint name, Keras variable) for every variable the built transformer has."""
    mapping = {transformer.prefixed(k): v for k, v in transformer.variable_mapping().items()}
    pairs = []
    for layer_name, names in mapping.items():
        if layer_name in transformer.layers:
            pairs.extend(zip(names, transformer.layers[layer_name].trainable_weights))
    return pairs


def check_checkpoint(transformer, checkpoint: CheckpointVariables) -> None:
    """Raise CheckpointError listing every variable the model needs that is absent or misshapen."""
    available = checkpoint.shapes
    missing, wrong_shape = [], []
    for name, variable in _mapped_variables(transformer):
        if name not in available:
            missing.append(checkpoint.own_name(name))
        elif tuple(available[name]) != tuple(variable.shape):
            wrong_shape.append(f"{checkpoint.own_name(name)} {tuple(available[name])} != {tuple(variable.shape)}")
    problems = []
    if missing and all("pooler" in name for name in missing):
        raise no_pooler_error(checkpoint.where, missing)
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
            f"num_hidden_layers {layers} ({checkpoint.own_name(deeper[0])} ...)"
        )
    if problems:
        raise CheckpointError(f"{checkpoint.where}: does not fit the model config: " + ". ".join(problems))


def check_values(checkpoint: CheckpointVariables, names) -> None:
    """Raise CheckpointError naming the checkpoint and variable unless each of ``names`` holds
    floating-point values, all finite: NaN or infinity would make every output NaN, silently."""
    if isinstance(checkpoint.source, dict):  # a Hugging Face folder's, checked as its files were read
        return
    try:
        reader = tf.train.load_checkpoint(checkpoint.source)
        dtypes = reader.get_variable_to_dtype_map()
        for name in names:
            value = reader.get_tensor(name)
            # bfloat16 arrives as an ml_dtypes type NumPy does not call floating: checked as float32
            value = np.asarray(value, dtype=np.float32) if dtypes[name].is_floating else value
            huggingface.check_weight(value, checkpoint.where, name)
    except (tf.errors.OpError, IndexError) as e:
        raise CheckpointError(
            f"{checkpoint.where}: cannot read this checkpoint's weights ({_first_line(e)}); "
            "it may be truncated or corrupted"
        ) from None


def load_checkpoint(
    transformer: Any, checkpoint_path: Union[str, CheckpointVariables], head_scope: Optional[str] = None
) -> CheckpointVariables:
    """Load a checkpoint into a built bert4keras transformer, checked first.

    Args:
        transformer: the bert4keras ``Transformer`` object, built.
        checkpoint_path: a Google prefix or its folder, a Hugging Face folder, or the
            :class:`CheckpointVariables` already opened (a :class:`~cosent_tf.models.sources.ModelSource`
            hands out its own, so that the checkpoint is opened once).
        head_scope: the name a Hugging Face ``classifier`` is read as (``cosent/<head layer>``).

    Returns:
        The checkpoint's variables (for a head outside the transformer).

    Raises:
        CheckpointError: the checkpoint is unreadable, lacks a variable the model needs, has one
            of another shape or a value that is not finite.

    Example:
        >>> transformer = build_transformer(config_path)  # doctest: +SKIP
        >>> load_checkpoint(transformer, "chinese_L-12_H-768_A-12/")  # doctest: +SKIP
    """
    if isinstance(checkpoint_path, CheckpointVariables):
        checkpoint = checkpoint_path
    else:
        checkpoint = open_checkpoint(checkpoint_path, head_scope)
    check_checkpoint(transformer, checkpoint)
    check_values(checkpoint, [name for name, _ in _mapped_variables(transformer)])
    try:
        transformer.load_weights_from_checkpoint(checkpoint.source)
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(
            f"{checkpoint.where}: cannot read this checkpoint's weights ({_first_line(e)}); "
            "it may be truncated or corrupted"
        ) from None
    if isinstance(checkpoint.source, dict):  # a Hugging Face folder: say what it had that is left out
        needed = {name for name, _ in _mapped_variables(transformer)}
        left_out = [
            checkpoint.own_name(n)
            for n in sorted(checkpoint.shapes)
            if n not in needed and not n.startswith(HEAD_SCOPE)
        ]
        unused = checkpoint.unused + left_out
        if unused:
            logger.info("%s: %d weight(s) not used by this model: %s", checkpoint.where, len(unused), ", ".join(unused))
    return checkpoint


def head_variables(model, layer_name: str) -> list:
    """(checkpoint name, variable) of a layer outside the transformer (an interaction head)."""
    layer = model.get_layer(layer_name)
    return [
        (f"{HEAD_SCOPE}{layer.name}/{weight.name.split('/')[-1].split(':')[0]}", weight) for weight in layer.weights
    ]


def load_head(model, layer_name: str, checkpoint: CheckpointVariables, required: bool = True) -> bool:
    """Fill a head layer from the checkpoint; returns whether it did.

    A head that is absent or of another shape is an error when ``required``; otherwise the
    head keeps its fresh weights (a shape mismatch is logged: another number of labels).
    """
    variables = head_variables(model, layer_name)
    problems = []
    for name, weight in variables:
        if name not in checkpoint.shapes:
            problems.append(f"the interaction head's variable {name} is missing")
        elif tuple(checkpoint.shapes[name]) != tuple(weight.shape):
            problems.append(f"{name} has shape {tuple(checkpoint.shapes[name])}, the model needs {tuple(weight.shape)}")
    if problems and required:
        raise CheckpointError(f"{checkpoint.where}: " + "; ".join(problems))
    if problems:
        if any(name in checkpoint.shapes for name, _ in variables):
            logger.warning("%s: %s; the head starts from random weights", checkpoint.where, "; ".join(problems))
        return False
    check_values(checkpoint, [name for name, _ in variables])
    values = [checkpoint.value(name) for name, _ in variables]
    for (_, weight), value in zip(variables, values):
        weight.assign(np.asarray(value, dtype=weight.dtype.as_numpy_dtype))
    return True


def model_arrays(keras_model, config, architecture: str = "bert") -> dict:
    """{Google checkpoint name: array} of ``keras_model``'s transformer weights (the layers it has)."""
    config = dict(config)
    config.setdefault("max_position", config.get("max_position_embeddings", 512))
    mapping = transformer_class(architecture)(**config).variable_mapping()
    arrays = {}
    layer_names = {layer.name for layer in keras_model.layers}
    for layer_name, checkpoint_names in mapping.items():
        if layer_name not in layer_names:
            continue
        weights = keras_model.get_layer(layer_name).trainable_weights
        for name, weight in zip(checkpoint_names, weights):
            value = weight.numpy()
            arrays[name] = value.T if name == "cls/seq_relationship/output_weights" else value
    return arrays


def save_checkpoint(
    model: keras.Model,
    directory: str,
    config,
    architecture: str = "bert",
    vocab_path: Optional[str] = None,
    overwrite: bool = False,
    model_type: Optional[str] = None,
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
    architecture = renamed_keyword("model_type", "architecture", model_type, architecture)
    with atomic_directory(directory, CHECKPOINT_FOLDER, overwrite) as tmp:
        return write_checkpoint_folder(model, tmp, config, architecture, vocab_path)


def write_checkpoint_folder(model, directory, config, architecture="bert", vocab_path=None, extra=None):
    """:func:`save_checkpoint` into an existing (temporary) folder, not atomically."""
    if not isinstance(config, dict):
        config = read_config(config)
    arrays = {**model_arrays(model, config, architecture), **(extra or {})}
    return write_checkpoint_folder_arrays(directory, arrays, config, vocab_path)
