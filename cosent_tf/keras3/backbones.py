"""keras-hub backbones with cosent-tf's weights: BERT (and RoBERTa-wwm) on ``BertBackbone``, ALBERT
on ``AlbertBackbone``, read through this project's own readers.

Every source is opened as the Keras 2 engine opens it (:func:`cosent_tf.models.sources.open_source`)
and becomes ``{Google checkpoint name: array}`` first (:func:`source_arrays`): a Hugging Face or
sentence-transformers folder through :func:`cosent_tf.huggingface.google_arrays` (the one Hugging
Face <-> Google name table), a Google-format checkpoint (a folder or a prefix) and a cosent-tf model
folder (one is a Google checkpoint with ``cosent_model.json``) through
:func:`cosent_tf.models.checkpoint_files.read_checkpoint_arrays`. One table per family
(:func:`weight_table`) then pairs each Google name with a backbone variable, both ways:
:func:`load_arrays` fills a backbone, :func:`google_arrays` reads one back (for saving).

keras-hub builds BERT's and ALBERT's blocks with the tanh GELU and layer norm epsilon 1e-12 whatever
the checkpoint's config says; the backbones here (:class:`GoogleBertBackbone`,
:class:`GoogleAlbertBackbone`) follow the config's ``hidden_act`` and the epsilons bert4keras builds
with, so that a folder encodes as on the Keras 2 engine (within float32 rounding).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from typing import Any, Callable, Optional

import numpy as np

from .. import huggingface
from ..errors import CheckpointError, ConfigError, where
from ..models.checkpoint_files import check_config
from ..models.sources import COSENT_MODEL, ModelSource, open_source
from ..models.spec import SPEC_FILE, hugging_face_format, warn_if_random_weights
from .runtime import checked_keras, imported_quietly, keras_hub_backbone

keras: Any = checked_keras()
keras_hub: Any = imported_quietly("keras_hub")  # after the Keras check: keras-hub imports keras

logger = logging.getLogger(__name__)

# The block's Hugging Face / Google activation names -> whether the GELU is the exact (erf) one.
# bert4keras's "gelu" is the erf GELU (bert4keras.backend sets it so), as Google's BERT.
EXACT_GELU = {"gelu": True, "gelu_erf": True, "gelu_tanh": False}
ACTIVATIONS = (*EXACT_GELU, "relu")
# The layer norm epsilons bert4keras builds with: 1e-12 for BERT's norms and ALBERT's embedding
# norm, Keras's default (1e-7, tf-keras's backend epsilon) for ALBERT's block norms, which it builds
# without one.
BERT_EPSILON = 1e-12
ALBERT_BLOCK_EPSILON = 1e-7
ALBERT_SCOPE = "bert/encoder/transformer/group_0/inner_group_0/"
POOLER_NAMES = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


def exact_gelu(x: Any) -> Any:
    """GELU with the normal CDF through erf, as bert4keras's ``gelu`` (``gelu_erf``)."""
    return keras.activations.gelu(x, approximate=False)


def tanh_gelu(x: Any) -> Any:
    """GELU's tanh approximation, as bert4keras's ``gelu_tanh`` (and keras-hub's blocks)."""
    return keras.activations.gelu(x, approximate=True)


def _activation(name: str) -> Callable[[Any], Any]:
    if name == "relu":
        return keras.activations.relu
    return exact_gelu if EXACT_GELU[name] else tanh_gelu


def _follow_config(blocks: list, hidden_act: str, epsilon: float, attention_dropout: Optional[float]) -> None:
    """Make keras-hub's built transformer blocks compute what the config says (their Dense layers
    read the activation, their norms the epsilon, when called)."""
    activation = _activation(hidden_act)
    for block in blocks:
        block.activation = activation
        block._feedforward_intermediate_dense.activation = activation
        block.layer_norm_epsilon = epsilon
        block._self_attention_layer_norm.epsilon = epsilon
        block._feedforward_layer_norm.epsilon = epsilon
        if attention_dropout is not None:
            block._self_attention_layer._dropout_layer.rate = attention_dropout


@keras.saving.register_keras_serializable(package="cosent_tf")
class GoogleBertBackbone(keras_hub.models.BertBackbone):
    """keras-hub's ``BertBackbone`` computing as a Google-format BERT config says.

    Args:
        hidden_act: the blocks' activation (:data:`ACTIVATIONS`: ``gelu`` is the exact GELU).
        attention_dropout: the attention probabilities' dropout (``attention_probs_dropout_prob``);
            None: ``dropout``, as keras-hub does.
        **kwargs: ``BertBackbone``'s arguments.
    """

    def __init__(self, *args: Any, hidden_act: str = "gelu", attention_dropout: Optional[float] = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hidden_act = hidden_act
        self.attention_dropout = attention_dropout
        _follow_config(self.transformer_layers, hidden_act, BERT_EPSILON, attention_dropout)

    def get_config(self) -> dict:
        return {**super().get_config(), "hidden_act": self.hidden_act, "attention_dropout": self.attention_dropout}


@keras.saving.register_keras_serializable(package="cosent_tf")
class GoogleAlbertBackbone(keras_hub.models.AlbertBackbone):
    """keras-hub's ``AlbertBackbone`` computing as a Google-format ALBERT config says, with the
    block norms' epsilon of bert4keras's ALBERT (:data:`ALBERT_BLOCK_EPSILON`).

    Args:
        hidden_act: the block's activation (:data:`ACTIVATIONS`).
        attention_dropout: as :class:`GoogleBertBackbone`'s.
        **kwargs: ``AlbertBackbone``'s arguments.
    """

    def __init__(self, *args: Any, hidden_act: str = "gelu", attention_dropout: Optional[float] = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hidden_act = hidden_act
        self.attention_dropout = attention_dropout
        blocks = [block for group in self.transformer_layers for block in group]
        _follow_config(blocks, hidden_act, ALBERT_BLOCK_EPSILON, attention_dropout)
        if self.embedding_dim == self.hidden_dim:  # bert4keras has no mapping then: an identity, kept so
            projection = self.embeddings_projection
            projection.kernel.assign(np.eye(self.hidden_dim, dtype=np.float32))
            projection.bias.assign(np.zeros(self.hidden_dim, dtype=np.float32))
            projection.trainable = False

    def get_config(self) -> dict:
        return {**super().get_config(), "hidden_act": self.hidden_act, "attention_dropout": self.attention_dropout}


@dataclasses.dataclass
class LoadedBackbone:
    """A backbone with what using it needs, as :func:`load_backbone` read it.

    Attributes:
        backbone: the keras-hub backbone, its weights loaded.
        architecture: the family (:data:`cosent_tf.models.families.ARCHITECTURES`).
        config: the Google-format config (``bert_config.json``'s content).
        vocab_path: the vocabulary (``vocab.txt``, or a Hugging Face ``tokenizer.json``); None when
            the checkpoint has none beside it.
        do_lower_case: whether its tokenizer lower-cases.
        pooling: the folder's own pooling (a model folder's spec; a Hugging Face folder's as the
            Keras 2 engine reads it, sentence-transformers' modules or else the mean), else None.
        maxlen: the folder's tokens per text, else None.
        has_pooler: whether the source held BERT's pooler (else the backbone's is random).
        source: what was loaded, for messages.
    """

    backbone: Any
    architecture: str
    config: dict
    vocab_path: Optional[str]
    do_lower_case: bool = True
    pooling: Optional[str] = None
    maxlen: Optional[int] = None
    has_pooler: bool = True
    source: str = ""


def _checked_config(config: Mapping, architecture: str, shown: str) -> dict:
    """``config`` checked (:func:`~cosent_tf.models.checkpoint_check_config`) and fit for the
    backbone of ``architecture``; ConfigError naming ``shown`` otherwise."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{shown}: the model config must be a JSON object, got {type(config).__name__}")
    config = check_config(dict(config), shown)
    activation = config["hidden_act"]
    if activation not in ACTIVATIONS:
        raise ConfigError(
            f"{shown}: hidden_act {activation!r} has no keras-hub block here; the Keras 3 route takes "
            f"{', '.join(ACTIVATIONS)}"
        )
    if int(config.get("type_vocab_size", 2)) < 1:
        raise ConfigError(f"{shown}: type_vocab_size 0 (no segment embeddings) has no keras-hub backbone")
    embedding = config.get("embedding_size")
    if architecture != "albert" and embedding not in (None, config["hidden_size"]):
        raise ConfigError(
            f"{shown}: embedding_size {embedding} differs from hidden_size {config['hidden_size']}, which "
            f"keras-hub's BertBackbone cannot build (ALBERT can: architecture 'albert')"
        )
    return config


def backbone_from_config(config: Mapping, architecture: str = "bert", shown: str = "the model config") -> Any:
    """A keras-hub backbone of ``config`` (a Google-format ``bert_config.json``'s content), randomly
    initialised (for training from scratch).

    Args:
        config: the Google-format config (a Hugging Face ``config.json``'s content is translated).
        architecture: ``bert``, ``roberta`` or ``albert``.
        shown: what to name in messages.

    Raises:
        ConfigError: an architecture only the Keras 2 engine builds, or a config the backbone
            cannot follow (naming the key).

    Example:
        >>> backbone = backbone_from_config(read_config("cosent_tf/configs/bert-small-random.json"))
    """
    backbone_class = keras_hub_backbone(architecture)
    config = _checked_config(config, architecture, shown)
    arguments = dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        # a rate the config leaves out is 0, as bert4keras reads it (not keras-hub's 0.1): one config
        # trains alike on both Kerases
        dropout=float(config.get("hidden_dropout_prob") or 0.0),
        max_sequence_length=int(config.get("max_position_embeddings", 512)),
        num_segments=int(config.get("type_vocab_size", 2)),
        hidden_act=config["hidden_act"],
        attention_dropout=float(config.get("attention_probs_dropout_prob") or 0.0),
    )
    if backbone_class == "AlbertBackbone":
        return GoogleAlbertBackbone(
            embedding_dim=int(config.get("embedding_size") or config["hidden_size"]), **arguments
        )
    return GoogleBertBackbone(**arguments)


# -- the Google name of every backbone variable ------------------------------------------------------

# How a Google array becomes a backbone variable: "same" shape; "heads": the variable splits the
# last axis into (heads, head size) (a query/key/value kernel or bias); "merged": it splits the first
# (the attention output's kernel). Each is a reshape, in C order, both ways.
SAME, HEADS, MERGED = "same", "heads", "merged"


def _block_entries(scope: str, block: Any, names: tuple) -> list:
    attention = block._self_attention_layer
    query, key, value, out, attention_norm, intermediate, output, output_norm = names
    return [
        (f"{scope}{query}/kernel", attention._query_dense.kernel, HEADS),
        (f"{scope}{query}/bias", attention._query_dense.bias, HEADS),
        (f"{scope}{key}/kernel", attention._key_dense.kernel, HEADS),
        (f"{scope}{key}/bias", attention._key_dense.bias, HEADS),
        (f"{scope}{value}/kernel", attention._value_dense.kernel, HEADS),
        (f"{scope}{value}/bias", attention._value_dense.bias, HEADS),
        (f"{scope}{out}/kernel", attention._output_dense.kernel, MERGED),
        (f"{scope}{out}/bias", attention._output_dense.bias, SAME),
        (f"{scope}{attention_norm}/gamma", block._self_attention_layer_norm.gamma, SAME),
        (f"{scope}{attention_norm}/beta", block._self_attention_layer_norm.beta, SAME),
        (f"{scope}{intermediate}/kernel", block._feedforward_intermediate_dense.kernel, SAME),
        (f"{scope}{intermediate}/bias", block._feedforward_intermediate_dense.bias, SAME),
        (f"{scope}{output}/kernel", block._feedforward_output_dense.kernel, SAME),
        (f"{scope}{output}/bias", block._feedforward_output_dense.bias, SAME),
        (f"{scope}{output_norm}/gamma", block._feedforward_layer_norm.gamma, SAME),
        (f"{scope}{output_norm}/beta", block._feedforward_layer_norm.beta, SAME),
    ]


BERT_BLOCK = (
    "attention/self/query",
    "attention/self/key",
    "attention/self/value",
    "attention/output/dense",
    "attention/output/LayerNorm",
    "intermediate/dense",
    "output/dense",
    "output/LayerNorm",
)
ALBERT_BLOCK = (
    "attention_1/self/query",
    "attention_1/self/key",
    "attention_1/self/value",
    "attention_1/output/dense",
    "LayerNorm",
    "ffn_1/intermediate/dense",
    "ffn_1/intermediate/output/dense",
    "LayerNorm_1",
)


def weight_table(backbone: Any) -> list:
    """[(Google checkpoint name, backbone variable, how its shape maps)] of every weight of
    ``backbone`` that a Google checkpoint holds, in the names bert4keras reads and writes."""
    table = [
        ("bert/embeddings/word_embeddings", backbone.token_embedding.embeddings, SAME),
        ("bert/embeddings/position_embeddings", backbone.position_embedding.position_embeddings, SAME),
        ("bert/embeddings/token_type_embeddings", backbone.segment_embedding.embeddings, SAME),
        ("bert/embeddings/LayerNorm/gamma", backbone.embeddings_layer_norm.gamma, SAME),
        ("bert/embeddings/LayerNorm/beta", backbone.embeddings_layer_norm.beta, SAME),
    ]
    if isinstance(backbone, keras_hub.models.AlbertBackbone):
        if backbone.num_groups != 1 or backbone.num_inner_repetitions != 1:
            raise ConfigError("a Google-format ALBERT has one shared block (num_groups 1, num_inner_repetitions 1)")
        if backbone.embeddings_projection.trainable:  # else bert4keras has no mapping (an identity here)
            table.append(
                ("bert/encoder/embedding_hidden_mapping_in/kernel", backbone.embeddings_projection.kernel, SAME)
            )
            table.append(("bert/encoder/embedding_hidden_mapping_in/bias", backbone.embeddings_projection.bias, SAME))
        table += _block_entries(ALBERT_SCOPE, backbone.transformer_layers[0][0], ALBERT_BLOCK)
    elif isinstance(backbone, keras_hub.models.BertBackbone):
        for i, block in enumerate(backbone.transformer_layers):
            table += _block_entries(f"bert/encoder/layer_{i}/", block, BERT_BLOCK)
    else:
        raise ConfigError(f"{type(backbone).__name__} is not a backbone cosent-tf reads or writes (BERT, ALBERT)")
    table.append((POOLER_NAMES[0], backbone.pooled_dense.kernel, SAME))
    table.append((POOLER_NAMES[1], backbone.pooled_dense.bias, SAME))
    return table


def _google_shape(shape: tuple, mapping: str) -> tuple:
    if mapping == HEADS:
        return (shape[0], int(np.prod(shape[1:]))) if len(shape) == 3 else (int(np.prod(shape)),)
    if mapping == MERGED:
        return (int(np.prod(shape[:-1])), shape[-1])
    return shape


def google_arrays(backbone: Any, architecture: Optional[str] = None) -> dict[str, np.ndarray]:
    """{Google checkpoint name: array} of ``backbone``'s weights: what the Keras 2 engine's model
    folder holds for them (the inverse of :func:`load_arrays`).

    Args:
        backbone: a backbone of :func:`backbone_from_config` or :func:`load_backbone`.
        architecture: its family, checked against the backbone's class when given.

    Raises:
        ConfigError: the backbone is not of ``architecture``'s class.
    """
    if architecture is not None:
        wanted = keras_hub_backbone(architecture)
        if not isinstance(backbone, getattr(keras_hub.models, wanted)):
            raise ConfigError(f"architecture {architecture!r} is built on {wanted}, not {type(backbone).__name__}")
    return {
        name: np.asarray(keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(variable))).reshape(
            _google_shape(tuple(variable.shape), mapping)
        )
        for name, variable, mapping in weight_table(backbone)
    }


def load_arrays(backbone: Any, arrays: Mapping[str, Any], shown: str, optional: tuple = POOLER_NAMES) -> list:
    """Fill ``backbone`` from ``arrays`` ({Google name: array}, read from ``shown``), all checked first.

    Returns:
        The names of ``optional`` that ``arrays`` lacked (their variables keep their values).

    Raises:
        CheckpointError: naming ``shown`` and the variable(s): a weight the backbone needs that is
            missing, of another shape, or not finite floating point; blocks beyond the config's depth.
    """
    table = weight_table(backbone)
    missing: list[str] = []
    wrong: list[str] = []
    left: list[str] = []
    for name, variable, mapping in table:
        if name not in arrays:
            (left if name in optional else missing).append(name)
            continue
        expected = _google_shape(tuple(variable.shape), mapping)
        if tuple(np.shape(arrays[name])) != expected:
            wrong.append(f"{name} {tuple(np.shape(arrays[name]))} != {expected}")
    depth = getattr(backbone, "num_layers", 0)
    deeper = sorted(
        name for name in arrays if (match := re.search(r"/encoder/layer_(\d+)/", name)) and int(match.group(1)) >= depth
    )
    problems = []
    if missing:
        problems.append(
            f"missing {len(missing)} variable(s): {', '.join(missing[:10])}" + (" ..." if len(missing) > 10 else "")
        )
    if wrong:
        problems.append("shape (checkpoint != config) differs for " + "; ".join(wrong[:10]))
    if deeper:
        problems.append(
            f"{len(deeper)} variable(s) of layers beyond the config's num_hidden_layers {depth} ({deeper[0]} ...)"
        )
    if problems:
        raise CheckpointError(f"{shown}: does not fit the model config: " + ". ".join(problems))
    for name, variable, _ in table:
        if name in arrays:
            value = np.asarray(arrays[name])
            if value.dtype.kind != "f" and value.dtype.name != "bfloat16":
                raise CheckpointError(f"{shown}: {name} holds {value.dtype} values, not floating point")
            value = value.astype(np.float32)
            huggingface.check_weight(value, shown, name)
            variable.assign(value.reshape(tuple(variable.shape)).astype(variable.dtype))
    return left


# -- sources ---------------------------------------------------------------------------------------


def _check_architecture(given: Optional[str], own: str, shown: str) -> str:
    if given is not None and given != own:
        raise ConfigError(f"{shown}: holds a {own!r} model, but architecture {given!r} was asked for")
    return own


def source_arrays(source: ModelSource, head_scope: Optional[str] = None) -> tuple[dict[str, np.ndarray], str]:
    """The weights of ``source`` as {Google checkpoint name: array}, and what they were read from (for
    messages), read through :meth:`~cosent_tf.models.sources.ModelSource.variables`, where the Keras 2
    builders read theirs too.

    A Hugging Face or sentence-transformers folder is renamed by :func:`cosent_tf.huggingface.google_arrays`
    (its ``classifier`` read as ``head_scope``, ``cosent/<head layer>``, when given); a Google-format
    checkpoint (a folder or a prefix) and a cosent-tf model folder are read as they are (an interaction
    model's head is already named ``cosent/<head layer>/kernel|bias`` there).

    Args:
        source: an opened source (:func:`~cosent_tf.models.sources.open_source`).
        head_scope: the name a Hugging Face classifier is read as.

    Returns:
        ``(arrays, shown)``: no arrays (and the config's path) for a source without a checkpoint.

    Raises:
        CheckpointError: a folder without a checkpoint, or an unreadable one, naming it.
    """
    variables = source.variables(head_scope)
    if variables is None:
        return {}, source.config_path
    return variables.arrays(), variables.where


def load_backbone(path: Any, architecture: Optional[str] = None) -> LoadedBackbone:
    """A keras-hub backbone with the weights of ``path``, and what its folder says about using it.

    Args:
        path: a cosent-tf model folder (written by the Keras 2 engine or the Keras 3 route: the same
            weights load), a Hugging Face or sentence-transformers folder (BERT), or a Google-format
            checkpoint folder (``bert_config.json``, ``bert_model.ckpt.*``, ``vocab.txt``) or prefix.
        architecture: the family of a Google-format checkpoint (default ``bert``); a model folder
            names its own and a Hugging Face folder is BERT (another value is refused).

    A model folder trained from random weights is said to be, as the Keras 2 engine's loaders say it.

    Raises:
        ConfigError: an interaction model's folder (the Keras 3 route encodes sentences), an
            architecture only the Keras 2 engine builds (NEZHA, RoFormer, WoBERT), a config the
            backbone cannot follow.
        CheckpointError: no such source, or a weight missing, of another shape or not finite,
            naming the variable and the file.

    Example:
        >>> loaded = load_backbone("runs/cosent-STS-B/model")  # doctest: +SKIP
        >>> loaded.backbone.hidden_dim, loaded.pooling  # doctest: +SKIP
        (768, 'first-last-avg')
    """
    path = os.fspath(path)
    if not os.path.exists(path) and not os.path.exists(path + ".index"):
        if huggingface.looks_like_hub_name(path):
            raise CheckpointError(
                f"{where(path)}: no such folder, and nothing is downloaded: download the model first "
                f"(huggingface-cli download {path} --local-dir FOLDER), then pass FOLDER"
            )
        raise CheckpointError(f"{where(path)}: no such model folder, Hugging Face folder or checkpoint")
    model_folder = os.path.isdir(path) and os.path.exists(os.path.join(path, SPEC_FILE))
    if not model_folder and not (os.path.isdir(path) and hugging_face_format(path) is not None):
        keras_hub_backbone(architecture or "bert")  # a Keras 2-only family is refused before anything is read
    source = open_source(path)
    if source.spec is not None:
        _refuse_interaction(source.spec, path)
    if source.format == COSENT_MODEL and source.spec is not None:
        architecture = _check_architecture(architecture, source.spec.architecture, path)
        keras_hub_backbone(architecture)
    elif source.weights_in_memory:  # a Hugging Face folder is BERT (a RoBERTa-wwm one too)
        architecture = _check_architecture(architecture if architecture != "roberta" else "bert", "bert", path)
    architecture = architecture or "bert"
    arrays, shown = source_arrays(source)
    backbone = backbone_from_config(source.config, architecture, source.config_path)
    left = load_arrays(backbone, arrays, shown)
    if left:
        logger.info(
            "%s: no pooler (%s); the backbone's is random, so pooling 'pooler' is refused", shown, ", ".join(left)
        )
    spec = source.spec
    if spec is not None:
        warn_if_random_weights(spec, path)
    vocab = source.vocab_path if source.vocab_path is not None and os.path.exists(source.vocab_path) else None
    return LoadedBackbone(
        backbone,
        architecture,
        dict(source.config),
        vocab,
        do_lower_case=source.do_lower_case,
        pooling=spec.pooling if spec is not None else None,
        maxlen=spec.maxlen if spec is not None else None,
        has_pooler=not left,
        source=path,
    )


def _refuse_interaction(spec: Any, path: str) -> None:
    if spec.kind != "feature":
        raise ConfigError(
            f"{path}: holds an {spec.kind} model (a cross-encoder with a {spec.head!r} head); the Keras 3 route "
            "builds sentence encoders on keras-hub backbones: use it with cosent-tf's Keras 2 commands"
        )
