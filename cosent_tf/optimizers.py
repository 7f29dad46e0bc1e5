"""The engine's optimizer and learning-rate schedule, written once over the process's Keras
(:mod:`cosent_tf.process_keras`): Adam with decoupled weight decay under a warm-up schedule.

On tf-keras Adam is :class:`FusedAdam` (each variable updated by one fused kernel); on Keras 3 it is
``keras.optimizers.Adam`` on any backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from .choices import SCHEDULES
from .process_keras import KERAS_MAJOR, keras, ops, serializable

# Decoupled weight decay skips embeddings, layer norms and biases: regular expressions on bert4keras's
# variable names, whose home is the Keras-free cosent_tf.weight_decay (the Keras 3 trainer's rule too).
from .weight_decay import NOT_DECAYED

if KERAS_MAJOR == 2:
    from .backend import tf

    @serializable
    class FusedAdam(keras.optimizers.Adam):
        """Adam (Kingma & Ba, 2015) exactly as ``keras.optimizers.Adam``, applied by one kernel.

        ``m ← β1·m + (1−β1)·g``, ``v ← β2·v + (1−β2)·g²``,
        ``θ ← θ − lr·√(1−β2ᵗ)/(1−β1ᵗ) · m / (√v + ε)`` for every variable, every step.

        tf-keras's Adam spends about a dozen element-wise ops, each a pass over memory, per
        variable, and treats an embedding's sparse gradient the same dense way (every row's
        moments decay every step), which is costly on a large token embedding. TensorFlow's
        ``ResourceApplyAdam`` does the same arithmetic in one pass; a sparse gradient is first summed
        into a dense one (as ``scatter_add`` would). ``amsgrad`` falls back to Keras's own update.
        It is tf-keras's only: it reaches into that optimizer's slots and TensorFlow's kernels.

        Args:
            learning_rate: a float or a schedule (such as :class:`WarmupSchedule`), as for
                ``keras.optimizers.Adam``; the other arguments are Adam's too (``beta_1``, ``beta_2``,
                ``epsilon``, ``amsgrad``, ``weight_decay``, ...).

        Example:
            >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            >>> model.compile(optimizer=FusedAdam(1e-3), loss="mse")
        """

        def update_step(self, gradient: Union[tf.Tensor, tf.IndexedSlices], variable: tf.Variable) -> Any:
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

    _Adam: Any = FusedAdam
else:
    _Adam = keras.optimizers.Adam


@serializable
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``peak_lr`` reached linearly over ``warmup_steps``, then held (``constant``) or decayed
    linearly to 0 at ``total_steps`` (``linear``).

    At optimizer step ``t`` (counted from 0, before the update): ``peak · t / warmup`` while
    ``t < warmup``; then ``peak`` or ``peak · max(0, (total − t) / (total − warmup))``, as
    transformers' ``get_linear_schedule_with_warmup`` / ``get_constant_schedule_with_warmup``.
    It reads only the optimizer's step, so a resumed run continues the schedule where it was.

    Example:
        >>> schedule = WarmupSchedule(1e-3, total_steps=10, warmup_steps=2)
        >>> [round(float(schedule(step)), 6) for step in (0, 1, 2, 6, 10)]
        [0.0, 0.0005, 0.001, 0.0005, 0.0]
    """

    def __init__(self, peak_lr: float, total_steps: int, warmup_steps: int = 0, decay: str = "linear") -> None:
        if decay not in SCHEDULES:
            raise ValueError(f"unknown schedule {decay!r}; choose one of {', '.join(SCHEDULES)}")
        self.peak_lr, self.total_steps = float(peak_lr), int(total_steps)
        self.warmup_steps, self.decay = int(warmup_steps), decay

    def __call__(self, step: Any) -> Any:
        tensor = ops()
        step = tensor.cast(step, "float32")
        warmup = tensor.cast(self.warmup_steps, "float32")
        factor = tensor.convert_to_tensor(1.0)
        if self.decay == "linear":
            remaining = tensor.cast(self.total_steps, "float32") - step
            factor = tensor.maximum(0.0, remaining / tensor.maximum(1.0, self.total_steps - warmup))
        if self.warmup_steps:
            factor = tensor.where(step < warmup, step / warmup, factor)
        return self.peak_lr * factor

    def get_config(self) -> dict[str, Any]:
        return {
            "peak_lr": self.peak_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
        }


def build_optimizer(
    lr: float,
    total_steps: int,
    weight_decay: float = 0.0,
    warmup: float = 0.0,
    schedule: str = "constant",
    loss_scaling: bool = False,
    not_decayed: Optional[Sequence[Any]] = None,
) -> Any:
    """The engine's optimizer: Adam at ``lr`` (:class:`FusedAdam` on tf-keras), or AdamW-style with
    decoupled ``weight_decay`` (``θ ← θ − lr_t·wd·θ`` before each Adam update, on every variable but
    embeddings, layer norms and biases), under a :class:`WarmupSchedule` when ``warmup`` (a fraction
    of ``total_steps``) or ``schedule="linear"`` asks for one.

    ``not_decayed``: the variables weight decay skips. Left out, they are found by their names
    (:data:`~cosent_tf.weight_decay.NOT_DECAYED`, bert4keras's), which only tf-keras can do: Keras 3
    names a variable by its own short name (``kernel``), not its layer's, so a Keras 3 caller lists them
    (:func:`cosent_tf.keras3.models.not_decayed_variables` finds them by their Google checkpoint names).

    ``loss_scaling`` (for float16 training) wraps it in Keras's dynamic ``LossScaleOptimizer``:
    the loss is multiplied by a scale before the gradients are taken, so that small float16
    gradients do not round to 0, and divided out again; a step whose gradients overflow is
    skipped and halves the scale, and every 2000 finite steps double it."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    rate: Union[float, WarmupSchedule] = lr
    if warmup or schedule != "constant":
        rate = WarmupSchedule(lr, total_steps, round(warmup * total_steps), schedule)
    optimizer = _Adam(rate, weight_decay=weight_decay or None)
    if weight_decay:
        if not_decayed is not None:
            optimizer.exclude_from_weight_decay(var_list=list(not_decayed))
        elif KERAS_MAJOR == 2:
            optimizer.exclude_from_weight_decay(var_names=list(NOT_DECAYED))
        else:
            raise ValueError("on Keras 3 weight decay needs the variables it skips (not_decayed)")
    if loss_scaling:
        return keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer
