"""What every loss of the package shares: one value for the whole batch."""

from __future__ import annotations

from typing import Any

from ..process_keras import KERAS_MAJOR, keras, ops


class BatchLoss(keras.losses.Loss):
    """A loss whose ``call`` returns one value for the whole batch (a ranking over its pairs, a
    softmax over its texts), as all of this package's do; a subclass gives ``call``.

    On Keras 3, calling it divides that value by the replicas of the ``tf.distribute`` strategy in
    use and refuses per-example weights; on Keras 2 it is tf-keras's ``Loss`` as it is.
    """

    if KERAS_MAJOR == 3:
        # Keras 3 sums the replicas' gradients and divides a loss by their number only where it
        # reduces a vector of per-example values: a scalar passes as it is
        # (keras.src.losses.loss.reduce_values), which would make every step R times one device's,
        # where tf-keras divides. ``call`` is not divided, so that MatryoshkaLoss sums its inner
        # losses' calls and divides once.
        def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
            if sample_weight is not None:  # Keras would weight the batch's one value and divide it by R itself
                raise ValueError(
                    f"{type(self).__name__} gives one value for the whole batch, which per-example weights "
                    "(sample_weight, class_weight) cannot weight: fit without them"
                )
            return ops().share_of_replicas(super().__call__(y_true, y_pred))
