"""Keras models over bert4keras: the transformer, the encoder and interaction heads, checkpoints and tokenisation."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "INTERACTION_HEADS": ".builders",
    "HEAD_INPUTS": ".builders",
    "head_layer_name": ".builders",
    "build_transformer": ".builders",
    "check_maxlen": ".builders",
    "build_encoder": ".builders",
    "build_interaction_model": ".builders",
    "first_layer_output": ".builders",
    "first_token_output": ".builders",
    "CONFIG_FILE": ".checkpoints",
    "CHECKPOINT_PREFIX": ".checkpoints",
    "VOCAB_FILE": ".checkpoints",
    "CHECKPOINT_ENTRIES": ".checkpoints",
    "CHECKPOINT_FOLDER": ".checkpoints",
    "REQUIRED_CONFIG": ".checkpoints",
    "HEAD_SCOPE": ".checkpoints",
    "read_config": ".checkpoints",
    "list_checkpoint_variables": ".checkpoints",
    "resolve_checkpoint": ".checkpoints",
    "CheckpointVariables": ".checkpoints",
    "open_checkpoint": ".checkpoints",
    "TF_GLOB_CHARACTERS": ".checkpoints",
    "readable_prefix": ".checkpoints",
    "check_checkpoint": ".checkpoints",
    "check_values": ".checkpoints",
    "load_checkpoint": ".checkpoints",
    "head_variables": ".checkpoints",
    "load_head": ".checkpoints",
    "model_arrays": ".checkpoints",
    "save_checkpoint": ".checkpoints",
    "write_checkpoint_folder": ".checkpoints",
    "checkpoint_files": ".checkpoints",
    "Architecture": ".architectures",
    "ARCHITECTURES": ".architectures",
    "get_architecture": ".architectures",
    "IndependentTruncatedNormal": ".architectures",
    "transformer_class": ".architectures",
    "TokenDense": ".architectures",
    "install_token_dense": ".architectures",
    "load_vocab": ".tokenization",
    "check_vocab_size": ".tokenization",
    "Truncation": ".tokenization",
    "SentenceTokenizer": ".tokenization",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
