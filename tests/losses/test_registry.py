import numpy as np
import pytest

from cosent_tf import ConfigError
from cosent_tf.backend import keras
from cosent_tf.losses import LOSSES, CoSENTLoss, CosineMSELoss, ThresholdContrastiveLoss, get_loss, loss_names

OPTIONS = dict(scale=7.0, epsilon=0.3, max_label=5.0, positive_above=2.5)


def test_each_entry_builds_a_keras_loss_for_its_kind():
    assert loss_names("feature") == ("cosent", "sbert", "mse", "contrastive")
    assert loss_names("interaction") == ("ce", "cosent")
    for (kind, name), entry in LOSSES.items():
        assert (entry.kind, entry.name) == (kind, name)
        assert isinstance(entry.build(**OPTIONS), keras.losses.Loss)
        assert (entry.interaction_head is not None) == (kind == "interaction")
        assert entry.training_head is None or kind == "feature"


def test_options_reach_the_losses_that_take_them():
    assert get_loss("feature", "cosent").build(**OPTIONS).scale == 7.0
    assert get_loss("feature", "mse").build(**OPTIONS).max_label == 5.0
    contrastive = get_loss("feature", "contrastive").build(**OPTIONS)
    assert isinstance(contrastive, ThresholdContrastiveLoss)
    assert (contrastive.epsilon, contrastive.positive_above) == (0.3, 2.5)
    assert isinstance(get_loss("feature", "cosent").build(**OPTIONS), CoSENTLoss)
    assert isinstance(get_loss("feature", "mse").build(**OPTIONS), CosineMSELoss)
    # the ranking losses gather the global batch unless told not to
    for kind in ("feature", "interaction"):
        assert get_loss(kind, "cosent").build(**OPTIONS).global_batch is True
        assert get_loss(kind, "cosent").build(**OPTIONS, global_batch=False).global_batch is False


def test_the_sentence_bert_head_takes_the_number_of_classes():
    head = get_loss("feature", "sbert").training_head(3)
    assert head(np.zeros((4, 8), np.float32)).shape == (2, 3)


def test_unknown_names_list_the_choices():
    with pytest.raises(ConfigError, match="unknown interaction loss 'mse'; choose one of ce, cosent"):
        get_loss("interaction", "mse")
    with pytest.raises(ConfigError, match="unknown model kind 'siamese'"):
        get_loss("siamese", "cosent")
