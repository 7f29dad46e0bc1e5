"""The Keras 3 losses: the Keras 2 engine's (:mod:`cosent_tf.losses`), with the same names,
arguments and configs, computed by the same maths (:mod:`cosent_tf.maths`) on ``keras.ops``, so
that they run on the TensorFlow and JAX backends. Each class's formula is in its Keras 2
namesake's docstring; the shared pieces are the maths modules named in each class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..maths import angle, contrastive, cosent_ibn, interaction, matryoshka, mnrl, mse, pairs, softmax
from ..maths.matryoshka import check_dims
from ..maths.mnrl import QUERY_TO_DOC, check_directions, check_group_size
from ..maths.ops import keras_ops
from .runtime import checked_keras

keras: Any = checked_keras()
serializable = keras.saving.register_keras_serializable(package="cosent_tf")


class BatchLoss(keras.losses.Loss):
    """A loss whose ``call`` returns one value for the whole batch, as all of these do.

    Keras 3 sums the gradients of the replicas of a ``tf.distribute`` strategy and divides a loss by
    their number only where it reduces a vector of per-example values: a scalar passes as it is
    (``keras.src.losses.loss.reduce_values``), which would make every step R times one device's.
    Called, this loss is divided by R, as tf-keras divides the Keras 2 losses; ``call`` is not, so
    that :class:`MatryoshkaLoss` sums its inner losses' calls and divides once.
    """

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        if sample_weight is not None:  # Keras would weight the batch's one value and divide it by R itself
            raise ValueError(
                f"{type(self).__name__} gives one value for the whole batch, which per-example weights "
                "(sample_weight, class_weight) cannot weight: fit without them"
            )
        return keras_ops().share_of_replicas(super().__call__(y_true, y_pred))


@serializable
class CoSENTLoss(BatchLoss):
    """CoSENT for a feature (siamese) model (:mod:`cosent_tf.maths.pairs`); see
    :class:`cosent_tf.losses.CoSENTLoss`."""

    def __init__(self, scale: float = 20.0, global_batch: bool = True, name: str = "cosent", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return pairs.cosent(keras_ops(), y_true, y_pred, self.scale, self.global_batch)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "global_batch": self.global_batch}


@serializable
class InteractionCoSENTLoss(BatchLoss):
    """CoSENT on an interaction model's scores (:mod:`cosent_tf.maths.interaction`); see
    :class:`cosent_tf.losses.InteractionCoSENTLoss`."""

    def __init__(self, global_batch: bool = True, name: str = "interaction_cosent", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return interaction.interaction_cosent(keras_ops(), y_true, y_pred, self.global_batch)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "global_batch": self.global_batch}


@serializable
class SentenceBertHead(keras.layers.Layer):
    """Sentence-BERT's training head: log softmax(W [u, v, |u - v|] + b) for every pair of the
    interleaved vectors (2B, d) -> (B, classes) in float32 (:mod:`cosent_tf.maths.softmax`); see
    :class:`cosent_tf.losses.SentenceBertHead`. Its Dense layer is named ``classifier``, as there.
    It returns log-probabilities where the Keras 2 head returns probabilities, so that the loss is
    exact on every backend (JAX cannot recover the logits from probabilities).
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

    def call(self, vectors: Any) -> Any:
        return keras.ops.log_softmax(self.classifier(softmax.pair_features(keras_ops(), vectors)), axis=-1)

    def compute_output_shape(self, input_shape: Any) -> tuple[Optional[int], int]:
        rows = input_shape[0]
        return (None if rows is None else rows // 2, self.num_classes)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_classes": self.num_classes}


@serializable
class SentenceBertSoftmaxLoss(BatchLoss):
    """Cross-entropy of :class:`SentenceBertHead`'s log-probabilities (:mod:`cosent_tf.maths.softmax`);
    see :class:`cosent_tf.losses.SentenceBertSoftmaxLoss`."""

    def __init__(self, name: str = "sentence_bert_softmax", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return softmax.sentence_bert_log_softmax(keras_ops(), y_true, y_pred)


@serializable
class CosineMSELoss(BatchLoss):
    """The cosine regressed onto the label / max_label (:mod:`cosent_tf.maths.mse`); see
    :class:`cosent_tf.losses.CosineMSELoss`."""

    def __init__(self, max_label: float = 1.0, name: str = "cosine_mse", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.max_label = float(max_label)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return mse.cosine_mse(keras_ops(), y_true, y_pred, self.max_label)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_label": self.max_label}


@serializable
class ThresholdContrastiveLoss(BatchLoss):
    """Positives pulled to cosine 1, negatives pushed below ε (:mod:`cosent_tf.maths.contrastive`);
    see :class:`cosent_tf.losses.ThresholdContrastiveLoss`."""

    def __init__(
        self, epsilon: float = 0.5, positive_above: float = 0.5, name: str = "threshold_contrastive", **kwargs: Any
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.epsilon = float(epsilon)
        self.positive_above = float(positive_above)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return contrastive.threshold_contrastive(keras_ops(), y_true, y_pred, self.epsilon, self.positive_above)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "epsilon": self.epsilon, "positive_above": self.positive_above}


@serializable
class MultipleNegativesRankingLoss(BatchLoss):
    """In-batch negatives (InfoNCE) over groups of ``group_size`` rows (:mod:`cosent_tf.maths.mnrl`);
    see :class:`cosent_tf.losses.MultipleNegativesRankingLoss`.

    Raises:
        ValueError: ``group_size`` below 2, an unknown direction or partition mode; and (when
            called) a batch whose rows are not a multiple of ``group_size``.
    """

    def __init__(
        self,
        scale: float = 20.0,
        group_size: int = 2,
        directions: Sequence[str] = (QUERY_TO_DOC,),
        partition_mode: str = "joint",
        global_batch: bool = True,
        name: str = "multiple_negatives_ranking",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.group_size = check_group_size(group_size)
        self.directions = check_directions(directions, partition_mode)
        self.partition_mode = partition_mode
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return mnrl.multiple_negatives_ranking(
            keras_ops(),
            y_true,
            y_pred,
            self.scale,
            self.group_size,
            self.directions,
            self.partition_mode,
            self.global_batch,
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "scale": self.scale,
            "group_size": self.group_size,
            "directions": list(self.directions),
            "partition_mode": self.partition_mode,
            "global_batch": self.global_batch,
        }


@serializable
class AnglELoss(BatchLoss):
    """CoSENT's ranking on AnglE's complex-space score (:mod:`cosent_tf.maths.angle`); see
    :class:`cosent_tf.losses.AnglELoss`."""

    def __init__(self, scale: float = 20.0, global_batch: bool = True, name: str = "angle", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return angle.angle(keras_ops(), y_true, y_pred, self.scale, self.global_batch)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "global_batch": self.global_batch}


@serializable
class CoSENTIBNLoss(BatchLoss):
    """AnglE's mix: weighted CoSENT, in-batch negatives over the positive pairs, and the angle
    ranking (:mod:`cosent_tf.maths.cosent_ibn`); see :class:`cosent_tf.losses.CoSENTIBNLoss`."""

    def __init__(
        self,
        cosine_w: float = 0.0,
        ibn_w: float = 20.0,
        angle_w: float = 1.0,
        cosine_scale: float = 20.0,
        ibn_scale: float = 20.0,
        angle_scale: float = 20.0,
        positive_above: float = 0.5,
        directions: Sequence[str] = (QUERY_TO_DOC,),
        global_batch: bool = True,
        name: str = "cosent_ibn",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.cosine_w, self.ibn_w, self.angle_w = float(cosine_w), float(ibn_w), float(angle_w)
        self.cosine_scale, self.ibn_scale, self.angle_scale = float(cosine_scale), float(ibn_scale), float(angle_scale)
        self.positive_above = float(positive_above)
        self.directions = check_directions(directions, "joint")
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return cosent_ibn.cosent_ibn(
            keras_ops(),
            y_true,
            y_pred,
            self.cosine_w,
            self.ibn_w,
            self.angle_w,
            self.cosine_scale,
            self.ibn_scale,
            self.angle_scale,
            self.positive_above,
            self.directions,
            self.global_batch,
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "cosine_w": self.cosine_w,
            "ibn_w": self.ibn_w,
            "angle_w": self.angle_w,
            "cosine_scale": self.cosine_scale,
            "ibn_scale": self.ibn_scale,
            "angle_scale": self.angle_scale,
            "positive_above": self.positive_above,
            "directions": list(self.directions),
            "global_batch": self.global_batch,
        }


@serializable
class MatryoshkaLoss(BatchLoss):
    """A Keras 3 feature loss of this module at several widths of the vectors
    (:mod:`cosent_tf.maths.matryoshka`); see :class:`cosent_tf.losses.MatryoshkaLoss`.

    Raises:
        ValueError: bad ``dims`` or ``weights``, or a ``loss`` that is not a Keras 3 loss; when
            called, a width above the vectors' width.
    """

    def __init__(
        self,
        loss: Any,
        dims: Sequence[int],
        weights: Optional[Sequence[float]] = None,
        name: str = "matryoshka",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        if not isinstance(loss, keras.losses.Loss):
            raise ValueError(f"MatryoshkaLoss wraps a Keras 3 loss (cosent_tf.keras3.CoSENTLoss ...), got {loss!r}")
        self.loss, (self.dims, self.weights) = loss, check_dims(dims, weights)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return matryoshka.matryoshka(keras_ops(), self.loss.call, y_true, y_pred, self.dims, self.weights)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "loss": keras.losses.serialize(self.loss),
            "dims": self.dims,
            "weights": self.weights,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> MatryoshkaLoss:
        config = dict(config)
        config["loss"] = keras.losses.deserialize(config["loss"])
        return cls(**config)
