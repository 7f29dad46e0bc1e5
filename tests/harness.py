"""One test for every Keras object of the package: layers, losses, optimizers and models.

``run_keras_object_test`` checks what Keras needs of an object whatever it computes: that its
config rebuilds an equal object, that it survives a ``.keras`` file inside a model, that it
gives float32 results under the ``mixed_bfloat16`` policy, and that gradients flow through it.
What an object computes stays the subject of its own tests; its Keras contract is one call.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import numpy as np

from cosent_tf.backend import dtype_policy, keras, tf

# Either keyword arguments or a function making them, for objects whose arguments must be built
# under the dtype policy being checked (a model wrapping another model).
InitKwargs = Union[Mapping[str, Any], Callable[[], Mapping[str, Any]]]

MIXED_POLICY = "mixed_bfloat16"


def run_keras_object_test(
    cls: type,
    init_kwargs: InitKwargs,
    inputs: Any,
    *,
    y_true: Optional[Any] = None,
    call_kwargs: Optional[Mapping[str, Any]] = None,
    save: bool = True,
    mixed_precision: bool = True,
    gradients: bool = True,
    tolerance: float = 1e-6,
) -> None:
    """Check the Keras contract of ``cls(**init_kwargs)``; raise AssertionError where it breaks.

    Args:
        cls: a Layer, Loss, Optimizer or Model subclass.
        init_kwargs: its keyword arguments, or a function returning them (called again under the
            mixed policy, so that what it builds takes that policy).
        inputs: what it is called on: a layer's or model's inputs (an array or a list of them), a
            loss's ``y_pred``, or the features an optimizer's test model is trained on.
        y_true: a loss's labels (required for a loss).
        call_kwargs: further arguments of a layer's call (``mask=``); arrays become model inputs
            when the layer is saved inside a model.
        save: also save and load the object inside a model in a ``.keras`` file.
        mixed_precision: also check float32 results under ``mixed_bfloat16``.
        gradients: also check that a gradient reaches every trainable weight (and every float input).
        tolerance: absolute and relative tolerance of "the same output".
    """
    make_kwargs = init_kwargs if callable(init_kwargs) else (lambda: init_kwargs)
    checks = _OptimizerChecks if issubclass(cls, keras.optimizers.Optimizer) else None
    if issubclass(cls, keras.losses.Loss):
        if y_true is None:
            raise TypeError("a loss's test needs y_true")
        checks = _LossChecks
    elif issubclass(cls, keras.layers.Layer):  # keras.Model is a Layer too
        checks = _LayerChecks
    if checks is None:
        raise TypeError(f"{cls.__name__} is no Keras layer, loss, optimizer or model")
    tester = checks(cls, make_kwargs, inputs, y_true, dict(call_kwargs or {}), tolerance)
    tester.config_round_trip()
    if save:
        with tempfile.TemporaryDirectory(prefix="cosent-tf-harness-") as folder:
            tester.save_and_load(os.path.join(folder, "object.keras"))
    if mixed_precision:
        with dtype_policy(MIXED_POLICY):
            tester.mixed_precision()
    if gradients:
        tester.gradients()


def _same(actual: Any, expected: Any, tolerance: float, what: str) -> None:
    for got, want in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tolerance, atol=tolerance, err_msg=what)


def _plain(config: Any) -> Any:
    """``config`` as its JSON form reads back: a tuple (an input shape) is a list there, and an
    optimizer's learning rate schedule (which tf-keras puts in its config as the object) is
    its serialised form."""
    if isinstance(config, keras.optimizers.schedules.LearningRateSchedule):
        return _plain(keras.optimizers.schedules.serialize(config))
    if isinstance(config, dict):
        return {key: _plain(value) for key, value in config.items()}
    if isinstance(config, (list, tuple)):
        return [_plain(value) for value in config]
    return config


def _same_config(actual: Any, expected: Any) -> bool:
    return _plain(actual) == _plain(expected)


def _floating(value: Any) -> bool:
    return tf.as_dtype(np.asarray(value).dtype if not tf.is_tensor(value) else value.dtype).is_floating


def _as_tensors(structure: Any) -> Any:
    return tf.nest.map_structure(tf.convert_to_tensor, structure)


def _all_float32(structure: Any) -> bool:
    return all(tensor.dtype == tf.float32 for tensor in tf.nest.flatten(structure) if tensor.dtype.is_floating)


def _assert_reaches(gradients: list, names: list, what: str) -> None:
    for gradient, name in zip(gradients, names):
        assert gradient is not None, f"no gradient reaches {what} {name}"
        values = tf.convert_to_tensor(gradient).numpy()
        assert np.all(np.isfinite(values)), f"the gradient of {what} {name} is not finite"
        assert np.any(values != 0), f"the gradient of {what} {name} is 0 everywhere"


class _Checks:
    """What every kind of object shares: building it and comparing configs."""

    def __init__(self, cls: type, make_kwargs: Callable, inputs: Any, y_true: Any, call_kwargs: dict, tolerance: float):
        self.cls, self.make_kwargs, self.tolerance = cls, make_kwargs, tolerance
        self.inputs, self.y_true, self.call_kwargs = inputs, y_true, call_kwargs

    def build(self) -> Any:
        return self.cls(**self.make_kwargs())

    def clone(self, original: Any) -> Any:
        config = original.get_config()
        clone = self.cls.from_config(config)
        assert type(clone) is self.cls
        assert _same_config(clone.get_config(), config), "from_config(get_config()) gives another config"
        return clone


class _LayerChecks(_Checks):
    """A layer, or a model (called on its inputs the same way)."""

    def output(self, layer: Any, training: bool = False) -> Any:
        return layer(_as_tensors(self.inputs), training=training, **_as_tensors(self.call_kwargs))

    def config_round_trip(self) -> None:
        layer = self.build()
        expected = self.output(layer)
        clone = self.clone(layer)
        self.output(clone)  # builds its weights
        clone.set_weights(layer.get_weights())
        _same(self.output(clone), expected, self.tolerance, "from_config(get_config()) computes another output")

    def save_and_load(self, path: str) -> None:
        layer = self.build()
        if isinstance(layer, keras.Model):
            model = layer
            self.output(model)
        else:
            symbolic = tf.nest.map_structure(
                lambda array: keras.Input(np.shape(array)[1:], dtype=tf.as_dtype(np.asarray(array).dtype)),
                (self.inputs, self.call_kwargs),
            )
            model = keras.Model(tf.nest.flatten(symbolic), layer(symbolic[0], **symbolic[1]))
        expected = self.predict(model)
        model.save(path)
        loaded = keras.models.load_model(path)
        restored = loaded if isinstance(layer, keras.Model) else next(x for x in loaded.layers if x.name == layer.name)
        assert type(restored) is self.cls
        assert _same_config(restored.get_config(), layer.get_config()), "the loaded object has another config"
        _same(self.predict(loaded), expected, self.tolerance, "the loaded model computes another output")

    def predict(self, model: Any) -> Any:
        if isinstance(model, self.cls):
            return self.output(model)
        return model(_as_tensors(tf.nest.flatten((self.inputs, self.call_kwargs))), training=False)

    def mixed_precision(self) -> None:
        layer = self.build()
        # Fed what a layer before it computes under the policy: bfloat16 activations.
        inputs = tf.nest.map_structure(
            lambda value: tf.cast(value, tf.bfloat16) if _floating(value) else tf.convert_to_tensor(value),
            self.inputs,
        )
        output = layer(inputs, **_as_tensors(self.call_kwargs))
        assert _all_float32(output), f"under {MIXED_POLICY} the output is not float32: {output}"

    def gradients(self) -> None:
        layer = self.build()
        inputs = _as_tensors(self.inputs)
        float_inputs = [tensor for tensor in tf.nest.flatten(inputs) if tensor.dtype.is_floating]
        with tf.GradientTape() as tape:
            tape.watch(float_inputs)
            output = self.output_for_gradient(layer, inputs)
            target = _weighted_sum(output)
        weights = layer.trainable_weights
        found = tape.gradient(target, weights + float_inputs)
        _assert_reaches(found[: len(weights)], [w.name for w in weights], "weight")
        _assert_reaches(found[len(weights) :], [f"#{i}" for i in range(len(float_inputs))], "float input")

    def output_for_gradient(self, layer: Any, inputs: Any) -> Any:
        return layer(inputs, training=False, **_as_tensors(self.call_kwargs))


def _weighted_sum(output: Any) -> tf.Tensor:
    """A scalar of the output that every output value moves (fixed weights, not all equal)."""
    total = tf.constant(0.0)
    for tensor in tf.nest.flatten(output):
        if tensor.dtype.is_floating:
            weights = tf.random.stateless_uniform(tf.shape(tensor), seed=[1, 2], minval=0.5, maxval=1.5)
            total += tf.reduce_sum(tf.cast(tensor, tf.float32) * weights)
    return total


class _LossChecks(_Checks):
    def value(self, loss: Any, y_pred: Any = None) -> tf.Tensor:
        return loss(_as_tensors(self.y_true), _as_tensors(self.inputs if y_pred is None else y_pred))

    def config_round_trip(self) -> None:
        loss = self.build()
        expected = self.value(loss)
        assert expected.shape == () and np.isfinite(expected.numpy()), f"not a finite scalar: {expected}"
        _same(self.value(self.clone(loss)), expected, self.tolerance, "from_config(get_config()) gives another loss")
        restored = keras.losses.deserialize(keras.losses.serialize(loss))
        assert type(restored) is self.cls and _same_config(restored.get_config(), loss.get_config())

    def save_and_load(self, path: str) -> None:
        loss = self.build()
        features = keras.Input(np.shape(self.inputs)[1:])
        model = keras.Model(features, keras.layers.Activation("linear", dtype="float32")(features))
        model.compile(optimizer="sgd", loss=loss)
        model.save(path)
        restored = keras.models.load_model(path).loss
        assert type(restored) is self.cls, f"the loaded model's loss is {restored!r}"
        assert _same_config(restored.get_config(), loss.get_config()), "the loaded loss has another config"
        _same(self.value(restored), self.value(loss), self.tolerance, "the loaded loss gives another value")

    def mixed_precision(self) -> None:
        value = self.value(self.build(), tf.cast(self.inputs, tf.bfloat16))
        assert value.dtype == tf.float32, f"under {MIXED_POLICY} the loss is {value.dtype.name}"

    def gradients(self) -> None:
        y_pred = tf.convert_to_tensor(self.inputs)
        with tf.GradientTape() as tape:
            tape.watch(y_pred)
            value = self.value(self.build(), y_pred)
        _assert_reaches([tape.gradient(value, y_pred)], ["y_pred"], "input")


class _OptimizerChecks(_Checks):
    """An optimizer, run on a small model fitted to ``inputs`` for a few steps."""

    def model(self) -> Any:
        features = np.asarray(self.inputs)
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input(features.shape[1:]), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
        )
        return model

    def fit(self, model: Any, optimizer: Any, steps: int = 3) -> None:
        features = np.asarray(self.inputs, np.float32)
        targets = np.linspace(-1.0, 1.0, len(features), dtype=np.float32)[:, None]
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(features, targets, batch_size=len(features), epochs=steps, verbose=0, shuffle=False)

    def trained(self, optimizer: Any) -> list:
        model = self.model()
        self.fit(model, optimizer)
        return model.get_weights()

    def config_round_trip(self) -> None:
        optimizer = self.build()
        clone = self.clone(optimizer)
        _same(self.trained(clone), self.trained(optimizer), self.tolerance, "a clone from its config trains otherwise")
        restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
        assert type(restored) is self.cls and _same_config(restored.get_config(), optimizer.get_config())

    def save_and_load(self, path: str) -> None:
        model = self.model()
        self.fit(model, self.build())
        model.save(path)
        loaded = keras.models.load_model(path)
        assert type(loaded.optimizer) is self.cls, f"the loaded optimizer is {loaded.optimizer!r}"
        assert _same_config(loaded.optimizer.get_config(), model.optimizer.get_config())
        _same(
            [v.numpy() for v in loaded.optimizer.variables],
            [v.numpy() for v in model.optimizer.variables],
            self.tolerance,
            "the loaded optimizer has another state",
        )
        # Both continue alike from the saved state.
        self.fit(model, model.optimizer, steps=1)
        self.fit(loaded, loaded.optimizer, steps=1)
        _same(loaded.get_weights(), model.get_weights(), self.tolerance, "the loaded optimizer trains otherwise")

    def mixed_precision(self) -> None:
        model = self.model()
        start = model.get_weights()
        self.fit(model, self.build(), steps=2)  # two: a warmup schedule's first step has a rate of 0
        assert all(w.dtype == tf.float32 for w in model.trainable_weights), "weights are not float32"
        assert model.layers[0].compute_dtype == "bfloat16"
        assert all(np.all(np.isfinite(w)) for w in model.get_weights())
        assert all(not np.array_equal(a, b) for a, b in zip(start, model.get_weights())), "a weight did not move"

    def gradients(self) -> None:
        model = self.model()
        start = model.get_weights()
        self.fit(model, self.build(), steps=2)  # two: a warmup schedule's first step has a rate of 0
        for weight, before, after in zip(model.weights, start, model.get_weights()):
            assert not np.array_equal(before, after), f"the optimizer did not move {weight.name}"
