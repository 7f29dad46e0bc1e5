"""MatryoshkaLoss: the weighted sum of a feature loss at several widths, against the float64 brute
forces of the wrapped losses on the cut vectors; its gradients, weights and bad input; under two
replicas and in the gradient cache it trains as the plain loss does. Keras 2 only for now (the
gradient cache and tf.distribute are the Keras 2 engine's); its Keras contract is in
tests/losses/test_keras2_contract.py, and on both Kerases tests/losses/test_brute_force.py checks it
against the brute force."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cosent_tf.backend import keras, tf
from cosent_tf.losses import (
    AnglELoss,
    CoSENTIBNLoss,
    CoSENTLoss,
    CosineMSELoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
    ThresholdContrastiveLoss,
)
from cosent_tf.losses.matryoshka import check_dims
from cosent_tf.training.gradient_cache import GradientCacheModel
from tests.losses.test_angle import brute_force_angle
from tests.losses.test_brute_force import brute_contrastive, brute_cosent_ibn, brute_mse
from tests.losses.test_cosent import brute_force_cosent
from tests.losses.test_distributed import run_replica_steps, selected
from tests.losses.test_mnrl import brute_force_mnrl, value_and_gradient
from tests.training.test_gradient_cache import sgd_step, training_setup

WIDTH = 10
# dims, weights: the full width among the widths (weighted unevenly), and widths below it only
# (down to 1, and odd ones, which the angle loss pads)
WIDTHS = {"full-and-cut": ([10, 6, 3], [1.0, 0.5, 2.0]), "cut-only": ([7, 4, 1], None)}
IBN = dict(cosine_w=0.3, ibn_w=2.0, angle_w=0.7, cosine_scale=15.0, ibn_scale=25.0, angle_scale=10.0)


def brute_force_cosent_ibn(pair_labels, vectors):
    weights = [IBN[key] for key in ("cosine_w", "ibn_w", "angle_w", "cosine_scale", "ibn_scale", "angle_scale")]
    return brute_cosent_ibn(np.repeat(pair_labels, 2), vectors, *weights, 0.5, ("query_to_doc",))


def pair_batch(rng, graded=False):
    """(pair labels, interleaved labels, vectors) of 7 pairs, with a positive and a negative pair."""
    pair_labels = rng.uniform(0, 5, 7) if graded else rng.integers(0, 2, 7).astype(float)
    pair_labels[:2] = (4.5, 0.5) if graded else (1.0, 0.0)
    return pair_labels, np.repeat(pair_labels, 2), rng.normal(size=(14, WIDTH))


# name: (the wrapped loss, its batch from a generator: (pair labels or None, y_true, vectors),
# its float64 brute force on (pair labels, vectors))
CASES = {
    "cosent": (
        CoSENTLoss(17.0),
        lambda rng: pair_batch(rng, graded=True),
        lambda y, v: brute_force_cosent(np.repeat(y, 2), v, 17.0),
    ),
    "angle": (AnglELoss(12.0), lambda rng: pair_batch(rng, graded=True), lambda y, v: brute_force_angle(y, v, 12.0)),
    "mnrl-groups": (
        MultipleNegativesRankingLoss(9.0, group_size=3, directions=("query_to_doc", "doc_to_query")),
        lambda rng: (None, np.zeros(15), rng.normal(size=(15, WIDTH))),
        lambda y, v: brute_force_mnrl(v, 3, 9.0, ("query_to_doc", "doc_to_query")),
    ),
    "cosent-ibn": (CoSENTIBNLoss(**IBN, positive_above=0.5), pair_batch, brute_force_cosent_ibn),
    "mse": (
        CosineMSELoss(5.0),
        lambda rng: pair_batch(rng, graded=True),
        lambda y, v: brute_mse(np.repeat(y, 2), v, 5.0),
    ),
    "contrastive": (
        ThresholdContrastiveLoss(0.2, positive_above=0.5),
        pair_batch,
        lambda y, v: brute_contrastive(np.repeat(y, 2), v, 0.2, 0.5),
    ),
}


@pytest.mark.parametrize("widths", sorted(WIDTHS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_loss_is_the_weighted_sum_of_the_brute_force_on_the_cut_vectors(name, widths):
    inner, batch, brute_force = CASES[name]
    dims, weights = WIDTHS[widths]
    pair_labels, y_true, vectors = batch(np.random.default_rng(len(name)))
    expected = sum(
        weight * brute_force(pair_labels, vectors[:, :dim]) for dim, weight in zip(dims, weights or [1.0] * len(dims))
    )
    actual = float(MatryoshkaLoss(inner, dims, weights)(y_true, vectors))
    assert actual == pytest.approx(expected, rel=1e-9)
    # the widths matter: the loss at full width alone is another number
    assert actual != pytest.approx(brute_force(pair_labels, vectors) * sum(weights or [1.0] * len(dims)), rel=1e-3)


def test_hand_computed_cosent_at_three_widths():
    # pair 0 (label 0): u = (1, 0, 0), v = (1, 1, 0): cosine 1 at width 1, 1/sqrt(2) at widths 2 and 3;
    # pair 1 (label 1): u = (1, 0, 0), v = (-1, 0, 1): cosine -1 at widths 1 and 2, -1/sqrt(2) at width 3.
    # The pair labelled higher has the lower cosine: log(1 + exp(scale * (cos_0 - cos_1))) at each width.
    vectors = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 0], [-1, 0, 1]], np.float64)
    labels = np.array([0, 0, 1, 1], np.float64)
    root_half = math.sqrt(0.5)
    expected = (
        1.0 * math.log1p(math.exp(2 * root_half))  # width 3
        + 0.5 * math.log1p(math.exp(root_half + 1))  # width 2
        + 2.0 * math.log1p(math.exp(2))  # width 1
    )
    loss = MatryoshkaLoss(CoSENTLoss(scale=1.0), [3, 2, 1], [1.0, 0.5, 2.0])
    assert float(loss(labels, vectors)) == pytest.approx(expected, rel=1e-12)


def cut_gradients(inner, y_true, vectors, dims, weights):
    """sum_i weight_i * (the inner loss's gradient on the vectors cut to dim_i, zero past dim_i),
    each cut made in NumPy and differentiated on its own."""
    total = np.zeros_like(vectors)
    for dim, weight in zip(dims, weights):
        _, gradient = value_and_gradient(inner, y_true, np.ascontiguousarray(vectors[:, :dim]))
        total[:, :dim] += weight * gradient
    return total


@pytest.mark.parametrize("widths", sorted(WIDTHS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gradient_is_the_weighted_sum_of_the_gradients_on_the_cut_vectors(name, widths):
    inner, batch, _ = CASES[name]
    dims, weights = WIDTHS[widths]
    _, y_true, vectors = batch(np.random.default_rng(10 + len(name)))
    _, gradient = value_and_gradient(MatryoshkaLoss(inner, dims, weights), y_true, vectors)
    expected = cut_gradients(inner, y_true, vectors, dims, weights or [1.0] * len(dims))
    np.testing.assert_allclose(gradient, expected, rtol=1e-9, atol=1e-12)
    assert np.abs(gradient[:, : min(dims)]).max() > 1e-3  # a comparison of something, not of zeros
    # the dimensions past the widest width get exactly nothing
    assert not np.any(gradient[:, max(dims) :])


def test_the_gradient_is_the_finite_difference_of_the_brute_force():
    """One loss's gradient against numbers computed without TensorFlow at all."""
    dims, weights = [5, 3, 1], [1.0, 0.5, 2.0]
    rng = np.random.default_rng(5)
    pair_labels = np.array([0.0, 2.0, 1.0, 1.5])
    vectors = rng.normal(size=(8, 6))

    def brute_force(v):
        return sum(w * brute_force_cosent(np.repeat(pair_labels, 2), v[:, :d], 3.0) for d, w in zip(dims, weights))

    _, gradient = value_and_gradient(MatryoshkaLoss(CoSENTLoss(3.0), dims, weights), np.repeat(pair_labels, 2), vectors)
    numeric, step = np.zeros_like(vectors), 1e-6
    for index in np.ndindex(vectors.shape):
        up, down = vectors.copy(), vectors.copy()
        up[index] += step
        down[index] -= step
        numeric[index] = (brute_force(up) - brute_force(down)) / (2 * step)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-8)
    assert not np.any(gradient[:, 5:]) and np.abs(numeric[:, 5]).max() < 1e-8


class WidthsSeen(keras.losses.Loss):
    """A stand-in inner loss: the sum of the vectors' entries, noting each width it is called on."""

    def __init__(self, seen, **kwargs):
        super().__init__(**kwargs)
        self.seen = seen

    def call(self, y_true, y_pred):
        self.seen.append(int(y_pred.shape[-1]))
        return tf.reduce_sum(y_pred)


def test_a_width_of_weight_zero_is_left_out():
    vectors = np.random.default_rng(6).normal(size=(4, WIDTH))
    seen = []
    value = MatryoshkaLoss(WidthsSeen(seen), [10, 6, 3], [1.0, 0.0, 2.0])(np.zeros(4), vectors)
    assert seen == [10, 3]  # the width of weight 0 is never computed
    assert float(value) == pytest.approx(vectors.sum() + 2 * vectors[:, :3].sum(), rel=1e-12)
    # with a real loss: the same value and gradient as without that width
    inner, batch, brute_force = CASES["cosent"]
    pair_labels, y_true, vectors = batch(np.random.default_rng(7))
    dropped = value_and_gradient(MatryoshkaLoss(inner, [10, 6, 3], [1.0, 0.0, 2.0]), y_true, vectors)
    without = value_and_gradient(MatryoshkaLoss(inner, [10, 3], [1.0, 2.0]), y_true, vectors)
    assert dropped[0] == without[0]
    np.testing.assert_array_equal(dropped[1], without[1])
    assert dropped[0] == pytest.approx(brute_force(pair_labels, vectors) + 2 * brute_force(pair_labels, vectors[:, :3]))


def test_the_weights_are_1_each_by_default():
    loss = MatryoshkaLoss(CoSENTLoss(), [8, 2])
    assert (loss.dims, loss.weights) == ([8, 2], [1.0, 1.0])
    pair_labels, y_true, vectors = pair_batch(np.random.default_rng(8), graded=True)
    expected = brute_force_cosent(y_true, vectors[:, :8], 20.0) + brute_force_cosent(y_true, vectors[:, :2], 20.0)
    assert float(loss(y_true, vectors)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "dims, weights, message",
    [
        ("16,8", None, "give a list of widths, got '16,8'"),
        (16, None, "give a list of widths, got 16"),
        ([], None, "give at least one width"),
        ([8, 0], None, "each width must be a positive integer, got 0"),
        ([8, -2], None, "each width must be a positive integer, got -2"),
        ([8, 2.5], None, "each width must be a positive integer, got 2.5"),
        ([True], None, "each width must be a positive integer, got True"),
        ([8, 4, 8], None, r"\[8, 4, 8\] names a width twice"),
        ([8, 4], [1.0], r"1 weights for 2 widths \[8, 4\]; give one each"),
        ([8, 4], 1.0, "give a list of weights, got 1.0"),
        ([8, 4], [1.0, "half"], r"each must be a number, got \[1.0, 'half'\]"),
        ([8, 4], [1.0, -0.5], "each must be a finite number of at least 0"),
        ([8, 4], [1.0, float("nan")], "each must be a finite number of at least 0"),
        ([8, 4], [0, 0.0], "every weight is 0, so the loss is 0"),
    ],
)
def test_bad_widths_and_weights_are_refused_when_built(dims, weights, message):
    with pytest.raises(ValueError, match=message):
        check_dims(dims, weights)
    with pytest.raises(ValueError, match=message):
        MatryoshkaLoss(CoSENTLoss(), dims, weights)


def test_a_width_above_the_vectors_is_refused_when_called():
    loss = MatryoshkaLoss(CoSENTLoss(), [12, 4])
    with pytest.raises(ValueError, match=r"the vectors have 10 dimensions, fewer than 12"):
        loss(np.zeros(4), np.ones((4, WIDTH)))


def test_serialise_and_deserialise_give_the_same_loss():
    inner = MultipleNegativesRankingLoss(7.5, group_size=3, directions=("query_to_doc", "doc_to_query"))
    loss = MatryoshkaLoss(inner, [10, 4, 2], [1.0, 0.25, 0.5])
    config = loss.get_config()
    assert config["dims"] == [10, 4, 2] and config["weights"] == [1.0, 0.25, 0.5]
    assert config["loss"]["class_name"] == "MultipleNegativesRankingLoss"
    assert config["loss"]["config"]["scale"] == 7.5 and config["loss"]["config"]["group_size"] == 3
    restored = keras.losses.deserialize(json.loads(json.dumps(keras.losses.serialize(loss))))
    assert type(restored) is MatryoshkaLoss and type(restored.loss) is MultipleNegativesRankingLoss
    assert restored.get_config() == config
    vectors = np.random.default_rng(9).normal(size=(12, WIDTH))
    assert float(restored(np.zeros(12), vectors)) == float(loss(np.zeros(12), vectors))


def test_finite_float32_in_mixed_bfloat16():
    pair_labels, y_true, vectors = pair_batch(np.random.default_rng(11), graded=True)
    low = tf.Variable(tf.cast(vectors, tf.bfloat16))
    with tf.GradientTape() as tape:
        loss = MatryoshkaLoss(CoSENTLoss(), [10, 4, 2])(y_true, low)
    gradient = tape.gradient(loss, low)
    assert loss.dtype == tf.float32 and math.isfinite(float(loss))
    assert np.all(np.isfinite(tf.cast(gradient, tf.float32).numpy()))
    as_float = tf.cast(low, tf.float32).numpy()
    expected = sum(brute_force_cosent(y_true, as_float[:, :dim], 20.0) for dim in (10, 4, 2))
    assert float(loss) == pytest.approx(expected, rel=1e-5)


# the engine's tiny BERT has 16 dimensions; the widths leave the last 4 untrained
CACHE_DIMS, CACHE_WEIGHTS = [12, 6, 3], [1.0, 0.5, 2.0]


def eager_gradient(model, loss, inputs, labels):
    """The gradient of ``loss`` on the whole batch, one array per weight of ``model``, taken
    eagerly: what plain SGD at rate 1 would move the weights by, without tracing a fit's step."""
    with tf.GradientTape() as tape:
        value = loss(labels, model(inputs, training=True))
    gradients = tape.gradient(value, model.weights)
    # an embedding's gradient comes as IndexedSlices, rows of the table: made dense, as fit applies it
    return [
        np.zeros(w.shape, np.float32) if g is None else tf.convert_to_tensor(g).numpy()
        for w, g in zip(model.weights, gradients)
    ]


@pytest.mark.heavy
@pytest.mark.parametrize("case", ["cosent", "mnrl-two-hard-negatives-symmetric", "cosent-ibn"])
def test_in_micro_batches_the_gradient_is_the_whole_batch_one(case, tmp_path):
    model, inner, inputs, labels, rows_per_example = training_setup(tmp_path, f"feature-{case}", dropout=0.0)
    loss = MatryoshkaLoss(inner, CACHE_DIMS, CACHE_WEIGHTS)
    # Only the cached step goes through fit, the step under test; the whole batch's gradient and the
    # plain loss's are taken eagerly, as tracing a fit's step of the model costs more than the test.
    # Both from the start weights, before the cached step moves them.
    whole = eager_gradient(model, loss, inputs, labels)
    plain = eager_gradient(model, inner, inputs, labels)
    cached = sgd_step(GradientCacheModel(model, 3, rows_per_example), model, loss, inputs, labels)
    scale = max(np.abs(g).max() for g in whole)
    for expected, actual in zip(whole, cached):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)
    # the widths are what was trained: the plain loss's step is another
    assert max(np.abs(p - w).max() for p, w in zip(plain, whole)) > 1e-2 * scale


@pytest.fixture(scope="module")
def replicas(request, tmp_path_factory):
    """tests/losses/test_distributed.py's one step of a Dense encoder three ways, its cases' losses
    wrapped ("cosent-feature@3,1" is that file's "cosent-feature" at the widths 3 and 1), every
    case this session runs in one process: the two replicas are two logical CPU devices, which
    cosent_tf makes when imported."""
    names = selected(request, test_under_two_replicas_each_width_ranks_the_global_batch)
    return run_replica_steps(tmp_path_factory.mktemp("replicas"), [["three-ways", name] for name in names])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["cosent-feature@3,1", "cosent-ibn@4,2,1"])
def test_under_two_replicas_each_width_ranks_the_global_batch(case, replicas):
    steps = replicas.result(f"three-ways:{case}")
    one_device, gathered, per_slice = steps["one_device"], steps["gathered"], steps["per_slice"]
    assert gathered["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    scale = max(np.abs(g).max() for g in one_device["gradients"])
    for expected, actual in zip(one_device["gradients"], gathered["gradients"]):  # float32 sums in another order
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)
    # each replica's slice alone is another loss and another step
    assert per_slice["loss"] != pytest.approx(one_device["loss"], rel=1e-3)
    kernel_gap = np.abs(np.subtract(per_slice["gradients"][0], one_device["gradients"][0])).max()
    assert kernel_gap > 1e-3 * np.abs(one_device["gradients"][0]).max()
    # the Dense encoder's output columns past the widest width are not trained
    widest = max(int(dim) for dim in case.split("@")[1].split(","))
    for step in (one_device, gathered):
        assert not np.any(np.asarray(step["gradients"][0])[:, widest:])
