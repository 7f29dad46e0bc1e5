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
gradient belongs to another network: each micro-batch's dropout is keyed by the optimizer step,
its index and the replica. On Keras 2 it runs inside :func:`cosent_tf.backend.repeatable_dropout`;
on Keras 3 each seed generator of the model (every dropout draws from one) reads a state keyed so
for the call, through a ``keras.StatelessScope`` on TensorFlow and in the state that JAX's
stateless step passes to the model.

The step is written once for TensorFlow, tf-keras's and Keras 3's (a ``tf.GradientTape`` over a
``tf.while_loop`` of micro-batches); on JAX, whose Keras 3 train step is a pure function of the
state Keras passes in, pass 3 is a ``jax.vjp`` of each micro-batch's outputs, the micro-batches
one after another in a ``lax.scan``.
The loss sees every output of the batch at once, so an anchor's candidates are the whole
batch's however it is split. The model must treat rows independently (BERT does: nothing
mixes rows), or, with a Sentence-BERT head, examples (a micro-batch never splits one). Under a
tf.distribute strategy each replica does this on its own slice, while the loss still gathers
the global batch. See docs/performance.md, "Micro-batches".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Optional

from ..process_keras import KERAS_MAJOR, keras, serializable, tf

# The backend the train step runs on: tf-keras and Keras 3's TensorFlow backend share one step
# (tf.GradientTape over a tf.while_loop); JAX's trainer passes the state in and out of a pure step.
BACKEND = "tensorflow" if KERAS_MAJOR == 2 else keras.backend.backend()


def _fold_in(key: Any, data: Any) -> Any:
    """A new stateless random seed from ``key`` (2 integers) and the integer ``data``."""
    if BACKEND == "jax":
        import jax

        return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key, impl="threefry2x32"), data))
    return tf.random.experimental.stateless_fold_in(key, data)


@serializable
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

    def _dropout_seed(self, index: Any, step: Any) -> Any:
        """Keyed by the step, the micro-batch and the replica (replicas hold other pairs)."""
        if BACKEND == "jax":  # one program over the whole batch: no replica of its own
            import jax.numpy as jnp

            return _fold_in(jnp.stack([jnp.uint32(self.seed), step.astype("uint32")]), index)
        replica = tf.distribute.get_replica_context()
        replica = 0 if replica is None else replica.replica_id_in_sync_group
        seed = tf.random.experimental.stateless_fold_in(tf.stack([self.seed, tf.cast(step, tf.int32)]), replica)
        return tf.random.experimental.stateless_fold_in(seed, index)

    def _seed_states(self) -> list[Any]:
        """The state variables of the Keras 3 seed generators that the model's dropout draws from."""
        # Keras 3 keeps a layer's generators in _seed_generators (its `variables` reads them there)
        return [generator.state for layer in self.model._flatten_layers() for generator in layer._seed_generators]

    def _keyed_seed_states(self, seed: Any) -> list[Any]:
        """Each seed generator's state under ``seed``: its own stream, the same on every call."""
        return [
            keras.ops.cast(_fold_in(seed, position), state.dtype) for position, state in enumerate(self._seed_states())
        ]

    def _with_keyed_seeds(self, non_trainable: list[Any], seed: Any) -> list[Any]:
        """``non_trainable`` (the values of ``self.non_trainable_variables``) with the seed
        generators' states keyed by ``seed``: JAX's stateless calls read them there."""
        keyed = dict(zip(map(id, self._seed_states()), self._keyed_seed_states(seed)))
        return [keyed.get(id(variable), value) for variable, value in zip(self.non_trainable_variables, non_trainable)]

    @contextlib.contextmanager
    def _repeatable_dropout(self, seed: Any) -> Iterator[None]:
        """Within the block the model drops the units that ``seed`` picks, however often it is called."""
        if KERAS_MAJOR == 2:
            from ..backend import repeatable_dropout

            with repeatable_dropout(seed):
                yield
            return
        # the generators read their keyed states; their advance is kept in the scope, and dropped
        with keras.StatelessScope(state_mapping=list(zip(self._seed_states(), self._keyed_seed_states(seed)))):
            yield

    def _outputs(self, inputs: Any, index: Any) -> tf.Tensor:
        with self._repeatable_dropout(self._dropout_seed(index, self.optimizer.iterations)):
            return self.model(self._micro_batch(inputs, index), training=True)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        if KERAS_MAJOR == 3 and BACKEND == "tensorflow":
            # the loop over micro-batches runs a batch-dependent number of times; tf-keras runs it
            # without XLA, and so does Keras 3's TensorFlow backend here
            kwargs.setdefault("jit_compile", False)
        super().compile(*args, **kwargs)

    def train_step(self, *arguments: Any) -> Any:
        if BACKEND == "jax":
            return self._stateless_train_step(*arguments)
        (data,) = arguments
        inputs, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        rows = tf.shape(tf.nest.flatten(inputs)[0])[0]
        count = -(-rows // (self.micro_batch_pairs * self.rows_per_pair))

        def more(index, _):
            return index < count

        # parallel_iterations=1: one micro-batch's activations at a time
        def collect(index, outputs):  # 1. outputs, without recording activations
            return index + 1, outputs.write(index, tf.stop_gradient(self._outputs(inputs, index)))

        # rows of any count per micro-batch, but of the outputs' known rank (Keras 3's ops read it)
        rows_of_outputs = tf.TensorShape([None, *self.model.output.shape[1:]])
        empty = tf.TensorArray(self.model.output.dtype, size=count, infer_shape=False, element_shape=rows_of_outputs)
        _, outputs = tf.while_loop(more, collect, (tf.constant(0), empty), parallel_iterations=1)
        outputs = outputs.concat()
        # 2. the loss of the whole batch, and its gradient with respect to the outputs
        scaling = KERAS_MAJOR == 2 and isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer)
        with tf.GradientTape() as tape:
            tape.watch(outputs)
            loss = self.compute_loss(inputs, labels, outputs, sample_weight)
            if KERAS_MAJOR == 3:  # tf-keras's compute_loss tracks the loss itself
                # Keras 3 divides a replica's loss by the replicas; the logged loss is the batch's
                replicas = tf.distribute.get_strategy().num_replicas_in_sync
                self._loss_tracker.update_state(loss * replicas, sample_weight=rows)
                loss = self.optimizer.scale_loss(loss)  # Keras 3's LossScaleOptimizer unscales as it applies
            elif scaling:  # float16: the gradients flow scaled up, and are scaled down before the update
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
        return self.compute_metrics(inputs, labels, outputs, sample_weight)

    def _stateless_train_step(self, state: Any, data: Any) -> Any:
        """JAX's train step: the same three passes on the state Keras passes in, returned updated.

        The shapes are static under JAX: the full micro-batches run in a ``lax.scan`` (one at a
        time, as the while loop above), the last, smaller one after them."""
        import jax
        import jax.numpy as jnp

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        inputs, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        rows = jax.tree_util.tree_leaves(inputs)[0].shape[0]
        size = self.micro_batch_pairs * self.rows_per_pair
        full, left = divmod(rows, size)
        step = optimizer_variables[[v is self.optimizer.iterations for v in self.optimizer.variables].index(True)]

        def outputs(weights, index, piece):
            keyed = self._with_keyed_seeds(non_trainable, self._dropout_seed(index, step))
            return self.stateless_call(weights, keyed, piece, training=True)[0]

        def piece(start, length):
            return jax.tree_util.tree_map(lambda tensor: jax.lax.dynamic_slice_in_dim(tensor, start, length), inputs)

        # 1. outputs, without recording activations
        def collect(_, index):
            return None, jax.lax.stop_gradient(outputs(trainable, index, piece(index * size, size)))

        parts = []
        if full:
            stacked = jax.lax.scan(collect, None, jnp.arange(full))[1]
            parts.append(stacked.reshape((-1, *stacked.shape[2:])))
        if left:
            parts.append(jax.lax.stop_gradient(outputs(trainable, full, piece(full * size, left))))
        all_outputs = jnp.concatenate(parts) if len(parts) > 1 else parts[0]

        # 2. the loss of the whole batch, and its gradient with respect to the outputs
        def batch_loss(batch_outputs):
            loss, (_, _, metrics) = self.stateless_compute_loss(
                trainable, non_trainable, metrics_variables, inputs, labels, batch_outputs, sample_weight
            )
            with keras.StatelessScope(state_mapping=list(zip(self.optimizer.variables, optimizer_variables))):
                scaled = self.optimizer.scale_loss(loss)  # Keras 3's LossScaleOptimizer unscales as it applies
            return scaled, (loss, metrics)

        (_, (loss, metrics_variables)), output_gradients = jax.value_and_grad(batch_loss, has_aux=True)(all_outputs)

        # one output per row, or per example (a Sentence-BERT head on a feature model's pairs): the
        # outputs of `length` rows, which a micro-batch of whole examples makes a whole number
        def outputs_of(length):
            return length * all_outputs.shape[0] // rows

        # 3. each micro-batch again, recording, with its slice of that gradient
        def backward(total, index, length):
            micro_outputs, pullback = jax.vjp(
                lambda weights: outputs(weights, index, piece(index * size, length)), trainable
            )
            cached = jax.lax.dynamic_slice_in_dim(output_gradients, index * outputs_of(size), outputs_of(length))
            (gradients,) = pullback(cached.astype(micro_outputs.dtype))
            return [sum_ + gradient for sum_, gradient in zip(total, gradients)]

        total = [jnp.zeros_like(weight) for weight in trainable]
        if full:
            total = jax.lax.scan(lambda total, index: (backward(total, index, size), None), total, jnp.arange(full))[0]
        if left:
            total = backward(total, full, left)
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, total, trainable)
        logs, metrics_variables = self._update_metrics_variables(
            metrics_variables, loss, inputs, labels, all_outputs, sample_weight
        )
        return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)

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
