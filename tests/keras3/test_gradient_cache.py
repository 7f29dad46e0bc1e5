"""The gradient cache (cosent_tf.training.gradient_cache) on Keras 3, on this process's backend.

A step in micro-batches must make the update the whole batch makes: the same weights after one SGD
step at rate 1 (the weights move by minus the gradient), with dropout off. With dropout on, both
passes over a micro-batch must drop the same units: the step then equals the whole batch
back-propagated at once through the networks that each micro-batch's masks make.
"""

import json

import keras
import numpy as np
import pytest

from cosent_tf.keras3.models import build_from_spec
from cosent_tf.losses import get_loss
from cosent_tf.models.sources import open_source
from cosent_tf.models.spec import ModelSpec
from cosent_tf.training.gradient_cache import GradientCacheModel
from tests.keras3.support import tiny_bert_config
from tests.keras3.test_training import _spearman, texts_of, tiny_run  # noqa: F401  (tiny_run: a fixture)

EXAMPLES = 8  # in micro-batches of 3: 3 + 3 + 2 examples
VOCAB = 3000


def tiny_model(tmp_path, spec, dropout):
    """A tiny random BERT model of ``spec`` whose dropout (hidden and attention) is ``dropout``."""
    config = tiny_bert_config(
        vocab_size=VOCAB, num_hidden_layers=1, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout
    )
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return build_from_spec(spec, open_source(None, config=str(path)))


def token_ids(rows):
    """``rows`` texts of random tokens, padded to several lengths, as [token ids, segment ids]."""
    rng = np.random.default_rng(3)
    ids = rng.integers(200, VOCAB, (rows, 9)).astype(np.int32)
    ids[:, 0] = 101
    for row, length in enumerate(rng.integers(4, 10, rows)):
        ids[row, length:] = 0
    return [ids, np.zeros_like(ids)]


# case: (model kind, loss, rows per example, build options)
CASES = {
    "feature-cosent": ("feature", "cosent", 2, {}),
    # groups of an anchor, its positive and a hard negative: a micro-batch never splits one
    "feature-mnrl-hard-negative": ("feature", "mnrl", 3, {"group_size": 3}),
    "interaction-cosent": ("interaction", "cosent", 1, {}),
}


def training_setup(tmp_path, case, dropout):
    """(model, loss, inputs, labels, rows per example) for EXAMPLES examples of ``case``."""
    kind, loss_name, rows_per_example, options = CASES[case]
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
    rows = EXAMPLES * rows_per_example
    if loss_name == "mnrl":
        labels = np.zeros(rows, np.float32)  # unread: a group's order is its labels
    else:  # graded labels, each on the rows of its pair
        labels = np.repeat(np.array([1, 0, 0.75, 1, 0.25, 0, 1, 0.5], np.float32), rows_per_example)
    loss = entry.build(scale=20.0, epsilon=0.5, max_label=1.0, positive_above=0.5, **options)
    return model, loss, token_ids(rows), labels, rows_per_example


def sgd_step(trained, weights_of, loss, inputs, labels):
    """The gradient one step of ``trained`` applies to ``weights_of``'s weights (plain SGD at rate 1)."""
    trained.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
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
@pytest.mark.parametrize("case", CASES)
def test_micro_batches_give_the_update_of_the_whole_batch(case, tmp_path):
    model, loss, inputs, labels, rows_per_example = training_setup(tmp_path, case, dropout=0.0)
    start = model.get_weights()
    whole = sgd_step(model, model, loss, inputs, labels)
    model.set_weights(start)
    cached = sgd_step(GradientCacheModel(model, 3, rows_per_example), model, loss, inputs, labels)
    assert_same_update(cached, whole)


def masked_whole_batch_gradient(cache, loss, inputs, labels):
    """The gradient of the whole batch's loss back-propagated at once, each micro-batch's rows through
    the network its dropout masks make at step 0 (not in micro-batches: an independent reference)."""
    micro_batches = -(-len(labels) // (cache.micro_batch_pairs * cache.rows_per_pair))
    if keras.backend.backend() == "jax":
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
    import tensorflow as tf

    with tf.GradientTape() as tape:
        outputs = tf.concat([cache._outputs(inputs, index) for index in range(micro_batches)], axis=0)
        value = loss(labels, outputs)
    gradients = tape.gradient(value, cache.trainable_variables)
    return [tf.convert_to_tensor(g).numpy() for g in gradients], outputs.numpy()  # the embeddings': sparse


@pytest.mark.heavy
@pytest.mark.parametrize(
    "case",
    [  # CI runs each case on one backend (both in make test-full): on JAX each costs one to two minutes
        pytest.param("feature-mnrl-hard-negative", marks=pytest.mark.ci_backend("tensorflow")),
        pytest.param("interaction-cosent", marks=pytest.mark.ci_backend("jax")),
    ],
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
    # a rerun of the step drops the same units; another seed drops others
    model.set_weights(start)
    assert_same_update(
        sgd_step(GradientCacheModel(model, 3, rows_per_example, seed=5), model, loss, inputs, labels), cached
    )
    model.set_weights(start)
    other = sgd_step(GradientCacheModel(model, 3, rows_per_example, seed=6), model, loss, inputs, labels)
    assert max(np.abs(a - b).max() for a, b in zip(other, cached)) > 1e-3 * max(np.abs(g).max() for g in cached)


@pytest.mark.heavy
# CI runs it on TensorFlow (on JAX in make test-full): JAX's step is shown equal to the whole batch's above,
# and a run compiles it again for each shape, several times this module's other tests
@pytest.mark.ci_backend("tensorflow")
def test_a_run_in_micro_batches_learns(tiny_run):  # noqa: F811  (the fixture imported above)
    from cosent_tf.keras3 import train
    from cosent_tf.keras3.encoder import SentenceEncoder
    from cosent_tf.training.config import RunConfig

    cfg, start = tiny_run
    texts = texts_of(cfg.valid_file)
    labels = np.loadtxt(cfg.valid_file, dtype=str, delimiter="\t")[:, 2].astype(float)
    untrained = _spearman(SentenceEncoder.load(start).encode(texts), labels)
    metrics = train(RunConfig(**{**cfg.__dict__, "micro_batch_size": 3}))
    assert metrics["steps"] == 2 * 6
    assert metrics["valid"]["spearman"] > untrained + 0.1, untrained
