"""Pooling of transformer outputs into sentence vectors, on this process's Keras
(:mod:`cosent_tf.process_keras`): tf-keras for the Keras 2 engine, Keras 3 on TensorFlow or JAX."""

from __future__ import annotations

from typing import Any, Optional

from .choices import POOLING_MODES
from .errors import ConfigError
from .maths import pooling
from .process_keras import keras, ops, serializable


@serializable
class Pooling(keras.layers.Layer):
    """Turn transformer outputs into one vector per sentence.

    Modes and the inputs they take (``mask`` is 1 for real tokens, 0 for padding, (B, T)):

    * ``cls``: the last layer's first token; input (B, T, H).
    * ``last-avg``: mean of the last layer over real tokens; input (B, T, H).
    * ``max``: element-wise max of the last layer over real tokens; input (B, T, H).
    * ``first-last-avg``: mean of the first and last transformer layers' token means
      (as in BERT-whitening); input [first (B, T, H), last (B, T, H)].
    * ``pooler``: BERT's pooler output (tanh(W h_cls + b)); input (B, H).

    Padding never enters a mean or a max. Computed and returned in float32, so the layer
    is safe under mixed_bfloat16.

    Args:
        mode: one of :data:`POOLING_MODES` (:mod:`cosent_tf.choices`).
        **kwargs: Keras layer arguments (``name``; ``dtype`` defaults to float32).

    Raises:
        ConfigError: ``mode`` is not a pooling mode.

    Example:
        >>> hidden = tf.random.normal([2, 5, 8])  # (batch, tokens, hidden)
        >>> mask = tf.constant([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], tf.float32)
        >>> Pooling("last-avg")(hidden, mask=mask).shape
        TensorShape([2, 8])
    """

    def __init__(self, mode: str = "cls", **kwargs: Any) -> None:
        if mode not in POOLING_MODES:
            raise ConfigError(f"unknown pooling {mode!r}; choose one of {', '.join(POOLING_MODES)}")
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.mode = mode
        self.supports_masking = True

    def call(self, inputs: Any, mask: Optional[Any] = None) -> Any:
        if isinstance(mask, (list, tuple)):  # Keras 3 passes one mask per input of a list
            mask = mask[-1]
        return pooling.pool(ops(), self.mode, inputs, mask)

    def compute_mask(self, inputs: Any, mask: Optional[Any] = None) -> None:
        return None

    def compute_output_shape(self, input_shape: Any) -> tuple[Optional[int], ...]:
        if self.mode == "first-last-avg":
            input_shape = input_shape[-1]
        if self.mode == "pooler":
            return tuple(input_shape)
        return (input_shape[0], input_shape[-1])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "mode": self.mode}


@serializable
class PaddingMask(keras.layers.Layer):
    """1.0 where a token id is not the padding id, else 0.0: the mask :class:`Pooling` takes.

    Args:
        padding_id: the vocabulary's padding id ([PAD], 0 in BERT vocabularies).
        **kwargs: Keras layer arguments (``name``; ``dtype`` defaults to float32).

    Example:
        >>> PaddingMask()(tf.constant([[101, 872, 102, 0, 0]])).numpy()
        array([[1., 1., 1., 0., 0.]], dtype=float32)
    """

    def __init__(self, padding_id: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.padding_id = padding_id

    def call(self, token_ids: Any) -> Any:
        return pooling.padding_mask(ops(), token_ids, self.padding_id)

    def compute_output_shape(self, input_shape: Any) -> tuple[Optional[int], ...]:
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "padding_id": self.padding_id}
