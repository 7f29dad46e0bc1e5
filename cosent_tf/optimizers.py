"""Optimizers: Keras's Adam with each variable updated by one fused kernel."""

from .backend import keras, tf


@keras.utils.register_keras_serializable(package="cosent_tf")
class FusedAdam(keras.optimizers.Adam):
    """Adam (Kingma & Ba, 2015) exactly as ``keras.optimizers.Adam``, applied by one kernel.

    ``m ← β1·m + (1−β1)·g``, ``v ← β2·v + (1−β2)·g²``,
    ``θ ← θ − lr·√(1−β2ᵗ)/(1−β1ᵗ) · m / (√v + ε)`` for every variable, every step.

    tf-keras's Adam spends about a dozen element-wise ops, each a pass over memory, per
    variable, and treats an embedding's sparse gradient the same dense way (every row's
    moments decay every step), which is costly on a large token embedding. TensorFlow's
    ``ResourceApplyAdam`` does the same arithmetic in one pass; a sparse gradient is first summed into a dense one (as
    ``scatter_add`` would). ``amsgrad`` falls back to Keras's own update.
    """

    def update_step(self, gradient, variable):
        if self.amsgrad:
            return super().update_step(gradient, variable)
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1_power = tf.pow(tf.cast(self.beta_1, dtype), step)
        beta_2_power = tf.pow(tf.cast(self.beta_2, dtype), step)
        epsilon = tf.cast(self.epsilon, dtype)
        if self.adaptive_epsilon:
            epsilon = epsilon * tf.sqrt(1 - beta_2_power)
        index = self._index_dict[self._var_key(variable)]
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=beta_1_power,
            beta2_power=beta_2_power,
            lr=tf.cast(self.learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=epsilon,
            grad=tf.cast(gradient, dtype),
        )
