import numpy as np
import pytest

from cosent_tf import SentenceBertHead, SentenceBertSoftmaxLoss
from cosent_tf.backend import keras


@pytest.mark.parametrize("classes", [2, 3])
def test_head_and_loss_match_numpy(classes):
    rng = np.random.default_rng(classes)
    vectors = rng.normal(size=(10, 4)).astype(np.float32)
    labels = np.repeat(rng.integers(0, classes, 5), 2).astype(np.float32)
    head = SentenceBertHead(classes)
    probs = head(vectors).numpy()
    kernel, bias = head.classifier.get_weights()
    u, v = vectors[::2], vectors[1::2]
    logits = np.concatenate([u, v, np.abs(u - v)], axis=1) @ kernel + bias
    expected_probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probs, expected_probs, rtol=1e-5)
    expected_loss = -np.mean(np.log(expected_probs[np.arange(5), labels[::2].astype(int)]))
    assert float(SentenceBertSoftmaxLoss()(labels, probs)) == pytest.approx(expected_loss, rel=1e-5)


def test_head_rejects_odd_batches_and_serialises():
    with pytest.raises(ValueError, match="even number of rows"):
        SentenceBertHead(2)(np.ones((3, 4), np.float32))
    head = SentenceBertHead.from_config(SentenceBertHead(3, name="h").get_config())
    assert head.num_classes == 3
    assert isinstance(
        keras.losses.deserialize(keras.losses.serialize(SentenceBertSoftmaxLoss())), SentenceBertSoftmaxLoss
    )
