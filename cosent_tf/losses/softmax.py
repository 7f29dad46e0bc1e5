"""Sentence-BERT's softmax classification objective on [u, v, |u - v|]."""

from __future__ import annotations

from typing import Any, Optional

from ..maths import softmax as maths
from ..process_keras import keras, ops, serializable
from .base import BatchLoss


@serializable
class SentenceBertHead(keras.layers.Layer):
    """Training head of Sentence-BERT: log softmax(W [u, v, |u - v|] + b) for every pair.

    Input: interleaved sentence vectors (2B, d); output: class log-probabilities (B, classes)
    in float32. Used only for training; the encoder is evaluated by cosine. Log-probabilities
    rather than probabilities, so that the loss is exact on every backend (JAX cannot recover the
    logits behind a softmax, and a probability's cross-entropy is clipped at 1e-7).

    Args:
        num_classes: the number of classes (2 for matching, 3 for NLI).
        **kwargs: Keras layer arguments (``name``; ``dtype`` defaults to float32).

    Example:
        >>> SentenceBertHead(3)(tf.random.normal([4, 8])).shape  # 2 pairs of 8-wide vectors
        TensorShape([2, 3])
    """

    def __init__(self, num_classes: int = 2, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.classifier = keras.layers.Dense(
            num_classes,
            dtype="float32",
            name="classifier",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

    def build(self, input_shape: Any) -> None:
        self.classifier.build((None, 3 * input_shape[-1]))
        super().build(input_shape)

    def call(self, vectors: Any) -> Any:
        return ops().log_softmax(self.classifier(maths.pair_features(ops(), vectors)), axis=-1)

    def compute_output_shape(self, input_shape: Any) -> tuple[Optional[int], int]:
        rows = input_shape[0]
        return (None if rows is None else rows // 2, self.num_classes)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_classes": self.num_classes}


def sentence_bert_softmax_loss(y_true: Any, y_pred: Any) -> Any:
    """Cross-entropy of the head's log-probabilities; see :class:`SentenceBertSoftmaxLoss`."""
    return maths.sentence_bert_log_softmax(ops(), y_true, y_pred)


@serializable
class SentenceBertSoftmaxLoss(BatchLoss):
    """Sentence-BERT classification loss (Reimers & Gurevych, 2019)::

        loss = mean_k  -log softmax(W [u_k, v_k, |u_k - v_k|] + b)[label_k]

    Called as ``loss(y_true, y_pred)`` on

    * ``y_pred``: log-probabilities (B, C) from :class:`SentenceBertHead` placed on the encoder's
      interleaved output (C = 2 for matching, 3 for NLI);
    * ``y_true``: the interleaved labels (2B,) or (2B, 1) of the pair batch, integer classes in
      [0, C). STS-B scores must be binarised first (the original uses label > 2.5);

    it returns the mean cross-entropy, a float32 scalar.

    Args:
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Example:
        >>> log_probabilities = tf.math.log(tf.constant([[0.5, 0.5], [0.5, 0.5]]))
        >>> round(float(SentenceBertSoftmaxLoss()(tf.constant([1.0, 1.0, 0.0, 0.0]), log_probabilities)), 4)
        0.6931

    Reference: Reimers & Gurevych, "Sentence-BERT", EMNLP 2019, section 3.
    """

    def __init__(self, name: str = "sentence_bert_softmax", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return sentence_bert_softmax_loss(y_true, y_pred)
