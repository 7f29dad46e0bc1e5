"""The Keras contract (tests/harness.py: config round trip, a .keras file holding it, float32 under
mixed_bfloat16, gradients reaching its input) of every loss and of the Sentence-BERT head, on tf-keras.

Keras 2 only: the harness is tf-keras's. On both Kerases, tests/losses/test_brute_force.py checks the
serialisation round trips and the head in a .keras file, and the loss modules their bfloat16 values.
"""

import numpy as np
import pytest

from cosent_tf.losses import (
    AnglELoss,
    CoSENTIBNLoss,
    CoSENTLoss,
    CosineMSELoss,
    InteractionCoSENTLoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
    SentenceBertHead,
    SentenceBertSoftmaxLoss,
    ThresholdContrastiveLoss,
)
from tests.harness import run_keras_object_test


def pair_labels_and_vectors(seed, pair_labels, width):
    vectors = np.random.default_rng(seed).normal(size=(2 * len(pair_labels), width)).astype(np.float32)
    return np.repeat(np.asarray(pair_labels, np.float32), 2), vectors


# name: (class, its options, (y_true, y_pred))
LOSSES = {
    "cosent": (CoSENTLoss, {"scale": 7.5, "global_batch": False}, pair_labels_and_vectors(7, [0, 1, 2, 1], 5)),
    "angle": (AnglELoss, {"scale": 7.5, "global_batch": False}, pair_labels_and_vectors(7, [0, 1, 2, 1], 6)),
    "mse": (CosineMSELoss, {"max_label": 5.0}, pair_labels_and_vectors(1, [0, 5, 2, 3], 3)),
    "contrastive": (
        ThresholdContrastiveLoss,
        {"epsilon": -1.0, "positive_above": 2.5},
        pair_labels_and_vectors(2, [4, 1, 3, 0], 3),
    ),
    "mnrl": (
        MultipleNegativesRankingLoss,
        {"scale": 10.0, "group_size": 3, "directions": ("query_to_doc", "doc_to_query"), "global_batch": False},
        (np.zeros(12, np.float32), np.random.default_rng(7).normal(size=(12, 5)).astype(np.float32)),
    ),
    "cosent-ibn": (
        CoSENTIBNLoss,
        dict(
            cosine_w=0.3,
            ibn_w=2.0,
            angle_w=0.7,
            cosine_scale=15.0,
            ibn_scale=25.0,
            angle_scale=10.0,
            positive_above=2.5,
            directions=("query_to_doc", "doc_to_query"),
            global_batch=False,
        ),
        pair_labels_and_vectors(7, [4.5, 1.0, 3.0, 0.5, 2.0], 8),
    ),
    "matryoshka": (
        MatryoshkaLoss,
        {"loss": CoSENTLoss(7.5, global_batch=False), "dims": [8, 3], "weights": [1.0, 0.5]},
        pair_labels_and_vectors(10, [4.5, 0.5, 3.0, 1.0, 2.0, 0.0, 5.0], 10),
    ),
    "interaction": (
        InteractionCoSENTLoss,
        {"global_batch": False},
        (np.array([0, 1, 2, 1, 0, 2.0], np.float32), np.random.default_rng(8).normal(size=(6, 1)).astype(np.float32)),
    ),
    "sbert": (
        SentenceBertSoftmaxLoss,
        {},
        (
            np.repeat([0, 2, 1, 2.0], 2).astype(np.float32),
            # log-probabilities, as the head gives them
            np.log(np.random.default_rng(4).dirichlet(np.ones(3), size=4)).astype(np.float32),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_keras_contract_of_each_loss(name):
    cls, options, (y_true, y_pred) = LOSSES[name]
    run_keras_object_test(cls, options, y_pred, y_true=y_true)


def test_keras_contract_of_the_head():
    vectors = np.random.default_rng(3).normal(size=(8, 4)).astype(np.float32)
    run_keras_object_test(SentenceBertHead, {"num_classes": 3, "name": "h"}, vectors)
