"""Sentence-BERT's softmax classification objective on [u, v, |u - v|]."""

from ..backend import keras, tf
from ._pairs import check_interleaved


@keras.utils.register_keras_serializable(package="cosent_tf")
class SentenceBertHead(keras.layers.Layer):
    """Training head of Sentence-BERT: softmax(W [u, v, |u - v|] + b) for every pair.

    Input: interleaved sentence vectors (2B, d); output: class probabilities (B, classes)
    in float32. Used only for training; the encoder is evaluated by cosine.
    """

    def __init__(self, num_classes=2, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.classifier = keras.layers.Dense(
            num_classes,
            activation="softmax",
            dtype="float32",
            name="classifier",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

    def call(self, vectors):
        with tf.control_dependencies(check_interleaved(vectors)):
            vectors = tf.cast(vectors, tf.float32)
        u, v = vectors[::2], vectors[1::2]
        return self.classifier(tf.concat([u, v, tf.abs(u - v)], axis=1))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


def sentence_bert_softmax_loss(y_true, y_pred):
    """Cross-entropy of the head's probabilities; see :class:`SentenceBertSoftmaxLoss`."""
    labels = tf.cast(tf.reshape(y_true, [-1])[::2], tf.int32)
    probs = tf.cast(y_pred, tf.float32)
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, probs))


@keras.utils.register_keras_serializable(package="cosent_tf")
class SentenceBertSoftmaxLoss(keras.losses.Loss):
    """Sentence-BERT classification loss (Reimers & Gurevych, 2019)::

        loss = mean_k  -log softmax(W [u_k, v_k, |u_k - v_k|] + b)[label_k]

    Inputs:
        y_pred: probabilities (B, C) from :class:`SentenceBertHead` placed on the encoder's
            interleaved output (C = 2 for matching, 3 for NLI).
        y_true: the interleaved labels (2B,) or (2B, 1) of the pair batch, integer classes
            in [0, C). STS-B scores must be binarised first (the original uses label > 2.5).

    Reference: Reimers & Gurevych, "Sentence-BERT", EMNLP 2019, section 3.
    """

    def __init__(self, name="sentence_bert_softmax", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return sentence_bert_softmax_loss(y_true, y_pred)
