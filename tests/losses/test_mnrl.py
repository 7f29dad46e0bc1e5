"""MultipleNegativesRankingLoss: sentence-transformers' values and gradients, a brute force and bad
input, on this process's Keras (collected by the Keras 2 suite here and by the Keras 3 suite through
tests/keras3/losses/ (a module of the same name)).

The sentence-transformers side runs in the reference environment (tests/reference/loss_reference.py,
with ``COSENT_REFERENCE_PYTHON``, as the Hugging Face parity tests do); without it these tests fail.
"""

from __future__ import annotations

import json
import math
import os
import subprocess

import numpy as np
import pytest

from cosent_tf.losses import MultipleNegativesRankingLoss
from cosent_tf.losses.mnrl import multiple_negatives_ranking_loss
from tests.backend_maths import HAS_FLOAT64, bfloat16_rounded
from tests.backend_maths import loss_value_and_gradient as value_and_gradient
from tests.losses.test_brute_force import brute_mnrl as brute_force_mnrl
from tests.reference_cache import ROOT, cached, contents, interpreter

REFERENCE_SCRIPT = os.path.join(ROOT, "tests", "reference", "loss_reference.py")
TOLERANCE = 1e-5
ALL_DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
# (directions, partition_mode): the standard loss, the symmetric one both ways, GTE's four terms
VARIANTS = {
    "forward": (("query_to_doc",), "joint"),
    "symmetric-joint": (("query_to_doc", "doc_to_query"), "joint"),
    "symmetric-per-direction": (("query_to_doc", "doc_to_query"), "per_direction"),
    "all-four": (ALL_DIRECTIONS, "joint"),
}


def run_reference(folder, cases, inputs):
    """sentence-transformers' loss and gradient for each case: {name: (loss, gradient)}, from one
    run of the reference script."""
    python = os.environ.get("COSENT_REFERENCE_PYTHON", os.path.join(ROOT, ".venv-reference", "bin", "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"{python} does not exist: these tests compare with sentence-transformers in its own environment; "
            "run them with `make test`, which builds .venv-reference (or set COSENT_REFERENCE_PYTHON)"
        )

    def produce():
        (folder / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
        np.savez(folder / "inputs.npz", **inputs)
        command = [python, REFERENCE_SCRIPT, folder / "cases.json", folder / "inputs.npz", folder / "out.npz"]
        done = subprocess.run(list(map(str, command)), capture_output=True, text=True)
        assert done.returncode == 0, f"the reference script failed:\n{done.stderr}"
        return dict(np.load(folder / "out.npz"))

    # cached (tests/reference_cache.py), so that a rerun or a second worker starts no torch process
    key = [contents(REFERENCE_SCRIPT), interpreter(python), json.dumps(cases, sort_keys=True), dict(inputs)]
    results = cached("loss-reference", key, produce)
    return {
        case["name"]: (float(results[f"{case['name']}.loss"]), results[f"{case['name']}.gradient"]) for case in cases
    }


def parity_cases():
    rng = np.random.default_rng(36)
    cases, inputs = [], {}
    # each variant once, each group size (2, 3 and 4: one and more hard negatives) among them; the
    # variants' gradients against the float64 brute force: tests/losses/test_brute_force.py
    for (variant, (directions, partition_mode)), group_size in zip(VARIANTS.items(), (2, 3, 4, 3)):
        name = f"g{group_size}-{variant}"
        examples = int(rng.integers(3, 9))
        cases.append(
            dict(
                name=name,
                loss="mnrl",
                scale=20.0,
                group_size=group_size,
                directions=list(directions),
                partition_mode=partition_mode,
            )
        )
        # near-duplicate rows make the softmax far from uniform, where errors would show
        vectors = rng.normal(size=(examples * group_size, 16))
        vectors[1::group_size] += 0.4 * vectors[::group_size]
        inputs[f"{name}.vectors"] = vectors.astype(np.float32)
    return cases, inputs


CASES, INPUTS = parity_cases()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return run_reference(tmp_path_factory.mktemp("mnrl-reference"), CASES, INPUTS)


@pytest.mark.heavy
@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_values_and_gradients_equal_sentence_transformers(case, reference):
    vectors = INPUTS[f"{case['name']}.vectors"]
    loss = MultipleNegativesRankingLoss(
        case["scale"], case["group_size"], case["directions"], case["partition_mode"], global_batch=False
    )
    value, gradient = value_and_gradient(loss, np.zeros(len(vectors), np.float32), vectors)
    expected_value, expected_gradient = reference[case["name"]]
    assert abs(value - expected_value) <= TOLERANCE
    np.testing.assert_allclose(gradient, expected_gradient, atol=TOLERANCE, rtol=0)
    # the loss is away from 0 and the gradient is not negligible, so the comparison means something
    assert expected_value > 0.1 and np.abs(expected_gradient).max() > 0.01


def test_hand_computed_two_pairs():
    # anchor 0 = (1, 0), positive 0 = (0.6, 0.8); anchor 1 = (0, 1), positive 1 = (0, 2):
    # cos(a0, p0) = 0.6, cos(a0, p1) = 0, cos(a1, p0) = 0.8, cos(a1, p1) = 1.
    vectors = np.array([[1, 0], [0.6, 0.8], [0, 1], [0, 2]], dtype=np.float64)
    forward = ((math.log(math.exp(0.6) + 1) - 0.6) + (math.log(math.exp(0.8) + math.e) - 1)) / 2
    exact = 1e-12 if HAS_FLOAT64 else 1e-6  # float64 is computed in float64 where the backend has it
    assert float(multiple_negatives_ranking_loss(None, vectors, scale=1.0)) == pytest.approx(forward, rel=exact)
    # the positives' rows against the anchors: p0 -> (0.6, 0.8), p1 -> (0, 1)
    backward = ((math.log(math.exp(0.6) + math.exp(0.8)) - 0.6) + (math.log(1 + math.e) - 1)) / 2
    symmetric = multiple_negatives_ranking_loss(
        None, vectors, 1.0, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
    )
    assert float(symmetric) == pytest.approx((forward + backward) / 2, rel=exact)


def test_a_hard_negative_is_a_candidate_of_every_anchor():
    rng = np.random.default_rng(3)
    pairs = rng.normal(size=(4, 2, 5))
    negatives = rng.normal(size=(4, 1, 5))
    with_negatives = np.concatenate([pairs, negatives], axis=1).reshape(12, 5)
    # more candidates can only raise each anchor's partition function
    assert float(multiple_negatives_ranking_loss(None, with_negatives, group_size=3)) > float(
        multiple_negatives_ranking_loss(None, pairs.reshape(8, 5))
    )


def test_labels_are_not_read():
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(9, 4)).astype(np.float32)
    loss = MultipleNegativesRankingLoss(group_size=3)
    values = {float(loss(y_true, vectors)) for y_true in (np.zeros(9), rng.normal(size=(9, 1)), np.arange(9.0))}
    assert len(values) == 1


def test_zero_vectors_and_one_example_stay_finite():
    vectors = np.zeros((6, 4), np.float32)
    value, gradient = value_and_gradient(MultipleNegativesRankingLoss(group_size=3), np.zeros(6), vectors)
    assert math.isfinite(value) and np.all(np.isfinite(gradient))
    one = np.random.default_rng(5).normal(size=(2, 4)).astype(np.float32)
    value, gradient = value_and_gradient(MultipleNegativesRankingLoss(), np.zeros(2), one)
    # one example has no negative: its positive is its only candidate
    assert value == pytest.approx(0.0, abs=1e-6) and np.all(np.isfinite(gradient))
    # with every direction the positive is there twice (anchor to positive, positive to anchor)
    # and the masked terms (an anchor to itself, a positive to its own group) add nothing
    value, gradient = value_and_gradient(MultipleNegativesRankingLoss(directions=ALL_DIRECTIONS), np.zeros(2), one)
    assert value == pytest.approx(math.log(2.0), abs=1e-6) and np.all(np.isfinite(gradient))


def test_finite_float32_in_mixed_bfloat16():
    vectors = np.random.default_rng(6).normal(size=(24, 16))
    loss = MultipleNegativesRankingLoss(group_size=3, directions=("query_to_doc", "doc_to_query"))
    value, gradient = value_and_gradient(loss, np.zeros(24, np.float32), vectors, "bfloat16")
    assert math.isfinite(value) and np.all(np.isfinite(gradient))
    expected = brute_force_mnrl(bfloat16_rounded(vectors), 3, 20.0, ("query_to_doc", "doc_to_query"))
    assert value == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(group_size=1), "group_size must be an integer of at least 2"),
        (dict(group_size=2.5), "group_size must be an integer of at least 2"),
        (dict(directions=("query_to_doc", "doc_to_answer")), "unknown direction.*doc_to_answer"),
        (dict(directions=("doc_to_query",)), "must include 'query_to_doc'"),
        (dict(directions=ALL_DIRECTIONS, partition_mode="per_direction"), "use partition_mode='joint'"),
        (dict(partition_mode="separate"), "partition_mode must be one of joint, per_direction"),
    ],
)
def test_bad_options_are_refused_when_built(options, message):
    with pytest.raises(ValueError, match=message):
        MultipleNegativesRankingLoss(**options)


# Two replicas and two workers against one device, for every in-batch loss: tests/losses/test_distributed.py
# (Keras 2). Rows that are not whole groups in a graph of unknown batch size: tests/losses/test_brute_force.py.
