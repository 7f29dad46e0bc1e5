"""What every loss of the package shares: one value for the whole batch."""

from __future__ import annotations

from typing import Any

from ..process_keras import KERAS_MAJOR, keras, ops


class BatchLoss(keras.losses.Loss):
    """A loss whose ``call`` returns one value for the whole batch (a ranking over its pairs, a
    softmax over its texts), as all of this package's do; a subclass gives ``call``.

    Called, it refuses per-example weights (``sample_weight``, and so ``class_weight``), which one
    value for the batch cannot take; on Keras 3 it also divides that value by the replicas of the
    ``tf.distribute`` strategy in use, as tf-keras does itself.

    Raises:
        ValueError: (when called) ``sample_weight`` is given.
    """

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        if sample_weight is not None:
            raise ValueError(
                f"{type(self).__name__} gives one value for the whole batch, which per-example weights "
                "(sample_weight, class_weight) cannot weight: fit without them"
            )
        value = super().__call__(y_true, y_pred)
        # Keras 3 sums the replicas' gradients and divides a loss by their number only where it
        # reduces a vector of per-example values: a scalar passes as it is
        # (keras.src.losses.loss.reduce_values), which would make every step R times one device's.
        # ``call`` is not divided, so that MatryoshkaLoss sums its inner losses' calls and divides once.
        return ops().share_of_replicas(value) if KERAS_MAJOR == 3 else value
