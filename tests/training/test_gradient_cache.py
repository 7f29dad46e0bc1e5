"""The gradient cache (cosent_tf.training.gradient_cache): a step in micro-batches makes the update
the whole batch makes.

With dropout off: the same weights after one SGD step at rate 1 (the weights move by minus the
gradient). With dropout on, both passes over a micro-batch must drop the same units: the step then
equals the whole batch back-propagated at once through the networks that each micro-batch's masks
make.

The bodies are written over the process's Keras (tests/keras3/test_gradient_cache.py runs them on
Keras 3, on its backend): the model is built from a ModelSpec as the engine builds it, with the
training head the engine adds. CI runs every case on tf-keras and, on Keras 3, the cases marked so
below (``ci_backend``; the rest there: make test-full): on JAX each costs one to two minutes.
"""

import numpy as np
import pytest

from cosent_tf.losses import get_loss
from cosent_tf.models.adapter import build_model
from cosent_tf.models.kinds import get_kind
from cosent_tf.models.sources import open_source
from cosent_tf.models.spec import ModelSpec
from cosent_tf.process_keras import KERAS_MAJOR, dtype_policy, keras
from cosent_tf.training.gradient_cache import BACKEND, GradientCacheModel
from tests.helpers import write_config

EXAMPLES = 8  # in micro-batches of 3: 3 + 3 + 2 examples
VOCAB = 3000

# case: (model kind, loss, build options); an example is a group loss's group_size rows, else the kind's
CASES = {
    "feature-cosent": ("feature", "cosent", {}),
    "feature-sbert": ("feature", "sbert", {}),  # a training head: one output per pair
    "interaction-cosent": ("interaction", "cosent", {}),
    "interaction-ce": ("interaction", "ce", {}),
    # the in-batch losses; groups of an anchor, its positive and hard negatives: a micro-batch never splits one
    "feature-mnrl": ("feature", "mnrl", {}),
    "feature-mnrl-hard-negative": ("feature", "mnrl", {"group_size": 3}),
    "feature-mnrl-two-hard-negatives-symmetric": ("feature", "mnrl", {"group_size": 4, "symmetric": True}),
    "feature-cosent-ibn": ("feature", "cosent-ibn", {"weights": (1.0, 20.0, 1.0)}),
    "feature-angle": ("feature", "angle", {}),
}
# CI runs the body on tf-keras only; both Keras 3 backends' runs are make test-full's
KERAS2_IN_CI = pytest.mark.ci_backend()
BOTH_BACKENDS = ("tensorflow", "jax")


def cases_in_ci(keras3_backends, left_out=()):
    """The cases of CASES but ``left_out``, each marked with the Keras 3 backends CI runs it on:
    ``keras3_backends`` maps a case to them; a case it leaves out runs in CI on tf-keras only."""
    return [
        pytest.param(case, marks=pytest.mark.ci_backend(*keras3_backends.get(case, ())))
        for case in CASES
        if case not in left_out
    ]


def tiny_model(tmp_path, spec, dropout):
    """A tiny random BERT model of ``spec`` whose dropout (hidden and attention) is ``dropout``."""
    # One block: its embedding, attention and feed-forward dropout are already several masks drawn
    # in turn, which the cache must draw again in order; a second block would double the step's
    # trace, most of each test's time, and repeat what the first checks.
    config = write_config(
        tmp_path / "config.json",
        vocab_size=VOCAB,
        layers=1,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return build_model(spec, open_source(None, config=config))


def token_ids(rows):
    """``rows`` texts of random tokens, padded to several lengths, as [token ids, segment ids]."""
    rng = np.random.default_rng(3)
    ids = rng.integers(200, VOCAB, (rows, 9)).astype(np.int32)
    ids[:, 0] = 101
    for row, length in enumerate(rng.integers(4, 10, rows)):
        ids[row, length:] = 0
    return [ids, np.zeros_like(ids)]


def training_setup(tmp_path, case, dropout):
    """(training model, loss, inputs, labels, rows per example) for EXAMPLES examples of ``case``, the
    model as the engine trains it."""
    kind, loss_name, options = CASES[case]
    entry = get_loss(kind, loss_name)
    if kind == "feature":
        spec = ModelSpec("feature", pooling="last-avg")
    else:
        spec = ModelSpec("interaction", pooling=None, head=entry.interaction_head, head_input="cls")
    model = tiny_model(tmp_path, spec, dropout)
    if kind == "interaction":
        # A random BERT's [CLS] vectors are nearly equal for every text, where float32 rounding would
        # decide the gradient: spread the weights as a trained model's are.
        model.set_weights([w * 20 if w.ndim == 2 else w for w in model.get_weights()])
    rows_per_example = options.get("group_size", get_kind(kind).rows_per_pair)
    graded = np.array([1, 0, 0.75, 1, 0.25, 0, 1, 0.5], np.float32)
    if loss_name == "mnrl":
        labels = np.zeros(EXAMPLES * rows_per_example, np.float32)  # unread: a group's order is its labels
    else:  # each on the rows of its pair; half of the pairs positive (above positive_above=0.5)
        labels = np.repeat((graded > 0.5).astype(np.float32) if entry.on_classes else graded, rows_per_example)
    if entry.training_head is not None:
        model = keras.Model(model.inputs, entry.training_head(2)(model.output))
    loss = entry.build(scale=20.0, epsilon=0.5, max_label=1.0, positive_above=0.5, **options)
    return model, loss, token_ids(EXAMPLES * rows_per_example), labels, rows_per_example


# tf-keras's reference step runs without its graph, which would cost more to trace than the step
# does to run; Keras 3 compiles it (op by op, JAX would compile each op)
EAGER_REFERENCE = KERAS_MAJOR == 2


def sgd_step(trained, weights_of, loss, inputs, labels, run_eagerly=False):
    """The gradient one step of ``trained`` applies to ``weights_of``'s weights (plain SGD at rate 1)."""
    trained.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss, run_eagerly=run_eagerly)
    before = [w.copy() for w in weights_of.get_weights()]
    trained.fit(inputs, labels, batch_size=len(labels), epochs=1, shuffle=False, verbose=0)
    return [b - a for b, a in zip(before, weights_of.get_weights())]


def assert_same_update(actual, expected):
    """float32 gradients summed over micro-batches in another order than the whole batch's: the same
    to rounding. A token every text holds ([CLS]) sums the contributions of every row, which cancel,
    so its embedding's gradient keeps the rounding of the largest of them: a few parts in 1e5 of the
    largest gradient. A lost slice of the batch or another dropout mask moves the update by a
    sizeable part of it."""
    scale = max(np.abs(g).max() for g in expected)
    assert scale > 0
    for want, got in zip(expected, actual):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * scale)


@pytest.mark.heavy
@pytest.mark.parametrize(
    "case",
    cases_in_ci(
        {
            "feature-cosent": BOTH_BACKENDS,
            "feature-mnrl-hard-negative": BOTH_BACKENDS,
            "interaction-cosent": BOTH_BACKENDS,
            # JAX's step slices the gradient of one output per pair apart from TensorFlow's
            "feature-sbert": ("jax",),
        }
    ),
)
def test_micro_batches_give_the_update_of_the_whole_batch(case, tmp_path):
    model, loss, inputs, labels, rows_per_example = training_setup(tmp_path, case, dropout=0.0)
    start = model.get_weights()
    whole = sgd_step(model, model, loss, inputs, labels, run_eagerly=EAGER_REFERENCE)
    model.set_weights(start)
    cached = sgd_step(GradientCacheModel(model, 3, rows_per_example), model, loss, inputs, labels)
    assert_same_update(cached, whole)


def masked_whole_batch_gradient(cache, loss, inputs, labels):
    """The gradient of the whole batch's loss back-propagated at once, each micro-batch's rows through
    the network its dropout masks make at step 0 (not in micro-batches: an independent reference)."""
    micro_batches = -(-len(labels) // (cache.micro_batch_pairs * cache.rows_per_pair))
    if BACKEND == "jax":
        import jax
        import jax.numpy as jnp

        non_trainable = [v.value for v in cache.non_trainable_variables]

        def value(trainable):
            outputs = []
            for index in range(micro_batches):
                keyed = cache._with_keyed_seeds(non_trainable, cache._dropout_seed(index, jnp.int32(0)))
                piece = cache._micro_batch(inputs, index)
                outputs.append(cache.stateless_call(trainable, keyed, piece, training=True)[0])
            return loss(labels, jnp.concatenate(outputs)), jnp.concatenate(outputs)

        # compiled once: op by op, JAX compiled each of the network's ops for each micro-batch's shapes
        gradients, outputs = jax.jit(jax.grad(value, has_aux=True))([v.value for v in cache.trainable_variables])
        return [np.asarray(g) for g in gradients], np.asarray(outputs)
    # TensorFlow: tf-keras's and Keras 3's
    from cosent_tf.process_keras import tf

    with tf.GradientTape() as tape:
        outputs = tf.concat([cache._outputs(inputs, index) for index in range(micro_batches)], axis=0)
        value = loss(labels, outputs)
    gradients = tape.gradient(value, cache.trainable_variables)
    return [tf.convert_to_tensor(g).numpy() for g in gradients], outputs.numpy()  # the embeddings': sparse


# the dropout cases that also rerun the step and take another seed: what the seed does is the
# same for every loss, and each check costs a step more
RERUN_CASES = ("feature-mnrl-hard-negative", "interaction-cosent")


@pytest.mark.heavy
@pytest.mark.parametrize(
    "case",
    # CI runs two cases on one Keras 3 backend each: on JAX each costs one to two minutes
    cases_in_ci(
        {"feature-mnrl-hard-negative": ("tensorflow",), "interaction-cosent": ("jax",)},
        left_out=("feature-sbert", "interaction-ce"),
    ),
)
def test_with_dropout_both_passes_drop_the_same_units(case, tmp_path):
    model, loss, inputs, labels, rows_per_example = training_setup(tmp_path, case, dropout=0.2)
    start = model.get_weights()
    cache = GradientCacheModel(model, 3, rows_per_example, seed=5)
    cache.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    expected, masked = masked_whole_batch_gradient(cache, loss, inputs, labels)
    # dropout is on: the masked outputs are not the network's plain ones
    assert np.abs(masked - np.asarray(model(inputs, training=False))).max() > 1e-3
    cached = sgd_step(cache, model, loss, inputs, labels)
    assert_same_update(cached, expected)
    if case not in RERUN_CASES:
        return
    # A rerun of the step drops the same units, whatever state the model's dropout kept from the
    # first run: the step compiled above, from the same weights and step.
    model.set_weights(start)
    cache.optimizer.iterations.assign(0)
    before = [w.copy() for w in model.get_weights()]
    cache.fit(inputs, labels, batch_size=len(labels), epochs=1, shuffle=False, verbose=0)
    assert_same_update([b - a for b, a in zip(before, model.get_weights())], cached)
    # another seed drops others (the step's masks are the reference's, shown above)
    model.set_weights(start)
    other_seed = GradientCacheModel(model, 3, rows_per_example, seed=6)
    other_seed.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    other, _ = masked_whole_batch_gradient(other_seed, loss, inputs, labels)
    assert max(np.abs(a - b).max() for a, b in zip(other, cached)) > 1e-3 * max(np.abs(g).max() for g in cached)


@KERAS2_IN_CI
def test_a_micro_batch_holds_whole_groups(tmp_path):
    model, _, inputs, _, rows_per_example = training_setup(tmp_path, "feature-mnrl-hard-negative", dropout=0.0)
    cache = GradientCacheModel(model, 3, rows_per_example)
    pieces = [cache._micro_batch(inputs, index) for index in range(3)]
    assert [len(ids) for ids, _ in pieces] == [9, 9, 6]  # 3, 3 and 2 groups of 3 rows
    np.testing.assert_array_equal(np.concatenate([ids for ids, _ in pieces]), inputs[0])


@pytest.mark.keras2_only(reason="tests/harness.py's Keras object contract is written for tf-keras")
def test_keras_contract(tmp_path):
    from tests.harness import run_keras_object_test

    _, _, inputs, _, _ = training_setup(tmp_path, "feature-cosent", dropout=0.0)

    def arguments():  # the wrapped model is built under the dtype policy being checked
        model, _, _, _, _ = training_setup(tmp_path, "feature-cosent", dropout=0.0)
        return {"model": model, "micro_batch_pairs": 4, "rows_per_pair": 2, "seed": 9}

    run_keras_object_test(GradientCacheModel, arguments, tuple(inputs))


@KERAS2_IN_CI
def test_micro_batch_pairs_must_be_positive(tmp_path):
    model, _, _, _, _ = training_setup(tmp_path, "feature-cosent", dropout=0.0)
    with pytest.raises(ValueError, match="micro_batch_pairs must be positive"):
        GradientCacheModel(model, 0)
    with pytest.raises(ValueError, match=r"rows_per_pair \(the rows of one example\) must be positive, got 0"):
        GradientCacheModel(model, 2, rows_per_pair=0)


def loss_scale_optimizer(initial_scale):
    """Plain SGD at rate 1 under this process's Keras's dynamic loss scaling, from ``initial_scale``."""
    if KERAS_MAJOR == 2:
        return keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=initial_scale)
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=initial_scale)


def loss_scale(optimizer):
    return float(optimizer.loss_scale if KERAS_MAJOR == 2 else optimizer.dynamic_scale)


@pytest.mark.heavy
@KERAS2_IN_CI
@pytest.mark.backends("tensorflow")  # JAX's CPU backend has no float16 matmuls
def test_in_float16_the_scaled_loss_gives_the_whole_batch_gradient(tmp_path):
    with dtype_policy("mixed_float16"):
        model, loss, inputs, labels, _ = training_setup(tmp_path, "feature-cosent", dropout=0.0)
    start = model.get_weights()

    def step(trained, run_eagerly=False):
        optimizer = loss_scale_optimizer(2.0**8)
        trained.compile(optimizer=optimizer, loss=loss, run_eagerly=run_eagerly)
        model.set_weights(start)
        trained.fit(inputs, labels, batch_size=len(labels), epochs=1, shuffle=False, verbose=0)
        assert loss_scale(optimizer) == 2.0**8  # no overflow: the step was taken
        return [b - a for b, a in zip(start, model.get_weights())]

    whole, cached = step(model, run_eagerly=EAGER_REFERENCE), step(GradientCacheModel(model, 3, 2))
    scale = max(np.abs(g).max() for g in whole)
    for expected, actual in zip(whole, cached):  # float16 rounding: a few parts in a thousand
        np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-2 * scale)
    # The gradients really flow scaled: at a scale of 2**40 they overflow float16, and the step is skipped.
    optimizer = loss_scale_optimizer(2.0**40)
    cache = GradientCacheModel(model, 3, 2)
    cache.compile(optimizer=optimizer, loss=loss)
    model.set_weights(start)
    cache.fit(inputs, labels, batch_size=len(labels), epochs=1, shuffle=False, verbose=0)
    assert loss_scale(optimizer) == 2.0**39
    for old, new in zip(start, model.get_weights()):
        np.testing.assert_array_equal(old, new)
