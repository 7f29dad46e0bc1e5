"""Keras models over bert4keras transformers: sentence encoders and interaction models."""
from . import backend
from .backend import keras
from .errors import ConfigError
from .layers import POOLING_MODES, PaddingMask, Pooling
from .tokenization import check_vocab_size

INTERACTION_HEADS = ("score", "softmax")


def build_encoder(config_path, checkpoint_path=None, model="bert", pooling="cls",
                  vocab_path=None, name="encoder", **overrides):
    """A Keras model from [token_ids, segment_ids] to sentence vectors (float32).

    Args:
        config_path: a BERT-style ``*_config.json``.
        checkpoint_path: a Google-format TF checkpoint prefix or its directory; ``None``
            builds a randomly initialised model (every kernel drawn independently).
        model: one of ``bert``, ``roberta`` (RoBERTa-wwm checkpoints are BERT format),
            ``wobert``, ``nezha``, ``albert``, ``roformer``.
        pooling: one of ``cls``, ``last-avg``, ``first-last-avg``, ``max``, ``pooler``.
        vocab_path: if given, checked against the config's ``vocab_size``.
        overrides: passed to the bert4keras constructor (e.g. ``dropout_rate=0.1``).
    """
    if pooling not in POOLING_MODES:
        raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING_MODES)}")
    if vocab_path is not None:
        check_vocab_size(config_path, vocab_path)
    transformer = backend.build_transformer(
        config_path, checkpoint_path, model, with_pool=(pooling == "pooler"), **overrides)
    token_ids = transformer.inputs[0]
    mask = PaddingMask(name="Padding-Mask")(token_ids)
    if pooling == "first-last-avg":
        hidden = [backend.first_layer_output(transformer), _sequence_output(transformer)]
    elif pooling == "pooler":
        hidden = transformer.output
    elif pooling == "cls":
        hidden = _first_token_output(transformer)
    else:
        hidden = _sequence_output(transformer)
    vectors = Pooling(pooling, name="Pooling")(hidden, mask=mask)
    return keras.Model(transformer.inputs, vectors, name=name)


def build_interaction_model(config_path, checkpoint_path=None, model="bert", head="score",
                            vocab_path=None, name="interaction", **overrides):
    """A cross-encoder: [token_ids, segment_ids] of a concatenated pair to a match score.

    ``head='score'`` gives one unbounded score per pair (Dense(1) on [CLS], for
    InteractionCoSENTLoss); ``head='softmax'`` gives the two-way probabilities of the
    cross-entropy baseline (column 1 is P(similar)). Both are float32.
    """
    if head not in INTERACTION_HEADS:
        raise ConfigError(f"unknown interaction head {head!r}; choose one of {', '.join(INTERACTION_HEADS)}")
    if vocab_path is not None:
        check_vocab_size(config_path, vocab_path)
    transformer = backend.build_transformer(config_path, checkpoint_path, model, **overrides)
    cls = Pooling("cls", name="Pooling")(_first_token_output(transformer))
    units, activation = (1, None) if head == "score" else (2, "softmax")
    output = keras.layers.Dense(
        units, activation=activation, dtype="float32", name="Match-" + head.capitalize(),
        kernel_initializer=backend.IndependentTruncatedNormal(0.02))(cls)
    return keras.Model(transformer.inputs, output, name=name)


def _first_token_output(transformer):
    """What [CLS] pooling needs: the last layer at the first position (see backend), else all of it."""
    first = backend.first_token_output(transformer)
    return _sequence_output(transformer) if first is None else first


def _sequence_output(transformer):
    output = transformer.output
    return output[0] if isinstance(output, list) else output
