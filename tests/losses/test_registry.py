import numpy as np
import pytest

from cosent_tf import ConfigError
from cosent_tf.losses import (
    LOSSES,
    AnglELoss,
    CoSENTIBNLoss,
    CoSENTLoss,
    CosineMSELoss,
    MultipleNegativesRankingLoss,
    ThresholdContrastiveLoss,
    get_loss,
    loss_names,
)
from cosent_tf.process_keras import keras

OPTIONS = dict(scale=7.0, epsilon=0.3, max_label=5.0, positive_above=2.5)


def test_each_entry_builds_a_keras_loss_for_its_kind():
    assert loss_names("feature") == ("cosent", "sbert", "mse", "contrastive", "mnrl", "angle", "cosent-ibn")
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


def test_the_retrieval_losses_take_their_options():
    mnrl = get_loss("feature", "mnrl").build(**OPTIONS, group_size=4, symmetric=True, global_batch=False)
    assert isinstance(mnrl, MultipleNegativesRankingLoss)
    assert (mnrl.scale, mnrl.group_size, mnrl.directions, mnrl.global_batch) == (
        7.0,
        4,
        ("query_to_doc", "doc_to_query"),
        False,
    )
    assert get_loss("feature", "mnrl").build(**OPTIONS).directions == ("query_to_doc",)
    angle = get_loss("feature", "angle").build(**OPTIONS)
    assert isinstance(angle, AnglELoss) and angle.scale == 7.0
    mix = get_loss("feature", "cosent-ibn").build(**OPTIONS, weights=(1.0, 2.0, 3.0))
    assert isinstance(mix, CoSENTIBNLoss)
    assert (mix.cosine_w, mix.ibn_w, mix.angle_w) == (1.0, 2.0, 3.0)
    assert (mix.cosine_scale, mix.ibn_scale, mix.angle_scale, mix.positive_above) == (7.0, 7.0, 7.0, 2.5)
    default = get_loss("feature", "cosent-ibn").build(**OPTIONS)
    assert (default.cosine_w, default.ibn_w, default.angle_w) == get_loss("feature", "cosent-ibn").mix_weights


def test_an_interaction_model_asking_for_a_vector_loss_is_told_why_not():
    for name in ("mnrl", "angle", "cosent-ibn"):
        with pytest.raises(
            ConfigError, match=f"--loss {name} trains feature models .sentence encoders. only: .*--kind feature"
        ):
            get_loss("interaction", name)


def test_a_batch_of_one_example_gives_in_batch_negatives_nothing():
    with pytest.raises(
        ConfigError,
        match="the mnrl loss takes the other examples of a batch as each anchor's negatives, so a batch of fewer "
        "than 2 examples",
    ):
        get_loss("feature", "mnrl").check_batch(1)
    with pytest.raises(ConfigError, match="gives each of the 2 replicas 1 example, and the mnrl loss"):
        get_loss("feature", "mnrl").check_batch(2, replicas=2, global_batch=False)
    get_loss("feature", "mnrl").check_batch(2, replicas=2, global_batch=True)


def test_the_sentence_bert_head_takes_the_number_of_classes():
    head = get_loss("feature", "sbert").training_head(3)
    assert head(np.zeros((4, 8), np.float32)).shape == (2, 3)


def test_unknown_names_list_the_choices():
    with pytest.raises(ConfigError, match="unknown interaction loss 'mse'; choose one of ce, cosent"):
        get_loss("interaction", "mse")
    with pytest.raises(ConfigError, match="unknown model kind 'siamese'"):
        get_loss("siamese", "cosent")


def test_each_loss_picks_its_best_epoch_by_what_it_trains_for_and_says_so():
    from cosent_tf.choices import BEST_METRICS

    defaults = {(kind, name): entry.chosen_best_metric() for (kind, name), entry in LOSSES.items()}
    assert {key: metric for key, (metric, _) in defaults.items()} == {
        ("feature", "cosent"): "spearman",
        ("feature", "sbert"): "spearman",
        ("feature", "mse"): "spearman",
        ("feature", "contrastive"): "spearman",
        ("feature", "mnrl"): "mrr@10",  # trains a search: each anchor picks its positive among the batch's texts
        ("feature", "angle"): "spearman",
        ("feature", "cosent-ibn"): "mrr@10",  # its default weights are mostly its in-batch negatives'
        ("interaction", "ce"): "spearman",
        ("interaction", "cosent"): "spearman",
    }
    assert all(entry.best_metric in BEST_METRICS for entry in LOSSES.values())
    assert defaults["feature", "mnrl"][1] == (
        "the best epoch is the one of the highest valid mrr@10 (the mnrl loss's default; --best-metric chooses another)"
    )
    mnrl, cosent = get_loss("feature", "mnrl"), get_loss("feature", "cosent")
    assert mnrl.chosen_best_metric("spearman") == (
        "spearman",
        "the best epoch is the one of the highest valid spearman (--best-metric)",
    )
    assert cosent.chosen_best_metric("ndcg@10")[0] == "ndcg@10"
    # no retrieval figure for the run: Spearman, and why
    assert mnrl.chosen_best_metric(None, "the valid pairs of BQ hold no positive pair to search for") == (
        "spearman",
        "the best epoch is the one of the highest valid spearman: mrr@10 (the mnrl loss's default; --best-metric "
        "chooses another) is a retrieval figure over the valid pairs, and the valid pairs of BQ hold no positive "
        "pair to search for",
    )
    assert mnrl.chosen_best_metric("pearson", "no vectors")[0] == "pearson"  # a pair figure needs no search
