"""Large batches in small memory: the gradient of a whole batch, computed in micro-batches.

CoSENT ranks every pair of a batch against every other, and an in-batch negatives loss
(MultipleNegativesRankingLoss, CoSENTIBNLoss) scores every anchor against every candidate of
the batch, so their gradient needs the whole batch at once, and a batch's activations grow
with its size. The gradient-cache technique (Gao, Zhang, Han & Callan, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup", RepL4NLP 2021) splits that in two
passes over micro-batches of whole examples (a pair, or a group of an anchor, its positive and
its hard negatives):

1. run the model on each micro-batch without recording activations, and keep only its
   outputs (sentence vectors, or a cross-encoder's scores);
2. take the loss over all the outputs, and its gradient g with respect to them;
3. run each micro-batch again, recording, and back-propagate its slice of g into the
   weights (the gradient of sum(outputs * g)); the sum over micro-batches is the gradient of
   the whole batch's loss.

Memory holds one micro-batch's activations plus the batch's outputs; time is about one
extra forward pass. Dropout must drop the same units in both runs of a micro-batch, or the
gradient belongs to another network: each micro-batch runs inside
:func:`cosent_tf.backend.repeatable_dropout`, keyed by the optimizer step, its index and
the replica.
The loss sees every output of the batch at once, so an anchor's candidates are the whole
batch's however it is split. The model must treat rows independently (BERT does: nothing
mixes rows), or, with a Sentence-BERT head, examples (a micro-batch never splits one). Under a
tf.distribute strategy each replica does this on its own slice, while the loss still gathers
the global batch. See docs/performance.md, "Micro-batches".
"""

from __future__ import annotations

from typing import Any, Optional

from ..backend import keras, repeatable_dropout, tf


@keras.utils.register_keras_serializable(package="cosent_tf")
class GradientCacheModel(keras.Model):
    """Trains ``model`` on each batch in micro-batches of ``micro_batch_pairs`` examples with
    the gradient of the whole batch.

    An example is ``rows_per_pair`` consecutive rows of the batch, which a micro-batch never
    splits: 2 for a feature model's interleaved pairs (rows 2k and 2k+1 are pair k), G for
    the groups of an in-batch negatives loss (an anchor, its positive and G - 2 hard
    negatives: ``MultipleNegativesRankingLoss(group_size=G)``), 1 for an interaction model's
    concatenated pairs. The keyword keeps its name, as saved configs hold it. Compile it as
    ``model`` would be compiled; the update equals the one ``model`` makes on the whole batch.

    Args:
        model: the Keras model to train; its weights are the only ones.
        micro_batch_pairs: the examples of one micro-batch; the last micro-batch of a batch
            holds what is left.
        rows_per_pair: the rows per example (see above).
        seed: keys the dropout masks (with the optimizer step, the micro-batch and the
            replica), so that both passes over a micro-batch, a rerun and a resumed run drop
            the same units.
        **kwargs: what ``keras.Model`` takes (``name``).

    Raises:
        ValueError: ``micro_batch_pairs`` or ``rows_per_pair`` is not positive.

    Example:
        >>> from cosent_tf.losses import MultipleNegativesRankingLoss
        >>> encoder = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
        >>> cached = GradientCacheModel(encoder, micro_batch_pairs=3, rows_per_pair=3)
        >>> cached.compile(optimizer="sgd", loss=MultipleNegativesRankingLoss(group_size=3))
        >>> groups = tf.random.normal((24, 5))  # 8 groups of an anchor, a positive, a negative
        >>> _ = cached.fit(groups, tf.zeros(24), batch_size=24, verbose=0)  # micro-batches of 3, 3, 2 groups
    """

    def __init__(
        self, model: keras.Model, micro_batch_pairs: int, rows_per_pair: int = 2, seed: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if micro_batch_pairs < 1:
            raise ValueError(f"micro_batch_pairs must be positive, got {micro_batch_pairs}")
        if rows_per_pair < 1:
            raise ValueError(f"rows_per_pair (the rows of one example) must be positive, got {rows_per_pair}")
        self.model = model
        self.micro_batch_pairs = int(micro_batch_pairs)
        self.rows_per_pair = int(rows_per_pair)
        self.seed = int(seed)
        self.built = True  # it has no weights but the wrapped model's, which is built

    def call(self, inputs: Any, training: Optional[bool] = None) -> Any:
        return self.model(inputs, training=training)

    def _micro_batch(self, inputs: Any, index: Any) -> Any:
        rows = self.micro_batch_pairs * self.rows_per_pair
        return tf.nest.map_structure(lambda tensor: tensor[index * rows : (index + 1) * rows], inputs)

    def _dropout_seed(self, index: Any) -> tf.Tensor:
        """Keyed by the step, the micro-batch and the replica (replicas hold other pairs)."""
        step = tf.cast(self.optimizer.iterations, tf.int32)
        replica = tf.distribute.get_replica_context()
        replica = 0 if replica is None else replica.replica_id_in_sync_group
        seed = tf.random.experimental.stateless_fold_in(tf.stack([self.seed, step]), replica)
        return tf.random.experimental.stateless_fold_in(seed, index)

    def _outputs(self, inputs: Any, index: Any) -> tf.Tensor:
        with repeatable_dropout(self._dropout_seed(index)):
            return self.model(self._micro_batch(inputs, index), training=True)

    def train_step(self, data: Any) -> dict[str, Any]:
        inputs, labels = data
        rows = tf.shape(tf.nest.flatten(inputs)[0])[0]
        count = -(-rows // (self.micro_batch_pairs * self.rows_per_pair))

        def more(index, _):
            return index < count

        # parallel_iterations=1: one micro-batch's activations at a time
        def collect(index, outputs):  # 1. outputs, without recording activations
            return index + 1, outputs.write(index, tf.stop_gradient(self._outputs(inputs, index)))

        empty = tf.TensorArray(self.model.output.dtype, size=count, infer_shape=False)
        _, outputs = tf.while_loop(more, collect, (tf.constant(0), empty), parallel_iterations=1)
        outputs = outputs.concat()
        # 2. the loss of the whole batch, and its gradient with respect to the outputs
        scaling = isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer)
        with tf.GradientTape() as tape:
            tape.watch(outputs)
            loss = self.compute_loss(inputs, labels, outputs)
            if scaling:  # float16: the gradients flow scaled up, and are scaled down before the update
                loss = self.optimizer.get_scaled_loss(loss)
        output_gradients = tape.gradient(loss, outputs)
        # one output per row, or per example (a Sentence-BERT head on a feature model's pairs)
        per_micro_batch = self.micro_batch_pairs * self.rows_per_pair * tf.shape(outputs)[0] // rows
        weights = self.trainable_variables

        def accumulate(index, total):  # 3. each micro-batch again, recording, with its slice of that gradient
            with tf.GradientTape() as tape:
                micro_outputs = self._outputs(inputs, index)
                start = index * per_micro_batch
                cached = tf.stop_gradient(output_gradients[start : start + per_micro_batch])
                surrogate = tf.reduce_sum(tf.cast(micro_outputs, cached.dtype) * cached)
            gradients = tape.gradient(surrogate, weights, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return index + 1, tuple(sum_ + tf.convert_to_tensor(g) for sum_, g in zip(total, gradients))

        zeros = tuple(tf.zeros_like(weight) for weight in weights)
        _, total = tf.while_loop(more, accumulate, (tf.constant(0), zeros), parallel_iterations=1)
        if scaling:
            total = self.optimizer.get_unscaled_gradients(list(total))
        self.optimizer.apply_gradients(zip(total, weights))
        return self.compute_metrics(inputs, labels, outputs, None)

    def get_config(self) -> dict[str, Any]:
        return {
            "model": keras.layers.serialize(self.model),
            "micro_batch_pairs": self.micro_batch_pairs,
            "rows_per_pair": self.rows_per_pair,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Optional[dict[str, Any]] = None) -> GradientCacheModel:
        config = dict(config)
        config["model"] = keras.layers.deserialize(config["model"], custom_objects=custom_objects)
        return cls(**config)
