"""The Keras 3 layers that turn a backbone's outputs into sentence vectors: :class:`Pooling` and
:class:`PaddingMask`, the Keras 2 engine's (:mod:`cosent_tf.layers`) on ``keras.ops``, computed by
the same maths (:mod:`cosent_tf.maths.pooling`) on the TensorFlow and JAX backends."""

from __future__ import annotations

from typing import Any, Optional

from ..choices import POOLING_MODES
from ..errors import ConfigError
from ..maths import pooling
from ..maths.ops import keras_ops
from .runtime import checked_keras

keras: Any = checked_keras()


@keras.saving.register_keras_serializable(package="cosent_tf")
class Pooling(keras.layers.Layer):
    """One float32 vector per sentence from a backbone's outputs; the modes, their inputs and the
    mask (1 for real tokens, 0 for padding) are :class:`cosent_tf.layers.Pooling`'s. Padding never
    enters a mean or a max; computed and returned in float32 (safe under mixed_bfloat16).

    Raises:
        ConfigError: ``mode`` is not a pooling mode.
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
        return pooling.pool(keras_ops(), self.mode, inputs, mask)

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


@keras.saving.register_keras_serializable(package="cosent_tf")
class PaddingMask(keras.layers.Layer):
    """1.0 where a token id is not ``padding_id`` (0 in BERT vocabularies), else 0.0: the mask
    :class:`Pooling` takes; see :class:`cosent_tf.layers.PaddingMask`."""

    def __init__(self, padding_id: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.padding_id = padding_id

    def call(self, token_ids: Any) -> Any:
        return pooling.padding_mask(keras_ops(), token_ids, self.padding_id)

    def compute_output_shape(self, input_shape: Any) -> tuple[Optional[int], ...]:
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "padding_id": self.padding_id}
