"""Every loss and its options on this process's Keras and backend (tests/backend_maths.py): values
and gradients against float64 NumPy brute forces, ties and all-equal labels, odd rows and bad options
refused, serialisation round trips, and model.fit learning with each feature loss.

Written once: the Keras 2 suite collects it here, tests/keras3/losses/test_brute_force.py imports
it for the Keras 3 suite (TensorFlow and JAX)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cosent_tf import losses
from cosent_tf.process_keras import keras
from tests.backend_maths import cast, numpy_of, value_and_gradient

ALL_DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")


# ---------------------------------------------------------------- float64 brute forces


def cosine(u, v):
    return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))


def pair_cosines(vectors):
    return [cosine(vectors[k], vectors[k + 1]) for k in range(0, len(vectors), 2)]


def log_sum_exp(values):
    peak = max(values)
    return peak + math.log(sum(math.exp(value - peak) for value in values))


def ranking(scores, labels):
    """log(1 + sum over label_i > label_j of exp(score_j - score_i)), one pair of pairs at a time (by
    log-sum-exp, so that a large scale does not overflow)."""
    terms = [0.0] + [
        scores[j] - scores[i] for i in range(len(scores)) for j in range(len(scores)) if labels[i] > labels[j]
    ]
    return log_sum_exp(terms)


def brute_cosent(y, v, scale=20.0):
    y = np.asarray(y, np.float64).reshape(-1)
    return ranking([scale * c for c in pair_cosines(v)], list(y[::2]))


def brute_interaction(y, scores):
    return ranking([min(max(float(s), -1e6), 1e6) for s in np.reshape(scores, -1)], list(np.reshape(y, -1)))


def angle_score(x, y):
    """|Re + Im| of sum(x / y) for unit complex vectors: cos(x, y) + sum(Im x Re y - Re x Im y)."""
    if len(x) % 2:
        x, y = np.append(x, 0.0), np.append(y, 0.0)
    x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
    half = len(x) // 2
    real = sum(x[m] * y[m] + x[m + half] * y[m + half] for m in range(half))
    imaginary = sum(x[m + half] * y[m] - x[m] * y[m + half] for m in range(half))
    return abs(real + imaginary)


def brute_angle(y, v, scale=20.0):
    return ranking([scale * angle_score(v[k], v[k + 1]) for k in range(0, len(v), 2)], list(y[::2]))


def brute_mse(y, v, max_label=1.0):
    return float(np.mean([(c - label / max_label) ** 2 for c, label in zip(pair_cosines(v), y[::2])]))


def brute_contrastive(y, v, epsilon=0.5, positive_above=0.5):
    terms = [1 - c if label > positive_above else max(c - epsilon, 0.0) for c, label in zip(pair_cosines(v), y[::2])]
    return float(np.mean(terms))


def brute_mnrl(v, group_size=2, scale=20.0, directions=("query_to_doc",), partition_mode="joint"):
    examples = len(v) // group_size

    def row(i, c):
        return v[i * group_size + c]

    total = 0.0
    for i in range(examples):
        anchor, positive = row(i, 0), row(i, 1)
        blocks = [[scale * cosine(anchor, row(j, c)) for j in range(examples) for c in range(1, group_size)]]
        if "query_to_query" in directions:
            blocks.append([scale * cosine(anchor, row(j, 0)) for j in range(examples) if j != i])
        if "doc_to_query" in directions:
            blocks.append([scale * cosine(positive, row(j, 0)) for j in range(examples)])
        if "doc_to_doc" in directions:
            blocks.append(
                [scale * cosine(positive, row(j, c)) for j in range(examples) if j != i for c in range(1, group_size)]
            )
        blocks = [block for block in blocks if block]
        if partition_mode == "joint":
            partition = log_sum_exp([value for block in blocks for value in block])
        else:
            partition = sum(log_sum_exp(block) for block in blocks) / len(blocks)
        total += partition - scale * cosine(anchor, positive)
    return total / max(examples, 1)


def brute_cosent_ibn(y, v, cosine_w, ibn_w, angle_w, cosine_scale, ibn_scale, angle_scale, positive_above, directions):
    positive_rows = np.repeat(y[::2] > positive_above, 2)
    ibn = brute_mnrl(v[positive_rows], 2, ibn_scale, directions) if positive_rows.any() else 0.0
    return cosine_w * brute_cosent(y, v, cosine_scale) + ibn_w * ibn + angle_w * brute_angle(y, v, angle_scale)


def brute_softmax(y, probabilities):
    labels = y[::2].astype(int)
    rows = range(len(labels))
    return -float(np.mean([math.log(probabilities[k, labels[k]] / probabilities[k].sum()) for k in rows]))


def numerical_gradient(function, x, step=1e-6):
    """Central differences of a float64 function, one coordinate at a time."""
    x = np.array(x, np.float64)
    gradient = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        gradient[index] = (function(up) - function(down)) / (2 * step)
    return gradient


# ---------------------------------------------------------------- the cases

IBN = dict(cosine_w=0.3, ibn_w=2.0, angle_w=0.7, cosine_scale=15.0, ibn_scale=25.0, angle_scale=10.0)


def pair_batch(seed, pairs, width, labels="binary"):
    rng = np.random.default_rng(seed)
    if labels == "binary":
        pair_labels = rng.integers(0, 2, pairs).astype(np.float64)
        pair_labels[:2] = (1.0, 0.0)  # a positive and a negative pair
    elif labels == "ties":
        pair_labels = rng.choice([0.0, 2.5, 5.0], pairs)
        pair_labels[:3] = (5.0, 0.0, 0.0)[:pairs]  # ordered pairs and a tie
    elif labels == "graded":  # float scores, as STS-B's
        pair_labels = rng.uniform(0.0, 5.0, pairs)
        pair_labels[:2] = (4.5, 0.5)
    else:
        pair_labels = np.full(pairs, 3.0)
    vectors = rng.normal(size=(2 * pairs, width))
    vectors[1::2] += 0.5 * vectors[::2]  # matches near, so the softmax is far from uniform
    return np.repeat(pair_labels, 2), vectors


# name: (Keras class name, its options, brute force (y, v), batch from (seed, labels))
# (pairs, width, labels): odd widths too (AnglE pads them), labels 0/1, tied grades, float scores
BATCHES = [(2, 4, "binary"), (5, 3, "ties"), (4, 5, "graded")]
CASES = {
    "cosent": ("CoSENTLoss", dict(scale=20.0), lambda y, v: brute_cosent(y, v, 20.0)),
    "cosent-scale-7": ("CoSENTLoss", dict(scale=7.0, global_batch=False), lambda y, v: brute_cosent(y, v, 7.0)),
    "angle": ("AnglELoss", dict(scale=12.0), lambda y, v: brute_angle(y, v, 12.0)),
    "mse": ("CosineMSELoss", dict(max_label=5.0), lambda y, v: brute_mse(y, v, 5.0)),
    "contrastive": (
        "ThresholdContrastiveLoss",
        dict(epsilon=0.2, positive_above=0.5),
        lambda y, v: brute_contrastive(y, v, 0.2, 0.5),
    ),
    "cosent-ibn": (
        "CoSENTIBNLoss",
        dict(IBN, positive_above=0.5),
        lambda y, v: brute_cosent_ibn(y, v, **IBN, positive_above=0.5, directions=("query_to_doc",)),
    ),
    "cosent-ibn-both-ways": (
        "CoSENTIBNLoss",
        dict(IBN, positive_above=2.0, directions=["query_to_doc", "doc_to_query"]),
        lambda y, v: brute_cosent_ibn(y, v, **IBN, positive_above=2.0, directions=("query_to_doc", "doc_to_query")),
    ),
    "mnrl": ("MultipleNegativesRankingLoss", dict(scale=20.0), lambda y, v: brute_mnrl(v, 2, 20.0)),
}
# MNRL with hard negatives, every direction and partition mode: (group_size, directions, mode)
MNRL_VARIANTS = {
    "g3-forward": (3, ("query_to_doc",), "joint"),
    "g2-symmetric-joint": (2, ("query_to_doc", "doc_to_query"), "joint"),
    "g3-symmetric-per-direction": (3, ("query_to_doc", "doc_to_query"), "per_direction"),
    "g4-all-four": (4, ALL_DIRECTIONS, "joint"),
}
MATRYOSHKA = {
    "matryoshka-cosent": (
        dict(loss=("CoSENTLoss", dict(scale=10.0)), dims=[5, 3, 2], weights=[1.0, 0.5, 2.0]),
        lambda y, v: sum(w * brute_cosent(y, v[:, :d], 10.0) for d, w in ((5, 1.0), (3, 0.5), (2, 2.0))),
    ),
    "matryoshka-angle": (
        dict(loss=("AnglELoss", dict(scale=12.0)), dims=[4, 3], weights=None),
        lambda y, v: brute_angle(y, v[:, :4], 12.0) + brute_angle(y, v[:, :3], 12.0),
    ),
}


def built_loss(class_name, options):
    options = dict(options)
    if "loss" in options:
        inner_name, inner_options = options.pop("loss")
        return losses.MatryoshkaLoss(built_loss(inner_name, inner_options), **options)
    return getattr(losses, class_name)(**options)


def check_against_brute_force(loss, brute_force, y, v):
    value, gradient = value_and_gradient(lambda x: loss(y.astype(np.float32), x), v)
    v32 = v.astype(np.float32).astype(np.float64)  # the brute force on exactly the inputs the loss saw
    expected = brute_force(y, v32)
    assert value == pytest.approx(expected, rel=2e-5, abs=2e-5)
    expected_gradient = numerical_gradient(lambda x: brute_force(y, x), v32)
    scale = max(1.0, np.abs(expected_gradient).max())
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-3, atol=2e-4 * scale)
    return value, expected_gradient


@pytest.mark.parametrize("batch", BATCHES, ids=[f"{p}pairs-{w}wide-{labels}" for p, w, labels in BATCHES])
@pytest.mark.parametrize("name", sorted(CASES))
def test_pair_losses_equal_the_brute_force_in_value_and_gradient(name, batch):
    class_name, options, brute_force = CASES[name]
    pairs, width, labels = batch
    y, v = pair_batch(len(name) + pairs, pairs, width, labels=labels)
    value, expected_gradient = check_against_brute_force(built_loss(class_name, options), brute_force, y, v)
    assert abs(value) > 1e-3 and np.abs(expected_gradient).max() > 1e-3  # the comparison means something


@pytest.mark.parametrize("examples", [1, 4])
@pytest.mark.parametrize("variant", sorted(MNRL_VARIANTS))
def test_mnrl_with_hard_negatives_and_every_direction_equals_the_brute_force(variant, examples):
    group_size, directions, mode = MNRL_VARIANTS[variant]
    v = np.random.default_rng(examples).normal(size=(examples * group_size, 5))
    loss = losses.MultipleNegativesRankingLoss(9.0, group_size, directions, mode)
    check_against_brute_force(loss, lambda y, x: brute_mnrl(x, group_size, 9.0, directions, mode), np.zeros(len(v)), v)


@pytest.mark.parametrize("name", sorted(MATRYOSHKA))
def test_matryoshka_equals_the_weighted_brute_force_on_the_cut_vectors(name):
    options, brute_force = MATRYOSHKA[name]
    y, v = pair_batch(3, 5, 6, labels="ties")
    check_against_brute_force(built_loss("MatryoshkaLoss", options), brute_force, y, v)


@pytest.mark.parametrize("pairs", [1, 4])
def test_interaction_cosent_equals_the_brute_force(pairs):
    rng = np.random.default_rng(pairs)
    scores, labels = rng.normal(size=(2 * pairs, 1)) * 3, rng.choice([0.0, 1.0, 2.0], 2 * pairs)
    labels[:2] = (0.0, 2.0)
    check_against_brute_force(losses.InteractionCoSENTLoss(), brute_interaction, labels, scores)


def test_sentence_bert_softmax_equals_the_brute_force():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(4, 3))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = np.repeat([0.0, 2.0, 1.0, 2.0], 2)

    # the head gives log-probabilities (on both Kerases), which the loss reads
    def brute_log_softmax(y, log_probabilities):
        return -np.mean(log_probabilities[np.arange(len(log_probabilities)), y[::2].astype(int)])

    assert brute_log_softmax(y, np.log(probabilities)) == pytest.approx(brute_softmax(y, probabilities))
    check_against_brute_force(losses.SentenceBertSoftmaxLoss(), brute_log_softmax, y, np.log(probabilities))


def test_sentence_bert_softmax_of_a_confidently_wrong_pair_is_not_clipped():
    """Probabilities would lose it: Keras 3 clips their cross-entropy at -log(1e-7) = 16.1 on JAX
    (tf-keras and Keras 3 on TensorFlow take the logits behind a softmax); log-probabilities keep it."""
    logits = np.array([[30.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    y = np.repeat([1.0, 0.0], 2).astype(np.float32)
    value = float(numpy_of(losses.SentenceBertSoftmaxLoss()(y, log_probabilities.astype(np.float32))))
    assert value == pytest.approx((np.log(np.exp(30.0) + 2.0) + np.log(3.0)) / 2, rel=1e-5)  # mean of 2 pairs


def test_the_head_is_log_softmax_of_a_dense_layer_on_u_v_and_their_distance():
    vectors = np.random.default_rng(6).normal(size=(6, 4)).astype(np.float32)
    head = losses.SentenceBertHead(3)
    log_probabilities = numpy_of(head(vectors))
    kernel, bias = (numpy_of(w) for w in head.classifier.weights)
    u, v = vectors[::2].astype(np.float64), vectors[1::2].astype(np.float64)
    logits = np.concatenate([u, v, np.abs(u - v)], axis=1) @ kernel + bias
    expected = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(log_probabilities, expected, rtol=1e-5, atol=1e-6)
    assert log_probabilities.dtype == np.float32 and head.classifier.name == "classifier"


def test_a_bfloat16_batch_gives_each_loss_in_float32():
    """What a model under mixed_bfloat16 feeds a loss; the value and gradient on it: each loss's module."""
    for name, (class_name, options, _) in CASES.items():
        y, v = pair_batch(len(name), 4, 6)
        value = numpy_of(built_loss(class_name, options)(y.astype(np.float32), cast(v, "bfloat16")))
        assert value.dtype == np.float32 and np.isfinite(value), name


@pytest.mark.parametrize("class_name", ["CoSENTLoss", "AnglELoss", "InteractionCoSENTLoss"])
def test_a_batch_whose_labels_are_all_equal_has_loss_and_gradient_zero(class_name):
    y, v = pair_batch(0, 4, 5, labels="equal")
    if class_name == "InteractionCoSENTLoss":
        v = v[:, :1]
    value, gradient = value_and_gradient(lambda x: getattr(losses, class_name)()(y.astype(np.float32), x), v)
    assert value == 0.0 and np.all(gradient == 0.0)


def test_cosent_ibn_without_a_positive_pair_adds_nothing_for_its_in_batch_part():
    # the in-batch part masks the pairs that are not positive (no gather: JAX traces it)
    y, v = pair_batch(1, 4, 5, labels="equal")
    y = np.zeros_like(y)
    value, gradient = value_and_gradient(lambda x: losses.CoSENTIBNLoss(0.0, 20.0, 0.0)(y.astype(np.float32), x), v)
    assert value == 0.0 and np.all(gradient == 0.0)


@pytest.mark.heavy  # tracing the gradient of the three losses' graph takes seconds on tf-keras
@pytest.mark.backends("tensorflow")
def test_the_losses_run_in_a_graph_with_an_unknown_batch_size():
    """Under tf.function (as model.fit traces them) the batch size may be unknown: the masks and
    checks must hold without it. On JAX every test here runs jit-compiled (value_and_gradient)."""
    import tensorflow as tf

    y, v = pair_batch(2, 4, 6)
    loss = losses.CoSENTIBNLoss(cosine_w=1.0, directions=("query_to_doc", "doc_to_query"))
    eager, eager_gradient = value_and_gradient(lambda x: loss(y.astype(np.float32), x), v)

    @tf.function(input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None, 6])])
    def traced(labels, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(labels, x)
        return value, tape.gradient(value, x)

    value, gradient = traced(tf.constant(y, tf.float32), tf.constant(v, tf.float32))
    assert float(value) == pytest.approx(eager, rel=1e-6)
    np.testing.assert_allclose(gradient.numpy(), eager_gradient, rtol=1e-5, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="even number of rows"):
        traced(tf.zeros(5), tf.ones((5, 6)))


@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize(
    "name, rows, message",
    [
        ("cosent", 5, "even number of rows"),
        ("angle", 3, "even number of rows"),
        ("mnrl-groups-of-3", 7, "group_size=3"),
    ],
)
def test_rows_that_are_not_whole_pairs_or_groups_are_refused_in_a_graph_with_an_unknown_batch_size(name, rows, message):
    import tensorflow as tf

    loss = {
        "cosent": losses.CoSENTLoss(),
        "angle": losses.AnglELoss(),
        "mnrl-groups-of-3": losses.MultipleNegativesRankingLoss(group_size=3),
    }[name]

    @tf.function(input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None, 4])])
    def unknown_batch(y_true, y_pred):
        return loss(y_true, y_pred)

    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        unknown_batch(tf.zeros(rows), tf.ones((rows, 4)))
    assert math.isfinite(float(unknown_batch(tf.zeros(6), tf.ones((6, 4)))))


# ---------------------------------------------------------------- serialisation and bad options

SERIALISED = [
    losses.CoSENTLoss(scale=13.0, global_batch=False),
    losses.InteractionCoSENTLoss(global_batch=False),
    losses.SentenceBertSoftmaxLoss(name="sbert"),
    losses.CosineMSELoss(max_label=5.0),
    losses.ThresholdContrastiveLoss(epsilon=0.3, positive_above=2.5),
    losses.MultipleNegativesRankingLoss(10.0, 3, ("query_to_doc", "doc_to_query"), "per_direction", False),
    losses.AnglELoss(scale=11.0),
    losses.CoSENTIBNLoss(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.7, ("query_to_doc", "doc_to_doc"), False),
    losses.MatryoshkaLoss(losses.AnglELoss(9.0), dims=[4, 2], weights=[1.0, 0.25]),
]


@pytest.mark.parametrize("loss", SERIALISED, ids=[type(loss).__name__ for loss in SERIALISED])
def test_serialisation_round_trip_keeps_the_class_config_and_value(loss):
    serialised = keras.saving.serialize_keras_object(loss)
    assert serialised["registered_name"] == f"cosent_tf>{type(loss).__name__}"
    rebuilt = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialised)))
    assert type(rebuilt) is type(loss) and rebuilt.get_config() == loss.get_config()
    if isinstance(loss, losses.InteractionCoSENTLoss):
        y, v = np.array([0.0, 1.0, 2.0], np.float32), np.array([[0.3], [0.1], [-0.2]], np.float32)
    elif isinstance(loss, losses.SentenceBertSoftmaxLoss):
        y, v = np.array([0.0, 0.0, 1.0, 1.0], np.float32), np.array([[0.7, 0.3], [0.4, 0.6]], np.float32)
    else:
        y, v = pair_batch(0, 3, 4, labels="ties")
        y, v = y.astype(np.float32), v.astype(np.float32)
    assert float(rebuilt(y, v)) == float(loss(y, v))


def test_the_configs_are_the_keras2_ones():
    config = losses.CoSENTIBNLoss(directions=("query_to_doc", "doc_to_query")).get_config()
    assert config["directions"] == ["query_to_doc", "doc_to_query"] and config["ibn_w"] == 20.0
    inner = losses.MatryoshkaLoss(losses.CoSENTLoss(), [8, 4]).get_config()["loss"]
    assert inner["registered_name"] == "cosent_tf>CoSENTLoss" and inner["config"]["scale"] == 20.0
    assert losses.SentenceBertHead(3, name="h").get_config()["num_classes"] == 3


@pytest.mark.parametrize(
    "loss",
    [
        losses.CoSENTLoss(),
        losses.AnglELoss(),
        losses.CosineMSELoss(),
        losses.ThresholdContrastiveLoss(),
        losses.CoSENTIBNLoss(),
    ],
)
def test_an_odd_number_of_rows_is_refused_naming_the_pair_layout(loss):
    with pytest.raises(ValueError, match="needs an even number of rows .* got 5"):
        loss(np.zeros(5, np.float32), np.ones((5, 4), np.float32))


def test_the_head_refuses_an_odd_batch():
    with pytest.raises(ValueError, match="even number of rows"):
        losses.SentenceBertHead(2)(np.ones((3, 4), np.float32))


def test_rows_that_are_not_whole_groups_are_refused_naming_group_size():
    with pytest.raises(ValueError, match="group_size=3 .* it has 7 rows, a number that is not a multiple of 3"):
        losses.MultipleNegativesRankingLoss(group_size=3)(np.zeros(7), np.ones((7, 4), np.float32))


def test_bad_matryoshka_options_are_refused():
    with pytest.raises(ValueError, match="names a width twice"):
        losses.MatryoshkaLoss(losses.CoSENTLoss(), [4, 4])
    with pytest.raises(ValueError, match="wraps a loss of this process.s Keras"):
        losses.MatryoshkaLoss(lambda y, x: 0.0, [4])
    with pytest.raises(ValueError, match="the vectors have 4 dimensions, fewer than 8"):
        losses.MatryoshkaLoss(losses.CoSENTLoss(), [8, 2])(np.zeros(4), np.ones((4, 4), np.float32))


# ---------------------------------------------------------------- model.fit learns

FIT_LOSSES = {
    "cosent": lambda: losses.CoSENTLoss(),
    "angle": lambda: losses.AnglELoss(),
    "mse": lambda: losses.CosineMSELoss(),
    "contrastive": lambda: losses.ThresholdContrastiveLoss(0.2),
    "mnrl": lambda: losses.MultipleNegativesRankingLoss(10.0),
    "cosent-ibn": lambda: losses.CoSENTIBNLoss(cosine_w=1.0, ibn_w=1.0),
    "matryoshka": lambda: losses.MatryoshkaLoss(losses.CoSENTLoss(), [4, 2]),
    "sbert": lambda: losses.SentenceBertSoftmaxLoss(),
}


def synonym_pairs():
    """Interleaved pairs of 6-wide features: a match is a noisy copy, a mismatch another row."""
    rng = np.random.default_rng(0)
    firsts = rng.normal(size=(64, 6))
    matches = np.arange(64) % 2 == 0
    seconds = np.where(matches[:, None], firsts + 0.3 * rng.normal(size=(64, 6)), rng.normal(size=(64, 6)))
    x = np.stack([firsts, seconds], axis=1).reshape(128, 6).astype(np.float32)
    return x, np.repeat(matches, 2).astype(np.float32)


@pytest.mark.parametrize("name", sorted(FIT_LOSSES))
def test_model_fit_with_each_feature_loss_learns(name):
    x, y = synonym_pairs()
    if name == "mnrl":  # (anchor, positive) groups: the matches only
        keep = np.repeat(y[::2] > 0, 2)
        x, y = x[keep], y[keep]
    inputs = keras.Input((6,))
    outputs = keras.layers.Dense(4, use_bias=False)(inputs)
    if name == "sbert":
        outputs = losses.SentenceBertHead(2)(outputs)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(0.03), loss=FIT_LOSSES[name]())
    history = model.fit(x, y, batch_size=16, epochs=8, shuffle=False, verbose=0).history["loss"]
    assert all(math.isfinite(value) for value in history)
    assert history[-1] < 0.85 * history[0], history


def test_the_head_survives_serialisation_with_its_weights(tmp_path):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, losses.SentenceBertHead(3, name="head")(inputs))
    vectors = np.random.default_rng(12).normal(size=(6, 4)).astype(np.float32)
    model.save(tmp_path / "head.keras")
    loaded = keras.saving.load_model(tmp_path / "head.keras")
    assert type(loaded.get_layer("head")) is losses.SentenceBertHead
    assert loaded.get_layer("head").get_config() == model.get_layer("head").get_config()
    np.testing.assert_allclose(numpy_of(loaded(vectors)), numpy_of(model(vectors)))


@pytest.mark.parametrize("class_name", ["CoSENTLoss", "MultipleNegativesRankingLoss", "SentenceBertSoftmaxLoss"])
def test_a_batch_loss_refuses_per_example_weights(class_name):
    """One value for the batch cannot be weighted per example (on Keras 3 Keras would also divide it
    by the replicas a second time; on tf-keras it failed in a squeeze)."""
    y, v = pair_batch(0, 4, 6)
    with pytest.raises(ValueError, match=f"{class_name} gives one value for the whole batch"):
        getattr(losses, class_name)()(y.astype(np.float32), v.astype(np.float32), sample_weight=np.ones(8, np.float32))
