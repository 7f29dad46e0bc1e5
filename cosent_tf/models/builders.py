"""Keras models over bert4keras transformers: sentence encoders and interaction models.

Each builder takes the model's config as a path or as a :class:`~cosent_tf.models.sources.ModelSource`;
given a source, it reads nothing again: the config, the vocabulary and the checkpoint are the
source's, read once.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Optional, Union

from ..backend import keras
from ..compat import renamed_keyword
from ..errors import ConfigError
from ..layers import POOLING_MODES, PaddingMask, Pooling
from .architectures import IndependentTruncatedNormal, get_architecture, transformer_class
from .checkpoints import (
    HEAD_SCOPE,
    REQUIRED_CONFIG,
    CheckpointVariables,
    checkpoint_files,
    load_checkpoint,
    load_head,
    read_config,
    refuse_other_folder,
)
from .kinds import FEATURE, HEAD_INPUTS, HEAD_LAYERS, INTERACTION, INTERACTION_HEADS, get_kind, head_layer_name
from .sources import ModelSource
from .spec import ModelSpec
from .tokenization import check_vocab_size

# A model's config: the path of its json file, or the source it was resolved from.
ConfigSource = Union[str, ModelSource]

__all__ = [  # HEAD_INPUTS, INTERACTION_HEADS and head_layer_name live in cosent_tf.models.kinds; named here as before
    "BUILDERS",
    "CONFIG_FIELDS",
    "HEAD_INPUTS",
    "INTERACTION_HEADS",
    "TRANSFORMER_OPTIONS",
    "build_encoder",
    "build_from_spec",
    "build_interaction_model",
    "build_transformer",
    "check_maxlen",
    "first_layer_output",
    "first_token_output",
    "head_layer_name",
]

# The keywords a builder takes besides its parameters, each passed on to bert4keras: a field of
# the BERT config, which replaces the file's ...
CONFIG_FIELDS = (
    *REQUIRED_CONFIG,
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "embedding_size",
)
# ... or an option of bert4keras's constructors (models.Transformer and models.BERT) that leaves
# the weights' names and shapes as a checkpoint has them, so that loading still checks them all.
# ``with_pool`` is the transformer builder's only: the other builders set it from their pooling.
TRANSFORMER_OPTIONS = (
    "dropout_rate",
    "attention_dropout_rate",
    "max_position",
    "segment_vocab_size",
    "sequence_length",
    "residual_attention_scores",
    "with_pool",
)


def _check_keywords(builder: Callable[..., Any], keywords: dict, builder_sets: tuple = ()) -> None:
    """Raise TypeError, as Python does for a function without ``**kwargs``, for a keyword of
    ``builder``'s ``**overrides`` that is neither a config field nor a bert4keras option (or is one
    ``builder`` sets itself): such a keyword, a misspelt ``checkpoint_path`` above all, would
    otherwise reach bert4keras unread, and the model would start from random weights unsaid."""
    taken = [name for name in (*CONFIG_FIELDS, *TRANSFORMER_OPTIONS) if name not in builder_sets]
    parameters = [
        name
        for name, parameter in inspect.signature(builder).parameters.items()
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    for keyword in keywords:
        if keyword in taken:
            continue
        close = [] if keyword in builder_sets else difflib.get_close_matches(keyword, parameters + taken, n=1)
        sets = f" ({builder.__name__} sets {keyword} itself)" if keyword in builder_sets else ""
        hint = f"; did you mean {close[0]}?" if close else "."
        raise TypeError(
            f"{builder.__name__}() got an unexpected keyword argument {keyword!r}{sets}{hint} Besides its "
            "parameters it takes only a BERT config field or a bert4keras option (CONFIG_FIELDS and "
            "TRANSFORMER_OPTIONS of cosent_tf.models.builders)"
        )


def _config_of(config_path: Optional[ConfigSource], checkpoint_path: Optional[str]) -> ConfigSource:
    """``config_path``, or the config of the checkpoint's folder when it is None."""
    if checkpoint_path is not None:
        refuse_other_folder(checkpoint_path)
    if config_path is not None:
        return config_path
    if checkpoint_path is None:
        raise ConfigError("a model needs a config: pass config_path, or a checkpoint folder that holds one")
    return checkpoint_files(checkpoint_path)[0]


def _weights(
    config: ConfigSource, checkpoint_path: Optional[str], head_scope: Optional[str] = None
) -> Union[str, CheckpointVariables, None]:
    """What to load the weights from: ``checkpoint_path`` when given, else a source's own
    checkpoint (opened once by the source), else nothing (random weights)."""
    if checkpoint_path is not None or not isinstance(config, ModelSource):
        return checkpoint_path
    return config.variables(head_scope)


def build_transformer(
    config_path: ConfigSource, checkpoint_path: Optional[str] = None, architecture: str = "bert", **overrides: Any
) -> Any:
    """Build (and optionally load) a bert4keras transformer.

    Args:
        config_path: a BERT-style config json, or a :class:`~cosent_tf.models.sources.ModelSource`
            (whose checkpoint is then loaded unless ``checkpoint_path`` is given).
        checkpoint_path: a Google-format checkpoint prefix or folder, or a Hugging Face folder.
        architecture: a name of :data:`cosent_tf.models.families.ARCHITECTURES`.
        overrides: config fields to replace (:data:`CONFIG_FIELDS`) and bert4keras constructor
            options (:data:`TRANSFORMER_OPTIONS`, ``with_pool`` among them); nothing else.

    Returns:
        The built bert4keras ``Transformer`` object (its Keras model is ``.model``).

    Raises:
        TypeError: a keyword that is no parameter, config field or option (the message names the
            parameter it is close to: ``checkpoint=`` is ``checkpoint_path``).
        ConfigError: the config is unreadable or wrong, or the architecture unknown.
        CheckpointError: the checkpoint is unreadable or does not fit the config, or
            ``checkpoint_path`` is a folder that holds no checkpoint (a run folder, a SavedModel).

    Example:
        >>> transformer = build_transformer(SMALL_RANDOM_CONFIG)  # doctest: +SKIP
    """
    _check_keywords(build_transformer, overrides)
    if checkpoint_path is not None:
        refuse_other_folder(checkpoint_path)
    return _transformer(config_path, _weights(config_path, checkpoint_path), architecture, **overrides)


def _transformer(
    config_path: ConfigSource, weights: Union[str, CheckpointVariables, None], architecture: str, **overrides: Any
) -> Any:
    if isinstance(config_path, ModelSource):
        config = dict(config_path.config)
    else:
        config = read_config(config_path)
    config.update(overrides)
    config.setdefault("max_position", config.get("max_position_embeddings", 512))
    config.setdefault("dropout_rate", config.get("hidden_dropout_prob"))
    config.setdefault("attention_dropout_rate", config.get("attention_probs_dropout_prob"))
    config.setdefault("segment_vocab_size", config.get("type_vocab_size", 2))
    transformer = transformer_class(architecture)(**config)
    transformer.build(**config)
    if weights is not None:
        load_checkpoint(transformer, weights)
    return transformer


def check_maxlen(config_path: ConfigSource, architecture: str, maxlen: int) -> None:
    """Raise ConfigError if ``maxlen`` tokens do not fit the model's position embeddings.

    Args:
        config_path: the config json, or a :class:`~cosent_tf.models.sources.ModelSource`.
        architecture: the architecture (only one with learned positions has a limit).
        maxlen: the tokens per text.

    Raises:
        ConfigError: ``maxlen`` is longer than ``max_position_embeddings``; the message names
            the config and the largest maxlen that fits.

    Example:
        >>> check_maxlen(SMALL_RANDOM_CONFIG, "bert", 64)  # doctest: +SKIP
    """
    if isinstance(config_path, ModelSource):
        config_path.check_maxlen(architecture, maxlen)
        return
    limit = read_config(config_path).get("max_position_embeddings", 512)
    if get_architecture(architecture).learned_positions and maxlen > limit:
        raise ConfigError(
            f"{config_path}: maxlen {maxlen} is longer than the model's {limit} position embeddings "
            f"(max_position_embeddings); use --maxlen {limit} or less"
        )


def _check_vocab(config: ConfigSource, vocab_path: Optional[str]) -> None:
    """The config's vocab_size against ``vocab_path``, or against a source's own vocabulary."""
    if isinstance(config, ModelSource) and vocab_path is None:
        if config.vocab_path is not None:
            config.check_vocab()
    elif vocab_path is not None:
        check_vocab_size(config.config_path if isinstance(config, ModelSource) else config, vocab_path)


def build_encoder(
    config_path: Optional[ConfigSource],
    checkpoint_path: Optional[str] = None,
    architecture: str = "bert",
    pooling: str = "cls",
    vocab_path: Optional[str] = None,
    name: str = "encoder",
    model: Optional[str] = None,
    **overrides: Any,
) -> keras.Model:
    """A Keras model from [token_ids, segment_ids] to sentence vectors (float32).

    Args:
        config_path: a BERT-style ``*_config.json`` (or a Hugging Face ``config.json``);
            ``None`` takes the checkpoint folder's. A :class:`~cosent_tf.models.sources.ModelSource`
            brings its config, vocabulary and weights (unless ``checkpoint_path`` is given),
            read once.
        checkpoint_path: a Google-format TF checkpoint prefix or its directory, or a Hugging
            Face / sentence-transformers model folder (see :mod:`cosent_tf.huggingface.folders`);
            ``None`` builds a randomly initialised model (every kernel drawn independently).
        architecture: one of ``bert``, ``roberta`` (RoBERTa-wwm checkpoints are BERT
            format), ``wobert``, ``nezha``, ``albert``, ``roformer``.
        pooling: one of ``cls``, ``last-avg``, ``first-last-avg``, ``max``, ``pooler``.
        vocab_path: if given, checked against the config's ``vocab_size``.
        model: deprecated name of ``architecture``.
        overrides: config fields to replace (:data:`CONFIG_FIELDS`) and bert4keras constructor
            options (:data:`TRANSFORMER_OPTIONS` but ``with_pool``, which ``pooling`` sets), e.g.
            ``dropout_rate=0.1``; nothing else.

    Returns:
        The Keras model; its output is float32 under every precision policy.

    Raises:
        TypeError: a keyword that is no parameter, config field or option (the message names the
            parameter it is close to: ``checkpoint=`` is ``checkpoint_path``).
        ConfigError: an unknown pooling or architecture, a config that does not fit the vocabulary.
        CheckpointError: the checkpoint is unreadable or does not fit the config, or
            ``checkpoint_path`` is a folder that holds no checkpoint (a run folder, a SavedModel).

    Example:
        >>> encoder = build_encoder(open_source("chinese_L-12_H-768_A-12/"), pooling="first-last-avg")  # doctest: +SKIP
        >>> encoder.output_shape  # doctest: +SKIP
        (None, 768)
    """
    _check_keywords(build_encoder, overrides, builder_sets=("with_pool",))
    architecture = renamed_keyword("model", "architecture", model, architecture)
    config_path = _config_of(config_path, checkpoint_path)
    if pooling not in POOLING_MODES:
        raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING_MODES)}")
    _check_vocab(config_path, vocab_path)
    transformer = _transformer(
        config_path, _weights(config_path, checkpoint_path), architecture, with_pool=(pooling == "pooler"), **overrides
    )
    token_ids = transformer.inputs[0]
    mask = PaddingMask(name="Padding-Mask")(token_ids)
    if pooling == "first-last-avg":
        hidden = [first_layer_output(transformer), _sequence_output(transformer)]
    elif pooling == "pooler":
        hidden = transformer.output
    elif pooling == "cls":
        hidden = _cls_input(transformer, architecture)
    else:
        hidden = _sequence_output(transformer)
    vectors = Pooling(pooling, name="Pooling")(hidden, mask=mask)
    return keras.Model(transformer.inputs, vectors, name=name)


def build_interaction_model(
    config_path: Optional[ConfigSource],
    checkpoint_path: Optional[str] = None,
    architecture: str = "bert",
    head: str = "score",
    vocab_path: Optional[str] = None,
    name: str = "interaction",
    model: Optional[str] = None,
    head_input: str = "cls",
    require_head: bool = False,
    **overrides: Any,
) -> keras.Model:
    """A cross-encoder: [token_ids, segment_ids] of a concatenated pair to a match score.

    ``head='score'`` gives one unbounded score per pair (Dense(1), for
    InteractionCoSENTLoss); ``head='softmax'`` gives the two-way probabilities of the
    cross-entropy baseline (column 1 is P(similar)). Both are float32. ``head_input`` is
    what the head reads: ``cls``, the [CLS] hidden state (the original experiments), or
    ``pooler``, BERT's pooler (as Hugging Face's ``BertForSequenceClassification``, whose
    folders load here with their classifier). A checkpoint that holds the head's weights
    fills the head too; otherwise it starts random, or, with ``require_head``, it is an error.

    Args:
        config_path: as :func:`build_encoder`'s (a path, None, or a ModelSource).
        checkpoint_path: as :func:`build_encoder`'s.
        architecture: as :func:`build_encoder`'s.
        head: ``score`` or ``softmax``.
        vocab_path: if given, checked against the config's ``vocab_size``.
        name: the Keras model's name.
        model: deprecated name of ``architecture``.
        head_input: ``cls`` or ``pooler``.
        require_head: a checkpoint without the head's weights is an error.
        overrides: as :func:`build_encoder`'s (``head_input`` sets ``with_pool``).

    Returns:
        The Keras model, from [token_ids, segment_ids] to (B, 1) scores or (B, 2) probabilities.

    Raises:
        TypeError: a keyword that is no parameter, config field or option (as :func:`build_encoder`).
        ConfigError: an unknown head, head input or architecture; a config that does not fit the
            vocabulary.
        CheckpointError: the checkpoint is unreadable, does not fit, or (``require_head``) lacks the
            head; or ``checkpoint_path`` is a folder that holds no checkpoint.

    Example:
        >>> scorer = build_interaction_model(SMALL_RANDOM_CONFIG, head="softmax")  # doctest: +SKIP
        >>> scorer.output_shape  # doctest: +SKIP
        (None, 2)
    """
    _check_keywords(build_interaction_model, overrides, builder_sets=("with_pool",))
    architecture = renamed_keyword("model", "architecture", model, architecture)
    config_path = _config_of(config_path, checkpoint_path)
    if head not in INTERACTION_HEADS:
        raise ConfigError(f"unknown interaction head {head!r}; choose one of {', '.join(INTERACTION_HEADS)}")
    if head_input not in HEAD_INPUTS:
        raise ConfigError(f"unknown head input {head_input!r}; choose one of {', '.join(HEAD_INPUTS)}")
    _check_vocab(config_path, vocab_path)
    head_scope = HEAD_SCOPE + head_layer_name(head)
    weights = _weights(config_path, checkpoint_path, head_scope)
    # The weights are loaded below, once the head exists: the transformer is built without them.
    transformer = _transformer(config_path, None, architecture, with_pool=head_input == "pooler", **overrides)
    if head_input == "pooler":
        features = transformer.output
    else:
        features = Pooling("cls", name="Pooling")(_cls_input(transformer, architecture))
    units, activation = HEAD_LAYERS[head]
    output = keras.layers.Dense(
        units,
        activation=activation,
        dtype="float32",
        name=head_layer_name(head),
        kernel_initializer=IndependentTruncatedNormal(0.02),
    )(features)
    interaction = keras.Model(transformer.inputs, output, name=name)
    if weights is not None:
        checkpoint = load_checkpoint(transformer, weights, head_scope)
        load_head(interaction, head_layer_name(head), checkpoint, required=require_head)
    return interaction


def first_layer_output(transformer):
    """Output of the first transformer block (for first-last-avg pooling)."""
    layers = transformer.layers
    if "Transformer-0-FeedForward-Norm" in layers:
        return layers["Transformer-0-FeedForward-Norm"].output
    # ALBERT shares one block across depths: take the block's first application.
    return layers["Transformer-FeedForward-Norm"].get_output_at(0)


def first_token_output(transformer, architecture):
    """The last block's output at the first ([CLS]) position only, (B, 1, H), or None.

    The last block's keys and values need every token, but its query, attention output,
    feed-forward and layer norms are needed at the first position only when only [CLS]
    is used. Applying that block's own layers (the same weights) to the [CLS] query skips
    about four fifths of the block, in training and inference; the result is the full
    model's [CLS] vector. Only for architectures whose last block stands alone with
    absolute positions (``first_token_only``); NEZHA, ALBERT and RoFormer give None.
    """
    if not get_architecture(architecture).first_token_only:
        return None
    layers = transformer.layers
    attention = f"Transformer-{transformer.num_hidden_layers - 1}-MultiHeadSelfAttention"
    feed_forward = f"Transformer-{transformer.num_hidden_layers - 1}-FeedForward"
    hidden = layers[attention].get_input_at(0)[0]
    query = keras.layers.Lambda(lambda x: x[:, :1], name="First-Token-Query")(hidden)

    def dropout(name, x):  # bert4keras leaves the layer out when the rate is 0
        return layers[name](x) if name in layers else x

    x = dropout(f"{attention}-Dropout", layers[attention]([query, hidden, hidden]))
    x = layers[f"{attention}-Norm"](layers[f"{attention}-Add"]([query, x]))
    y = dropout(f"{feed_forward}-Dropout", layers[feed_forward](x))
    return layers[f"{feed_forward}-Norm"](layers[f"{feed_forward}-Add"]([x, y]))


def _cls_input(transformer, architecture):
    """What [CLS] pooling needs: the last layer at the first position, else all of it."""
    first = first_token_output(transformer, architecture)
    return _sequence_output(transformer) if first is None else first


def _sequence_output(transformer):
    output = transformer.output
    return output[0] if isinstance(output, list) else output


# The builder of each model kind (cosent_tf.models.kinds), by the kind's name.
BUILDERS: dict[str, Callable[..., keras.Model]] = {
    FEATURE.name: build_encoder,
    INTERACTION.name: build_interaction_model,
}


def build_from_spec(
    spec: ModelSpec, source: ConfigSource, checkpoint: Optional[str] = None, **options: Any
) -> keras.Model:
    """The model ``spec`` describes, built by its kind's builder (:data:`BUILDERS`).

    Args:
        spec: the model's :class:`~cosent_tf.models.spec.ModelSpec`; its kind's ``spec_field``
            says whether it is pooled (``pooling``) or has a head (``head`` and ``head_input``).
        source: a config path or a :class:`~cosent_tf.models.sources.ModelSource`.
        checkpoint: where the weights come from; None: the source's own, or random weights.
        options: passed on to the builder (``name``, ``require_head``, bert4keras options), which
            refuses any other.

    Returns:
        The Keras model.

    Raises:
        TypeError: an option the builder does not take (the builder names itself and the option).
        ConfigError: an unknown kind, or a spec the builder refuses.
        CheckpointError: the checkpoint is unreadable or does not fit.

    Example:
        >>> model = build_from_spec(ModelSpec("feature", pooling="cls"), SMALL_RANDOM_CONFIG)  # doctest: +SKIP
    """
    kind = get_kind(spec.kind)
    build = BUILDERS[kind.name]
    if kind.spec_field == "pooling":
        return build(source, checkpoint, spec.architecture, spec.pooling, **options)
    return build(source, checkpoint, spec.architecture, spec.head, head_input=spec.head_input, **options)
