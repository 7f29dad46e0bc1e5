"""The models of a :class:`~cosent_tf.models.spec.ModelSpec` on keras-hub backbones: the Keras 3 twin
of :func:`cosent_tf.models.builders.build_from_spec`, and the Google-named weights a model folder
holds of them (:func:`model_arrays`).

Both Kerases build one contract: a model from ``[token_ids, segment_ids]`` (two int32 (B, T) inputs)
to float32 sentence vectors (a feature model, pooled by ``spec.pooling``) or to an interaction
head's output (``score``: (B, 1); ``softmax``: (B, 2)) on the pair's [CLS] hidden state or BERT's
pooler (``spec.head_input``). The head is a Dense layer named :func:`~cosent_tf.models.kinds.head_layer_name`,
saved as ``cosent/<its name>/kernel|bias`` by either Keras, so that a model folder written by one
loads on the other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from .. import huggingface
from ..errors import CheckpointError, ConfigError
from ..models.checkpoint_files import HEAD_SCOPE, no_pooler_error
from ..models.kinds import HEAD_INPUTS, HEAD_LAYERS, INTERACTION_HEADS, get_kind, head_layer_name
from ..models.sources import ModelSource
from ..models.spec import ModelSpec
from ..weight_decay import decayed
from .backbones import POOLER_NAMES, backbone_from_config, google_arrays, load_arrays, source_arrays, weight_table
from .encoder import keep_backbone, pooled
from .runtime import checked_keras, keras_hub_backbone

keras: Any = checked_keras()

logger = logging.getLogger(__name__)

# The models' inputs, in the order they are called with (model([token_ids, segment_ids])).
INPUT_NAMES = ("token_ids", "segment_ids")
# The standard deviation of an interaction head's initial kernel (truncated normal), as bert4keras's.
HEAD_INIT_STDDEV = 0.02


def reads_pooler(spec: ModelSpec) -> bool:
    """Whether the model of ``spec`` reads BERT's pooler: pooling ``pooler``, or a head on it."""
    return (spec.pooling if get_kind(spec.kind).spec_field == "pooling" else spec.head_input) == "pooler"


def _head_name(spec: ModelSpec) -> Optional[str]:
    """The head layer's name of an interaction spec; None for a feature spec."""
    return head_layer_name(str(spec.head)) if get_kind(spec.kind).spec_field == "head" else None


def build_from_spec(
    spec: ModelSpec, source: ModelSource, require_head: bool = False, name: Optional[str] = None
) -> Any:
    """The Keras 3 model ``spec`` describes on a keras-hub backbone, with the weights of ``source``.

    The model is called as ``model([token_ids, segment_ids])``: two int32 (B, T) inputs named
    :data:`INPUT_NAMES`; the padding mask is ``token_ids != 0`` and the segment ids go to the
    backbone (a concatenated pair's second text has segment 1 when ``spec.pair_segments``). A feature
    model gives float32 (B, H) vectors pooled as the Keras 2 engine pools
    (:func:`cosent_tf.keras3.encoder.pooled`); an interaction model's head (a float32 Dense named
    ``head_layer_name(spec.head)``: one score, or the two-way softmax) reads the [CLS] hidden state
    (``head_input`` ``cls``) or BERT's pooler (``pooler``).

    Weights: the source's checkpoint (:func:`~cosent_tf.keras3.backbones.source_arrays`), else random
    (:func:`~cosent_tf.keras3.backbones.backbone_from_config`). The head is filled from
    ``cosent/<head layer>/kernel|bias`` (a model folder of an interaction model; a Hugging Face
    ``*ForSequenceClassification`` folder's classifier) when the checkpoint holds it, else it starts
    random (logged), as the Keras 2 builder does. The backbone's pooler is refused, as on Keras 2,
    when the model reads it and the checkpoint has none (a model folder that did not read it, a
    Hugging Face folder without one); a model that does not read it leaves it out of its weights.

    The returned model's ``backbone`` is its keras-hub backbone (see :func:`model_arrays`).

    Args:
        spec: the model's spec (a model folder's :func:`~cosent_tf.models.spec.read_spec`, or a run's).
        source: where the config and the weights come from (:func:`~cosent_tf.models.sources.open_source`).
        require_head: a checkpoint without the head's weights (or with another shape of them) is an
            error, not a random head.
        name: the model's name (default: the kind's, ``feature`` or ``interaction``).

    Raises:
        ConfigError: an unknown kind, pooling, head or head input; an architecture only the Keras 2
            engine builds; a config the backbone cannot follow, or whose vocab_size is not the
            source's vocabulary's.
        CheckpointError: the checkpoint is unreadable or does not fit the config; it has no pooler
            and the model reads one; ``require_head`` and no head of the right shape in it.

    Example:
        >>> source = open_source("runs/bq-cosent/model")  # doctest: +SKIP
        >>> model = build_from_spec(source.spec, source)  # doctest: +SKIP
        >>> model([token_ids, segment_ids]).shape  # doctest: +SKIP
        (32, 768)
    """
    kind = get_kind(spec.kind)
    kind.check_spec(spec, "the model spec")
    if spec.head_input not in HEAD_INPUTS:
        raise ConfigError(f"unknown head input {spec.head_input!r}; choose one of {', '.join(HEAD_INPUTS)}")
    keras_hub_backbone(spec.architecture)  # a Keras 2-only family is refused before anything is read
    if source.vocab_path is not None:  # as the Keras 2 builders check a source's vocabulary
        source.check_vocab()
    head = _head_name(spec)
    arrays, shown = source_arrays(source, HEAD_SCOPE + head if head else None)
    backbone = backbone_from_config(source.config, spec.architecture, source.config_path)
    if source.checkpoint is not None:
        left = load_arrays(backbone, arrays, shown)
        if left and reads_pooler(spec):
            raise no_pooler_error(shown, left)
    token_ids, segment_ids = (keras.Input(shape=(None,), dtype="int32", name=input_name) for input_name in INPUT_NAMES)
    if head is None:
        outputs = pooled(backbone, str(spec.pooling), token_ids, segment_ids, name=name or kind.name)
    else:
        units, activation = HEAD_LAYERS[str(spec.head)]
        features = pooled(backbone, spec.head_input, token_ids, segment_ids, name=name or kind.name)
        outputs = keras.layers.Dense(
            units,
            activation=activation,
            dtype="float32",
            name=head,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=HEAD_INIT_STDDEV),
        )(features)
    model = keep_backbone(keras.Model([token_ids, segment_ids], outputs, name=name or kind.name), backbone)
    if head is not None and source.checkpoint is not None:
        _load_head(model.get_layer(head), arrays, shown, require_head)
    return model


def _head_entries(layer: Any) -> list:
    """[(Google name, variable)] of a head layer: ``cosent/<layer>/kernel`` and ``.../bias``."""
    return [(f"{HEAD_SCOPE}{layer.name}/kernel", layer.kernel), (f"{HEAD_SCOPE}{layer.name}/bias", layer.bias)]


def _load_head(layer: Any, arrays: Mapping[str, Any], shown: str, required: bool) -> None:
    """Fill the head ``layer`` from ``arrays`` (read from ``shown``) when they hold it with its shapes;
    else it keeps its random weights, said at INFO (none of it there) or WARNING (another shape: another
    number of labels), or, ``required``, a CheckpointError, as the Keras 2 engine's ``load_head``."""
    entries = _head_entries(layer)
    problems = []
    for name, variable in entries:
        if name not in arrays:
            problems.append(f"the interaction head's variable {name} is missing")
        elif tuple(np.shape(arrays[name])) != tuple(variable.shape):
            problems.append(
                f"{name} has shape {tuple(np.shape(arrays[name]))}, the model needs {tuple(variable.shape)}"
            )
    if problems and required:
        raise CheckpointError(f"{shown}: " + "; ".join(problems))
    if problems:
        partial = any(name in arrays for name, _ in entries)
        logger.log(
            logging.WARNING if partial else logging.INFO,
            "%s: %s; the head starts from random weights",
            shown,
            "; ".join(problems),
        )
        return
    for name, variable in entries:
        value = np.asarray(arrays[name], np.float32)
        huggingface.check_weight(value, shown, name)
        variable.assign(value)


def backbone_arrays(backbone: Any, spec: ModelSpec, keep_pooler: bool = False) -> dict[str, np.ndarray]:
    """{Google checkpoint name: float32 array} of a keras-hub ``backbone`` as the model folder of
    ``spec`` holds it: BERT's pooler only where the model reads it, as on Keras 2 (whose model then has
    none to write), or where ``keep_pooler`` says it was read from the source (a keras-hub backbone
    always has one, random otherwise, which is never shipped as if it were trained)."""
    arrays = {name: np.asarray(value, np.float32) for name, value in google_arrays(backbone, spec.architecture).items()}
    if not (keep_pooler or reads_pooler(spec)):
        arrays = {name: value for name, value in arrays.items() if name not in POOLER_NAMES}
    return arrays


def model_arrays(model: Any, spec: ModelSpec) -> dict[str, np.ndarray]:
    """{Google checkpoint name: float32 array} of everything the model folder of ``model`` (a
    :func:`build_from_spec` model of ``spec``) holds, as the Keras 2 engine writes it for the same
    spec (:func:`cosent_tf.inference.model_dir.save_model_dir`): the backbone's weights, BERT's pooler
    only when the model reads it, and an interaction model's head as ``cosent/<head layer>/kernel|bias``.

    Raises:
        ConfigError: ``model`` is no model of this module (it has no backbone), or of another
            architecture or head than ``spec``'s.
    """
    backbone = getattr(model, "backbone", None)
    if backbone is None:
        raise ConfigError(f"model {model.name!r} was not built by cosent_tf.keras3.models.build_from_spec")
    arrays = backbone_arrays(backbone, spec)
    head = _head_name(spec)
    if head is not None:
        try:
            layer = model.get_layer(head)
        except ValueError:
            raise ConfigError(f"model {model.name!r} has no {head} layer: it is no {spec.head} head's model") from None
        for name, variable in _head_entries(layer):
            arrays[name] = np.asarray(keras.ops.convert_to_numpy(variable), np.float32)
    return arrays


def not_decayed_variables(model: Any) -> list:
    """The trainable variables of ``model`` (of :func:`build_from_spec`, or
    :func:`cosent_tf.keras3.encoder.build_encoder`) that decoupled weight decay skips: those whose
    Google checkpoint name :func:`~cosent_tf.weight_decay.decayed` rejects (the embeddings, the layer
    norms, every bias: the head's too), and any variable outside the names (none today; never
    decayed unasked)."""
    named = [(name, variable) for name, variable, _ in weight_table(model.backbone)]
    for head in INTERACTION_HEADS:
        if any(layer.name == head_layer_name(head) for layer in model.layers):
            named += _head_entries(model.get_layer(head_layer_name(head)))
    decayed_ids = {id(variable) for name, variable in named if decayed(name)}
    return [variable for variable in model.trainable_variables if id(variable) not in decayed_ids]
