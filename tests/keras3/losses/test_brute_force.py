"""The losses on Keras 3 (this process's backend): the body written once over both Kerases
(tests/losses/test_brute_force.py), and what only Keras 3 checks: the
same values and gradients as the Keras 2 classes, from one Keras 2 subprocess."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosent_tf import losses
from tests.backend_maths import value_and_gradient
from tests.keras3.support import run_keras2
from tests.losses.test_brute_force import *  # noqa: F403  (the tests written once, collected here too)
from tests.losses.test_brute_force import CASES, MATRYOSHKA, MNRL_VARIANTS, built_loss, pair_batch

PARITY_CASES = {
    **{name: (class_name, options) for name, (class_name, options, _) in CASES.items()},
    **{
        f"mnrl-{variant}": (
            "MultipleNegativesRankingLoss",
            dict(scale=9.0, group_size=g, directions=list(d), partition_mode=m),
        )
        for variant, (g, d, m) in MNRL_VARIANTS.items()
    },
    **{name: ("MatryoshkaLoss", options) for name, (options, _) in MATRYOSHKA.items()},
    "interaction": ("InteractionCoSENTLoss", {}),
    # SentenceBertSoftmaxLoss reads its head's log-probabilities: the head and its loss are compared
    # together (test_the_head_and_its_loss_equal_keras2_with_the_same_weights)
}


def parity_inputs(name):
    """(y_true, y_pred) of one parity case, float32."""
    class_name, options = PARITY_CASES[name]
    if class_name == "MultipleNegativesRankingLoss":
        v = np.random.default_rng(len(name)).normal(size=(4 * options.get("group_size", 2), 6))
        return np.zeros(len(v), np.float32), v.astype(np.float32)
    if class_name == "InteractionCoSENTLoss":
        rng = np.random.default_rng(9)
        return rng.choice([0.0, 1.0, 2.0], 8).astype(np.float32), (3 * rng.normal(size=(8, 1))).astype(np.float32)
    if class_name == "SentenceBertSoftmaxLoss":
        logits = np.random.default_rng(10).normal(size=(5, 3))
        probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return np.repeat([0.0, 2.0, 1.0, 2.0, 0.0], 2).astype(np.float32), probabilities.astype(np.float32)
    y, v = pair_batch(len(name), 6, 7, labels="ties" if "ibn" not in name else "binary")
    return y.astype(np.float32), v.astype(np.float32)


KERAS2_LOSSES = """
import json
from cosent_tf import losses
from cosent_tf.backend import tf

def build(class_name, options):
    options = dict(options)
    if "loss" in options:
        inner, inner_options = options.pop("loss")
        return losses.MatryoshkaLoss(build(inner, inner_options), **options)
    return getattr(losses, class_name)(**options)

for name, (class_name, options) in json.loads(CASES).items():
    loss = build(class_name, options)
    y_pred = tf.constant(inputs[name + ".y_pred"])
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        value = loss(tf.constant(inputs[name + ".y_true"]), y_pred)
    outputs[name + ".value"] = value.numpy()
    outputs[name + ".gradient"] = tape.gradient(value, y_pred).numpy()

# the head: its probabilities and their gradient on the vectors, with given weights
head = losses.SentenceBertHead(3)
vectors = tf.constant(inputs["head.vectors"])
head(vectors)
head.set_weights([inputs["head.kernel"], inputs["head.bias"]])
with tf.GradientTape() as tape:
    tape.watch(vectors)
    value = losses.SentenceBertSoftmaxLoss()(tf.constant(inputs["head.y_true"]), head(vectors))
outputs["head.value"] = value.numpy()
outputs["head.gradient"] = tape.gradient(value, vectors).numpy()
"""


def head_inputs():
    rng = np.random.default_rng(11)
    return {
        "head.vectors": rng.normal(size=(8, 4)).astype(np.float32),
        "head.kernel": (0.5 * rng.normal(size=(12, 3))).astype(np.float32),
        "head.bias": rng.normal(size=3).astype(np.float32),
        "head.y_true": np.repeat([0.0, 1.0, 2.0, 1.0], 2).astype(np.float32),
    }


@pytest.fixture(scope="module")
def keras2(tmp_path_factory):
    """Every parity case's value and gradient from one Keras 2 process."""
    arrays = head_inputs()
    for name in PARITY_CASES:
        arrays[f"{name}.y_true"], arrays[f"{name}.y_pred"] = parity_inputs(name)
    code = f"CASES = {json.dumps(json.dumps(PARITY_CASES))}\n" + KERAS2_LOSSES
    return run_keras2(code, tmp_path_factory.mktemp("keras2-losses"), **arrays)


def same(actual, expected):
    """Within 1e-6 of the Keras 2 number, relative to the largest (float32 rounds at ~1e-7 of it)."""
    expected = np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.parametrize("name", sorted(PARITY_CASES))
def test_value_and_gradient_equal_the_keras2_class(name, keras2):
    class_name, options = PARITY_CASES[name]
    y, v = parity_inputs(name)
    value, gradient = value_and_gradient(lambda x: built_loss(class_name, options)(y, x), v)
    same(value, keras2[f"{name}.value"])
    same(gradient, keras2[f"{name}.gradient"])
    assert np.abs(gradient).max() > 1e-3  # a gradient that is there


def test_the_head_and_its_loss_equal_keras2_with_the_same_weights(keras2):
    arrays = head_inputs()
    head = losses.SentenceBertHead(3)
    head(arrays["head.vectors"])
    head.set_weights([arrays["head.kernel"], arrays["head.bias"]])
    loss = losses.SentenceBertSoftmaxLoss()
    value, gradient = value_and_gradient(lambda x: loss(arrays["head.y_true"], head(x)), arrays["head.vectors"])
    same(value, keras2["head.value"])
    same(gradient, keras2["head.gradient"])
