"""Mean squared error between the cosine of a pair and its normalised label."""

from ..backend import keras, tf
from ._pairs import interleaved_cosines, pair_labels


def cosine_mse_loss(y_true, y_pred, max_label=1.0):
    """See :class:`CosineMSELoss`."""
    cosines = interleaved_cosines(y_pred)
    targets = pair_labels(y_true, cosines.dtype) / tf.cast(max_label, cosines.dtype)
    return tf.reduce_mean(tf.square(cosines - targets))


@keras.utils.register_keras_serializable(package="cosent_tf")
class CosineMSELoss(keras.losses.Loss):
    """Regress the cosine onto the label scaled to [0, 1]::

        loss = mean_k (cos(u_k, v_k) - label_k / max_label)^2

    Inputs: interleaved vectors (2B, d) and labels (2B,) or (2B, 1) as for CoSENTLoss;
    ``max_label`` is 1 for 0/1 labels, 5 for STS-B scores, 2 for NLI ranks.

    Reference: sentence-transformers' CosineSimilarityLoss (https://www.sbert.net); the MSE
    baseline of Su Jianlin, "CoSENT (1)", https://kexue.fm/archives/8847 (2022).
    """

    def __init__(self, max_label=1.0, name="cosine_mse", **kwargs):
        super().__init__(name=name, **kwargs)
        self.max_label = float(max_label)

    def call(self, y_true, y_pred):
        return cosine_mse_loss(y_true, y_pred, self.max_label)

    def get_config(self):
        return {**super().get_config(), "max_label": self.max_label}
