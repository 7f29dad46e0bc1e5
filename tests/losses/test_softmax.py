import numpy as np
import pytest

from cosent_tf import SentenceBertHead, SentenceBertSoftmaxLoss
from tests.harness import run_keras_object_test


@pytest.mark.parametrize("classes", [2, 3])
def test_head_and_loss_match_numpy(classes):
    rng = np.random.default_rng(classes)
    vectors = rng.normal(size=(10, 4)).astype(np.float32)
    labels = np.repeat(rng.integers(0, classes, 5), 2).astype(np.float32)
    head = SentenceBertHead(classes)
    log_probs = head(vectors).numpy()
    kernel, bias = head.classifier.get_weights()
    u, v = vectors[::2], vectors[1::2]
    logits = np.concatenate([u, v, np.abs(u - v)], axis=1) @ kernel + bias
    expected_probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.exp(log_probs), expected_probs, rtol=1e-5)  # the head gives log-probabilities
    expected_loss = -np.mean(np.log(expected_probs[np.arange(5), labels[::2].astype(int)]))
    assert float(SentenceBertSoftmaxLoss()(labels, log_probs)) == pytest.approx(expected_loss, rel=1e-5)


def test_head_rejects_odd_batches():
    with pytest.raises(ValueError, match="even number of rows"):
        SentenceBertHead(2)(np.ones((3, 4), np.float32))


def test_keras_contract_of_the_head():
    vectors = np.random.default_rng(3).normal(size=(8, 4)).astype(np.float32)
    run_keras_object_test(SentenceBertHead, {"num_classes": 3, "name": "h"}, vectors)


def test_keras_contract_of_the_loss():
    log_probabilities = SentenceBertHead(3)(np.random.default_rng(4).normal(size=(8, 4)).astype(np.float32)).numpy()
    run_keras_object_test(SentenceBertSoftmaxLoss, {}, log_probabilities, y_true=np.repeat([0, 2, 1, 2.0], 2))
