import numpy as np
import pytest

from cosent_tf import build_encoder, build_interaction_model
from cosent_tf.backend import keras, tf
from cosent_tf.losses import get_loss
from cosent_tf.training.gradient_cache import GradientCacheModel
from tests.harness import run_keras_object_test
from tests.helpers import write_config

PAIRS = 8  # in micro-batches of 3: 3 + 3 + 2 pairs


def tiny_config(tmp_path, dropout):
    # One block: its embedding, attention and feed-forward dropout are already several masks drawn
    # in turn, which the cache must draw again in order; a second block would double the step's
    # trace, most of each test's time, and repeat what the first checks.
    return write_config(
        tmp_path / "config.json",
        layers=1,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        max_position=64,
    )


def token_ids(rng, rows):
    """``rows`` texts of random tokens, padded to several lengths, as (token ids, segment ids)."""
    ids = rng.integers(200, 3000, (rows, 9)).astype(np.int32)
    ids[:, 0] = 101
    for row, length in enumerate(rng.integers(4, 10, rows)):
        ids[row, length:] = 0
    return ids, np.zeros_like(ids)


def training_setup(tmp_path, kind, loss_name, dropout):
    """(training model, its loss, inputs, labels) as the engine builds them, for a tiny BERT."""
    config = tiny_config(tmp_path, dropout)
    entry = get_loss(kind, loss_name)
    rng = np.random.default_rng(3)
    inputs = token_ids(rng, 2 * PAIRS if kind == "feature" else PAIRS)
    labels = rng.integers(0, 2, PAIRS).astype(np.float32)
    if kind == "feature":
        model = build_encoder(config, pooling="last-avg")
        if entry.training_head is not None:
            model = keras.Model(model.inputs, entry.training_head(2)(model.output))
        labels = np.repeat(labels, 2)
    else:
        model = build_interaction_model(config, head=entry.interaction_head)
        # A random BERT's [CLS] vectors are nearly equal for every text, where float32 rounding would
        # decide the gradient: spread the weights as a trained model's are.
        model.set_weights([w * 20 if w.ndim == 2 else w for w in model.get_weights()])
    loss = entry.build(scale=20.0, epsilon=0.5, max_label=1.0, positive_above=0.5)
    return model, loss, inputs, labels


def sgd_step(model, loss, inputs, labels, run_eagerly=False):
    """The gradient a step applies (plain SGD at rate 1: the weights move by minus it).

    ``run_eagerly``: fit's own step without its graph, for a reference whose graph would cost
    more to trace than the step does to run."""
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss, run_eagerly=run_eagerly)
    before = [w.copy() for w in model.get_weights()]
    model.fit(tf.data.Dataset.from_tensors((inputs, labels)), epochs=1, verbose=0)
    return [b - a for b, a in zip(before, model.get_weights())]


CASES = [("feature", "cosent"), ("feature", "sbert"), ("interaction", "cosent"), ("interaction", "ce")]


@pytest.mark.heavy
@pytest.mark.parametrize("kind, loss_name", CASES)
def test_micro_batches_give_the_gradient_of_the_whole_batch(kind, loss_name, tmp_path):
    model, loss, inputs, labels = training_setup(tmp_path, kind, loss_name, dropout=0.0)
    start = model.get_weights()
    whole = sgd_step(model, loss, inputs, labels, run_eagerly=True)
    model.set_weights(start)
    cached = sgd_step(GradientCacheModel(model, 3, 2 if kind == "feature" else 1), loss, inputs, labels)
    scale = max(np.abs(g).max() for g in whole)
    assert scale > 0
    for expected, actual in zip(whole, cached):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.heavy
@pytest.mark.parametrize("kind, loss_name", [("feature", "cosent"), ("interaction", "cosent")])
def test_with_dropout_both_passes_drop_the_same_units(kind, loss_name, tmp_path):
    model, loss, inputs, labels = training_setup(tmp_path, kind, loss_name, dropout=0.2)
    assert_dropout_masks_repeat(model, loss, inputs, labels, 2 if kind == "feature" else 1)


def assert_dropout_masks_repeat(model, loss, inputs, labels, rows_per_example):
    """The cached step (3 micro-batches) equals the whole batch back-propagated at once through the
    networks that each micro-batch's dropout masks make."""
    cache = GradientCacheModel(model, 3, rows_per_example, seed=5)
    cache.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    # The reference: the whole batch back-propagated at once through the same masked networks.
    with tf.GradientTape() as tape:
        outputs = tf.concat([cache._outputs(inputs, index) for index in range(3)], axis=0)
        value = loss(labels, outputs)
    expected = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(value, model.trainable_variables)]
    # dropout is on: the masked outputs are not the network's plain ones
    plain = model(inputs, training=False)
    assert np.abs(outputs.numpy() - plain.numpy()).max() > 1e-3
    before = [w.copy() for w in model.get_weights()]
    cache.fit(tf.data.Dataset.from_tensors((inputs, labels)), epochs=1, verbose=0)
    cached = [b - a for b, a in zip(before, model.get_weights())]
    scale = max(np.abs(g).max() for g in expected)
    for want, got in zip(expected, cached):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


GROUPS = 8  # in micro-batches of 3: 3 + 3 + 2 examples
# The in-batch losses as the loss table builds them (its name, the build options), each on its
# rows: groups of an anchor, a positive and group_size - 2 hard negatives for mnrl, interleaved
# labelled pairs for the other two.
IN_BATCH_LOSSES = {
    "mnrl": ("mnrl", {}),
    "mnrl-hard-negative": ("mnrl", {"group_size": 3}),
    "mnrl-two-hard-negatives-symmetric": ("mnrl", {"group_size": 4, "symmetric": True}),
    "cosent-ibn": ("cosent-ibn", {"weights": (1.0, 20.0, 1.0)}),
    "angle": ("angle", {}),
}


def in_batch_setup(tmp_path, case, dropout):
    """(a tiny BERT encoder, the loss, GROUPS examples of inputs, their labels, rows per example)."""
    loss_name, options = IN_BATCH_LOSSES[case]
    loss = get_loss("feature", loss_name).build(scale=20.0, epsilon=0.5, max_label=1.0, positive_above=0.5, **options)
    rows_per_example = options.get("group_size", 2)
    model = build_encoder(tiny_config(tmp_path, dropout), pooling="last-avg")
    inputs = token_ids(np.random.default_rng(4), GROUPS * rows_per_example)
    if loss_name == "mnrl":
        labels = np.zeros(GROUPS * rows_per_example, np.float32)  # unread: a group's order is its labels
    else:  # graded labels, half of the pairs positive (above positive_above=0.5) for the in-batch part
        labels = np.repeat(np.array([1, 0, 0.75, 1, 0.25, 0, 1, 0.5], np.float32), 2)
    return model, loss, inputs, labels, rows_per_example


@pytest.mark.heavy
@pytest.mark.parametrize("loss_name", IN_BATCH_LOSSES)
def test_in_batch_losses_in_micro_batches_give_the_gradient_of_the_whole_batch(loss_name, tmp_path):
    model, loss, inputs, labels, rows_per_example = in_batch_setup(tmp_path, loss_name, dropout=0.0)
    start = model.get_weights()
    whole = sgd_step(model, loss, inputs, labels, run_eagerly=True)
    model.set_weights(start)
    cached = sgd_step(GradientCacheModel(model, 3, rows_per_example), loss, inputs, labels)
    scale = max(np.abs(g).max() for g in whole)
    assert scale > 0
    for expected, actual in zip(whole, cached):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.heavy
@pytest.mark.parametrize("loss_name", IN_BATCH_LOSSES)
def test_in_batch_losses_with_dropout_drop_the_same_units_in_both_passes(loss_name, tmp_path):
    model, loss, inputs, labels, rows_per_example = in_batch_setup(tmp_path, loss_name, dropout=0.2)
    assert_dropout_masks_repeat(model, loss, inputs, labels, rows_per_example)


def test_a_micro_batch_holds_whole_groups(tmp_path):
    model, _, inputs, _, rows_per_example = in_batch_setup(tmp_path, "mnrl-hard-negative", dropout=0.0)
    cache = GradientCacheModel(model, 3, rows_per_example)
    pieces = [cache._micro_batch(inputs, index) for index in range(3)]
    assert [len(ids) for ids, _ in pieces] == [9, 9, 6]  # 3, 3 and 2 groups of 3 rows
    np.testing.assert_array_equal(np.concatenate([ids for ids, _ in pieces]), inputs[0])


def test_keras_contract(tmp_path):
    _, _, inputs, _ = training_setup(tmp_path, "feature", "cosent", dropout=0.0)

    def arguments():  # the wrapped model is built under the dtype policy being checked
        model, _, _, _ = training_setup(tmp_path, "feature", "cosent", dropout=0.0)
        return {"model": model, "micro_batch_pairs": 4, "rows_per_pair": 2, "seed": 9}

    run_keras_object_test(GradientCacheModel, arguments, inputs)


def test_micro_batch_pairs_must_be_positive(tmp_path):
    model, _, _, _ = training_setup(tmp_path, "feature", "cosent", dropout=0.0)
    with pytest.raises(ValueError, match="micro_batch_pairs must be positive"):
        GradientCacheModel(model, 0)
    with pytest.raises(ValueError, match=r"rows_per_pair \(the rows of one example\) must be positive, got 0"):
        GradientCacheModel(model, 2, rows_per_pair=0)


@pytest.mark.heavy
def test_in_float16_the_scaled_loss_gives_the_whole_batch_gradient(tmp_path):
    from cosent_tf.backend import dtype_policy

    with dtype_policy("mixed_float16"):
        model, loss, inputs, labels = training_setup(tmp_path, "feature", "cosent", dropout=0.0)
    start = model.get_weights()

    def step(trained, run_eagerly=False):
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=2.0**8)
        trained.compile(optimizer=optimizer, loss=loss, run_eagerly=run_eagerly)
        model.set_weights(start)
        trained.fit(tf.data.Dataset.from_tensors((inputs, labels)), epochs=1, verbose=0)
        assert float(optimizer.loss_scale) == 2.0**8  # no overflow: the step was taken
        return [b - a for b, a in zip(start, model.get_weights())]

    # the whole batch's step, the reference, without its graph (as sgd_step's reference): its graph
    # would cost more to trace than the step does to run
    whole, cached = step(model, run_eagerly=True), step(GradientCacheModel(model, 3, 2))
    scale = max(np.abs(g).max() for g in whole)
    for expected, actual in zip(whole, cached):  # float16 rounding: a few parts in a thousand
        np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-2 * scale)
    # The gradients really flow scaled: at a scale of 2**40 they overflow float16, and the step is skipped.
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=2.0**40)
    cache = GradientCacheModel(model, 3, 2)
    cache.compile(optimizer=optimizer, loss=loss)
    model.set_weights(start)
    cache.fit(tf.data.Dataset.from_tensors((inputs, labels)), epochs=1, verbose=0)
    assert float(optimizer.loss_scale) == 2.0**39
    for old, new in zip(start, model.get_weights()):
        np.testing.assert_array_equal(old, new)
