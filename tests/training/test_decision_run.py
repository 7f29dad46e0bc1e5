"""A trained model ships its match decision: fitted on the task's valid scores, measured on test,
loaded by the matchers; and an older folder's threshold still decides.

The runs' bodies are written over the process's Keras (tests/keras3/test_decision_run.py runs them on
Keras 3): each reads the run's decision.json and scores pairs with the sentence encoder of either
Keras. The matchers that decide with it are the Keras 2 engine's API, so their tests are Keras 2's."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from cosent_tf.calibration import (
    DECISION_FILE,
    best_f1_threshold,
    best_threshold,
    decision_metrics,
    expected_calibration_error,
    format_threshold,
    read_decision,
)
from cosent_tf.data.benchmarks import load_task
from cosent_tf.errors import ConfigError
from cosent_tf.models.spec import SPEC_FILE
from cosent_tf.training.engine import train
from tests.either_keras import sentence_encoder
from tests.helpers import make_model_dir, make_tiny_setup, write_config, write_tiny_data
from tests.training.run_helpers import tiny_config

KERAS2_MATCHERS = (
    "the matchers (SentenceEncoder and PairScorer: decision, predict, predict_proba, decide, predict_label, "
    "calibrate) are the Keras 2 engine's API; a folder Keras 3 wrote is scored by them in a Keras 2 process"
)


def _splits(root, task):
    folder = root / "senteval_cn"
    return load_task(folder, task, "valid"), load_task(folder, task, "test")


def _finished_run(tmp_path_factory, name, task, counts=(48, 24, 24)):
    """A one-epoch ``task`` run on tiny data of ``counts`` train, valid and test pairs, pooled by the
    tokens' mean (a random model pooled by [CLS] gives every pair a cosine within 1e-5 of 1 on Keras 3's
    backbone, where which cut is best is float32 rounding): its folder, what train returned and the
    task's valid and test splits."""
    setup, _ = make_tiny_setup(tmp_path_factory.mktemp(name))
    write_tiny_data(setup / "data", counts=counts)
    metrics = train(tiny_config(setup, name, task=task, pooling="last-avg"))
    valid, test = _splits(setup / "data", task)
    return SimpleNamespace(run=setup / name, data=setup / "data", metrics=metrics, valid=valid, test=test)


@pytest.fixture(scope="module")
def binary_run(tmp_path_factory):
    """A BQ run whose valid split has 60 pairs: enough for a calibration map."""
    return _finished_run(tmp_path_factory, "binary", "BQ", counts=(48, 60, 48))


@pytest.fixture(scope="module")
def graded_run(tmp_path_factory):
    """An STS-B run: graded labels, so an expected-label map and no match decision."""
    return _finished_run(tmp_path_factory, "graded", "STS-B")


def test_a_binary_run_ships_thresholds_fitted_on_valid_and_reports_them_on_test(binary_run):
    model_dir, valid, test = binary_run.run / "model", binary_run.valid, binary_run.test
    encoder = sentence_encoder(model_dir)
    valid_scores = encoder.similarity(valid.texts_a, valid.texts_b)
    decision = read_decision(model_dir)  # refuses a decision of other weights
    assert decision is not None
    assert decision.fitted_on["file"] == str(binary_run.data / "senteval_cn" / "BQ" / "BQ.valid.data")
    assert decision.thresholds["accuracy"] == pytest.approx(best_threshold(valid_scores, valid.labels)[0], abs=1e-6)
    assert decision.thresholds["f1"] == pytest.approx(best_f1_threshold(valid_scores, valid.labels)[0], abs=1e-6)
    assert "threshold" not in json.loads((model_dir / SPEC_FILE).read_text())  # one home: decision.json
    expected = decision_metrics(encoder.similarity(test.texts_a, test.texts_b), test.labels, decision)
    assert binary_run.metrics["test"]["threshold"] == decision.thresholds["accuracy"]
    for key in (
        "accuracy",
        "f1",
        "accuracy_oracle",
        "f1_oracle",
        "ece_uncalibrated",
        "ece",
        "majority_accuracy",
        "match_share",
    ):
        assert binary_run.metrics["test"][key] == pytest.approx(expected[key], abs=1e-6), key


def test_a_run_with_too_few_valid_pairs_ships_thresholds_and_says_why_it_has_no_calibration_map(bq_run):
    """The zoo's BQ run: valid has 24 pairs, too few for a calibration map."""
    metrics = json.loads((bq_run.run / "metrics.json").read_text())
    decision = read_decision(bq_run.run / "model")
    assert decision is not None and set(decision.thresholds) == {"accuracy", "f1"}
    assert decision.calibration is None and "needs at least 50 pairs" in decision.note
    assert metrics["test"]["threshold"] == decision.thresholds["accuracy"]
    assert "ece" not in metrics["test"] and "ece_uncalibrated" in metrics["test"]
    assert not (bq_run.run / "reliability.png").exists()
    with pytest.raises(ConfigError, match="needs at least 50 pairs"):
        decision.probability([0.5])


@pytest.mark.keras2_only(reason=KERAS2_MATCHERS)
def test_the_matcher_of_a_run_without_a_calibration_map_carries_its_decision_and_says_why(bq_run):
    from cosent_tf import SentenceEncoder

    model_dir = bq_run.run / "model"
    encoder = SentenceEncoder.load(str(model_dir))
    assert encoder.decision == read_decision(model_dir) and encoder.threshold == encoder.decision.thresholds["accuracy"]
    with pytest.raises(ConfigError, match="needs at least 50 pairs"):
        encoder.predict_proba(["你好"], ["您好"])


def _test_warnings(bq_run):
    """The warning lines the zoo's BQ run's decision should draw on its test pairs, worked out from
    the scores it saved and the thresholds it shipped: (where they start, each line's start)."""
    with np.load(bq_run.run / "test_scores.npz") as saved:
        scores, labels = np.float64(saved["BQ.scores"]), saved["BQ.labels"]
    decision = read_decision(bq_run.run / "model")
    where = f"BQ test ({bq_run.setup / 'data' / 'senteval_cn' / 'BQ' / 'BQ.test.data'})"
    pairs, matches = len(labels), int(np.sum(labels > 0.5))
    expected = []
    threshold = decision.thresholds["accuracy"]
    right = sum((score > threshold) == (label > 0.5) for score, label in zip(scores, labels))
    if right <= max(matches, pairs - matches):
        expected.append(
            f"{where}: accuracy {right / pairs:.4f} at the accuracy threshold {format_threshold(threshold)} is not "
            "above"
        )
    for rule, named in (("accuracy", "the accuracy threshold"), ("f1", "the f1 threshold")):
        called = sum(score > decision.thresholds[rule] for score in scores)
        if max(called, pairs - called) >= 0.99 * pairs:
            side = "match" if called > pairs / 2 else "no match"
            expected.append(
                f"{where}: {named} {format_threshold(decision.thresholds[rule])} decides "
                f"{max(called, pairs - called)} of the "
                f'{pairs} pairs "{side}"'
            )
    return where, expected


def test_a_run_warns_of_a_test_decision_no_better_than_the_majority_or_deciding_every_pair_alike(bq_run):
    """Each warning the scores call for, and no other."""
    where, expected = _test_warnings(bq_run)
    warned = [line for line in bq_run.stderr.splitlines() if line.startswith(f"{where}: ")]
    assert len(warned) == len(expected) and all(line.startswith(start) for line, start in zip(warned, expected))


@pytest.mark.keras2_only(
    reason="the zoo's BQ run is a random model pooled by [CLS]: on Keras 3's backbone its thresholds draw no "
    "warning on test, on Keras 2's its f1 threshold says match to every test pair"
)
def test_a_tiny_run_from_random_weights_warns_that_its_f1_threshold_says_match_to_every_test_pair(bq_run):
    """What makes the test above tell a missing warning from a right silence."""
    where, expected = _test_warnings(bq_run)
    said = [line for line in expected if line.startswith(f"{where}: the f1 threshold") and line.endswith('"match"')]
    assert said and any(line.startswith(said[0]) for line in bq_run.stderr.splitlines())


def test_a_run_with_enough_valid_pairs_ships_a_calibration_map(binary_run):
    model_dir, metrics, test = binary_run.run / "model", binary_run.metrics, binary_run.test
    decision = read_decision(model_dir)
    assert decision is not None and decision.calibration is not None
    assert decision.calibration.method == min(decision.held_out_log_loss, key=decision.held_out_log_loss.get)
    scores = sentence_encoder(model_dir).similarity(test.texts_a, test.texts_b)
    probabilities = decision.probability(scores)
    assert metrics["test"]["ece"] == pytest.approx(expected_calibration_error(probabilities, test.labels), abs=1e-6)
    assert metrics["test"]["calibration"] == decision.calibration.method
    assert (binary_run.run / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.keras2_only(reason=KERAS2_MATCHERS)
def test_the_matcher_of_a_calibrated_run_gives_its_probabilities_and_decides_by_any_rule(binary_run):
    from cosent_tf import SentenceEncoder

    test = binary_run.test
    encoder = SentenceEncoder.load(str(binary_run.run / "model"))
    decision = encoder.decision
    assert decision == read_decision(binary_run.run / "model")
    scores = encoder.similarity(test.texts_a, test.texts_b)
    probabilities = encoder.predict_proba(test.texts_a, test.texts_b)
    np.testing.assert_allclose(probabilities, decision.probability(scores), atol=1e-12)
    decided = encoder.decide(test.texts_a, test.texts_b, rule="f1")
    assert decided.threshold == decision.thresholds["f1"] and decided.rule == "f1"
    np.testing.assert_array_equal(decided.matches, np.float64(scores) > decision.thresholds["f1"])
    np.testing.assert_allclose(decided.probabilities, probabilities, atol=1e-12)


def test_a_graded_run_ships_the_expected_label_map_and_no_match_decision(graded_run):
    decision, test = read_decision(graded_run.run / "model"), graded_run.test
    assert decision is not None and not decision.binary
    scores = sentence_encoder(graded_run.run / "model").similarity(test.texts_a, test.texts_b)
    labels = decision.expected_labels(scores)
    assert labels.min() >= test.labels.min() - 1e-12 and labels.max() <= 5
    order = np.argsort(scores)
    assert np.all(np.diff(labels[order]) >= -1e-12)  # monotone in the score
    mae = np.mean(np.abs(labels - test.labels))
    assert graded_run.metrics["test"]["expected_label_mae"] == pytest.approx(mae, abs=1e-6)
    with pytest.raises(ConfigError, match="--cut"):
        decision.threshold()
    with pytest.raises(ConfigError, match="--cut"):
        decision.probability(scores)


@pytest.mark.keras2_only(reason=KERAS2_MATCHERS)
def test_the_matcher_of_a_graded_run_gives_expected_labels_and_refuses_to_decide(graded_run):
    from cosent_tf import SentenceEncoder

    test = graded_run.test
    encoder = SentenceEncoder.load(str(graded_run.run / "model"))
    scores = encoder.similarity(test.texts_a, test.texts_b)
    np.testing.assert_allclose(
        encoder.predict_label(test.texts_a, test.texts_b), encoder.decision.expected_labels(scores), atol=1e-12
    )
    assert encoder.threshold is None
    with pytest.raises(ConfigError, match="--cut"):
        encoder.decide(test.texts_a, test.texts_b)
    with pytest.raises(ConfigError, match="--cut"):
        encoder.predict_proba(test.texts_a, test.texts_b)


@pytest.mark.keras2_only(reason=KERAS2_MATCHERS + "; the folder is one cosent-tf < 0.6 wrote, a Keras 2 one")
def test_a_folder_from_before_decisions_decides_by_its_threshold(tmp_path):
    from cosent_tf import SentenceEncoder

    config = write_config(tmp_path / "config.json")
    folder = tmp_path / "old"
    make_model_dir(folder, config, pooling="last-avg", maxlen=16, threshold=0.5)  # as cosent-tf < 0.6 wrote it
    assert json.loads((folder / SPEC_FILE).read_text())["threshold"] == 0.5
    encoder = SentenceEncoder.load(str(folder))
    assert encoder.threshold == 0.5 and encoder.decision.calibration is None
    scores = encoder.similarity(["你好", "天气"], ["您好", "吃饭"])
    np.testing.assert_array_equal(encoder.predict(["你好", "天气"], ["您好", "吃饭"]), (scores > 0.5).astype(int))
    with pytest.raises(ConfigError, match="cosent-tf calibrate"):
        encoder.predict_proba(["你好"], ["您好"])
    with pytest.raises(ConfigError, match="no f1 threshold"):
        encoder.decide(["你好"], ["您好"], rule="f1")


@pytest.mark.keras2_only(reason=KERAS2_MATCHERS)
def test_calibrate_fits_on_the_matchers_scores_and_saves_into_its_folder(tmp_path):
    from cosent_tf import PairScorer

    config = write_config(tmp_path / "config.json")
    folder = tmp_path / "scorer"
    make_model_dir(folder, config, kind="interaction", maxlen=32)
    scorer = PairScorer.load(str(folder))
    with pytest.raises(ConfigError, match="no match decision"):
        scorer.decide(["你好"], ["您好"])
    rng = np.random.default_rng(0)
    characters = list("天地人你我他山水火木金土日月星")
    texts_a = ["".join(rng.choice(characters, 6)) for _ in range(80)]
    texts_b = ["".join(rng.choice(characters, 6)) for _ in range(80)]
    labels = (np.arange(80) % 3 == 0).astype(int)
    decision = scorer.calibrate(texts_a, texts_b, labels, "my-pairs.tsv", save=True)
    scores = scorer.similarity(texts_a, texts_b)
    assert decision.thresholds["accuracy"] == pytest.approx(best_threshold(scores, labels)[0], abs=1e-9)
    assert decision.score == "head" and decision.fitted_on["file"] == "my-pairs.tsv"
    assert read_decision(folder) == scorer.decision == decision
    reloaded = PairScorer.load(str(folder))
    np.testing.assert_allclose(
        reloaded.predict_proba(texts_a, texts_b), decision.probability(scores), rtol=0, atol=1e-6
    )
    assert (folder / DECISION_FILE).exists()


@pytest.mark.keras2_only(reason=KERAS2_MATCHERS)
def test_a_matcher_without_a_folder_cannot_save_its_decision(tmp_path):
    from cosent_tf import SentenceEncoder

    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "m", config, pooling="last-avg", maxlen=16)
    loaded = SentenceEncoder.load(str(tmp_path / "m"))
    in_memory = SentenceEncoder(loaded.model, loaded.tokenizer)
    with pytest.raises(ConfigError, match="not loaded from a folder"):
        in_memory.calibrate(["你好"] * 60, ["您好"] * 60, [0, 1] * 30, "x", save=True)
