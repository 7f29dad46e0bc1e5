"""The transformer families cosent-tf builds, and what their bert4keras classes need fixed.

:data:`ARCHITECTURES` (plain data, in :mod:`cosent_tf.models.families`) is the table
``build_encoder(architecture=...)`` reads, beside TASKS, LOSSES, RECIPES and STRATEGIES; each row
names its bert4keras class, which :func:`transformer_class` resolves. Two fixes are made to
bert4keras's classes here:

* Since Keras 2.10 an unseeded initializer instance repeats its values on every call, and
  bert4keras hands one instance to the query, key, value and output kernels of an attention
  block, so a model built from scratch would start with Q = K = V = O.
  :func:`transformer_class` gives each family :class:`IndependentTruncatedNormal` instead.
* bert4keras's attention and feed-forward blocks make their Dense layers from module globals;
  :func:`install_token_dense` (called once, when this module is imported) makes them
  :class:`TokenDense`, so that oneDNN fuses matmul, bias and activation.
"""

from __future__ import annotations

from typing import Any, Optional

# cosent_tf.backend first: it starts TensorFlow with its start-up lines held back, and bert4keras
# would start it otherwise.
from ..backend import keras, tf

# isort: split
from bert4keras import layers as _b4k_layers
from bert4keras import models as _b4k_models

from ..environment import check_weights_may_change
from .families import ARCHITECTURES, Architecture, get_architecture  # noqa: F401 (their table, re-exported)


@keras.utils.register_keras_serializable(package="cosent_tf")
class IndependentTruncatedNormal(keras.initializers.Initializer):
    """BERT's truncated normal initializer, drawing new values on every call.

    Values come from TensorFlow's stateful generator, so ``keras.utils.set_random_seed``
    makes a whole model reproducible while every kernel still differs from the others.

    Args:
        stddev: the standard deviation before truncation.

    Example:
        >>> kernel = IndependentTruncatedNormal(0.02)((768, 768))  # doctest: +SKIP
    """

    def __init__(self, stddev: float = 0.02) -> None:
        self.stddev = stddev

    def __call__(self, shape: Any, dtype: Any = None, **kwargs: Any) -> tf.Tensor:
        dtype = tf.as_dtype(dtype or keras.backend.floatx())
        return tf.random.truncated_normal(shape, stddev=self.stddev, dtype=dtype)

    def get_config(self) -> dict:
        return {"stddev": self.stddev}


class _IndependentInitializer:
    @property
    def initializer(self) -> IndependentTruncatedNormal:
        return IndependentTruncatedNormal(stddev=0.02)


def transformer_class(name: str) -> type:
    """The bert4keras transformer class of architecture ``name``, with a working initializer.

    Args:
        name: a key of :data:`ARCHITECTURES`.

    Returns:
        A subclass of its bert4keras class (same name) whose weights start independent.

    Raises:
        ConfigError: an unknown name.

    Example:
        >>> transformer = transformer_class("bert")(**config)  # doctest: +SKIP
    """
    base = getattr(_b4k_models, get_architecture(name).base)
    return type(base.__name__, (_IndependentInitializer, base), {})


class TokenDense(keras.layers.Dense):
    """Dense over the last axis that computes a rank-3 or higher input as one 2-D matmul.

    Same arithmetic as Keras's Dense (whose ``tensordot`` also multiplies a 2-D view), but
    bias and activation come before the reshape back, so TensorFlow's oneDNN remapper fuses
    matmul, bias and GELU into one op instead of three passes over the hidden states (see
    docs/performance.md, 'TokenDense'). Traced for training, it refuses to run where
    TensorFlow takes weights for constants (:func:`cosent_tf.environment.check_weights_may_change`).

    Args:
        units, activation, ...: as Keras's Dense.

    Example:
        >>> layer = TokenDense(8, activation="gelu")
        >>> layer(tf.zeros([2, 5, 4])).shape
        TensorShape([2, 5, 8])
    """

    def call(self, inputs: Any, training: Optional[bool] = None) -> Any:
        if training is True:  # any training step, model.fit's or a custom loop's, traces this
            check_weights_may_change()
        rank = inputs.shape.rank if isinstance(inputs, tf.Tensor) else None
        if rank is None or rank <= 2:
            return super().call(inputs)
        if inputs.dtype.base_dtype != self._compute_dtype_object.base_dtype:
            inputs = tf.cast(inputs, self._compute_dtype_object)
        outputs = tf.matmul(tf.reshape(inputs, [-1, inputs.shape[-1]]), self.kernel)
        if training is True and outputs.dtype == tf.bfloat16:
            # Fused with bias and GELU, a matmul runs oneDNN's inner product, whose AMX kernel
            # needs weights TensorFlow may take for constants, not weights a step changes. Kept
            # apart (grappler fuses across neither this op nor a cast), it runs oneDNN's matmul,
            # which reaches AMX as the backward pass's matmuls do (docs/performance.md,
            # 'bf16 training matmuls').
            outputs = tf.ensure_shape(outputs, outputs.shape)
        if self.use_bias:
            outputs = tf.nn.bias_add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        outputs = tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [self.units]], axis=0))
        outputs.set_shape(inputs.shape[:-1].concatenate(self.units))
        return outputs


def install_token_dense() -> None:
    """Make bert4keras's attention and feed-forward blocks build :class:`TokenDense` layers.

    Those blocks take their Dense class from the module globals of ``bert4keras.layers`` and
    ``bert4keras.models`` when a model is built; this replaces both. Idempotent.

    Example:
        >>> install_token_dense()
    """
    _b4k_layers.Dense = _b4k_models.Dense = TokenDense


# Every model cosent-tf builds goes through this module (transformer_class), so installing
# here covers them all; bert4keras used without cosent_tf.models keeps its own Dense.
install_token_dense()
