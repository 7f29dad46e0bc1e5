"""A Hugging Face folder's weight files read as NumPy arrays.

``model.safetensors`` (single or sharded through ``model.safetensors.index.json``) is read with
the ``safetensors`` package's NumPy API, without torch; ``pytorch_model.bin`` needs torch.
Writing is :func:`cosent_tf.huggingface.folders.write_hf_folder`. Keras-free.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import CheckpointError, ConfigError
from ..io import is_inside, json_field, read_json
from .folders import WEIGHT_FILES, PathLike, transformer_folder


def read_hf_weights(folder: PathLike) -> dict[str, np.ndarray]:
    """A Hugging Face folder's weights.

    Args:
        folder: a Hugging Face or sentence-transformers folder.

    Returns:
        {state-dict key: array}: floating-point weights as float32, integer buffers as they are.

    Raises:
        CheckpointError: no weight file, an unreadable one, or ``pytorch_model.bin`` without torch
            (``pip install cosent-tf[torch]``).
        ConfigError: a safetensors index naming files outside the folder.

    Example:
        >>> read_hf_weights("bge-small-zh")["pooler.dense.bias"].shape  # doctest: +SKIP
        (512,)
    """
    return {name: value for name, (_, value) in weight_files(folder).items()}


def weight_files(folder: PathLike) -> dict[str, tuple[str, np.ndarray]]:
    """A Hugging Face folder's weights with the file each one is in (for messages).

    Args:
        folder: a Hugging Face or sentence-transformers folder.

    Returns:
        {state-dict key: (the file it is in, its array)}.

    Raises:
        CheckpointError: as :func:`read_hf_weights`.
        ConfigError: as :func:`read_hf_weights`.

    Example:
        >>> path, value = weight_files("bge-small-zh")["pooler.dense.bias"]  # doctest: +SKIP
    """
    folder = transformer_folder(folder)
    single, index, torch_file = (os.path.join(folder, name) for name in WEIGHT_FILES)
    if os.path.isfile(single):
        return _read_safetensors([single])
    if os.path.isfile(index):
        return _read_safetensors(_shards(index, folder))
    if os.path.isfile(torch_file):
        return _read_torch(torch_file)
    raise CheckpointError(f"{folder}: no weights ({', '.join(WEIGHT_FILES)})")


def _shards(index: str, folder: str) -> list[str]:
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


def _read_safetensors(paths: list[str]) -> dict[str, tuple[str, np.ndarray]]:
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


def _read_torch(path: str) -> dict[str, tuple[str, np.ndarray]]:
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


def _float32(value: Any) -> np.ndarray:
    """Floating-point weights (float16 or float64 too) as float32; integer buffers as they are."""
    return np.asarray(value, dtype=np.float32) if np.issubdtype(value.dtype, np.floating) else value


def check_weight(value: np.ndarray, path: PathLike, name: str) -> None:
    """Check that a tensor read from a weight file can be a trained weight.

    NaN or infinity would make every vector NaN, silently; an integer tensor is no weight.

    Args:
        value: the tensor.
        path: the file it came from, for messages.
        name: its name there.

    Raises:
        CheckpointError: naming the file and tensor, unless ``value`` holds floating-point
            numbers, every one finite.

    Example:
        >>> check_weight(np.zeros(3, np.float32), "model.safetensors", "pooler.dense.bias")
    """
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
