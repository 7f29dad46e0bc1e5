"""A trained model ships its match decision: fitted on the task's valid scores, measured on test,
loaded by the matchers; and an older folder's threshold still decides."""

import json

import numpy as np
import pytest

from cosent_tf import ConfigError, PairScorer, SentenceEncoder
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
from cosent_tf.models.spec import SPEC_FILE
from cosent_tf.training.engine import train
from tests.helpers import make_model_dir, write_config, write_tiny_data
from tests.training.run_helpers import tiny_config


def _splits(root, task):
    folder = root / "senteval_cn"
    return load_task(folder, task, "valid"), load_task(folder, task, "test")


def test_a_binary_run_ships_thresholds_fitted_on_valid_and_reports_them_on_test(bq_run):
    """Valid has 24 pairs here: too few for a calibration map, so the decision carries the
    thresholds and says why it has no map."""
    metrics = json.loads((bq_run.run / "metrics.json").read_text())  # the zoo's finished BQ run
    model_dir = bq_run.run / "model"
    encoder = SentenceEncoder.load(str(model_dir))
    valid, test = _splits(bq_run.setup / "data", "BQ")
    valid_scores = encoder.similarity(valid.texts_a, valid.texts_b)
    decision = read_decision(model_dir)
    assert decision is not None and encoder.decision == decision
    assert decision.thresholds["accuracy"] == pytest.approx(best_threshold(valid_scores, valid.labels)[0], abs=1e-6)
    assert decision.thresholds["f1"] == pytest.approx(best_f1_threshold(valid_scores, valid.labels)[0], abs=1e-6)
    assert decision.calibration is None and "needs at least 50 pairs" in decision.note
    assert "threshold" not in json.loads((model_dir / SPEC_FILE).read_text())  # one home: decision.json
    expected = decision_metrics(encoder.similarity(test.texts_a, test.texts_b), test.labels, decision)
    for key in (
        "accuracy",
        "f1",
        "accuracy_oracle",
        "f1_oracle",
        "ece_uncalibrated",
        "majority_accuracy",
        "match_share",
    ):
        assert metrics["test"][key] == pytest.approx(expected[key], abs=1e-6), key
    assert "ece" not in metrics["test"]
    assert not (bq_run.run / "reliability.png").exists()
    with pytest.raises(ConfigError, match="needs at least 50 pairs"):
        encoder.predict_proba(["你好"], ["您好"])


def test_a_run_warns_of_a_test_decision_no_better_than_the_majority_or_deciding_every_pair_alike(bq_run):
    """The zoo's tiny run from random weights: its f1 threshold says "match" to every test pair."""
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
    assert any('"match"' in line for line in expected)  # the f1 threshold's, at least
    warned = [line for line in bq_run.stderr.splitlines() if line.startswith(f"{where}: ")]
    assert len(warned) == len(expected) and all(line.startswith(start) for line, start in zip(warned, expected))


def test_a_run_with_enough_valid_pairs_ships_a_calibration_map(tmp_path, tiny_setup):
    setup_path, _ = tiny_setup
    write_tiny_data(setup_path / "more", counts=(48, 120, 120))
    metrics = train(tiny_config(setup_path, "calibrated", task="BQ", data_dir=str(setup_path / "more")))
    encoder = SentenceEncoder.load(str(setup_path / "calibrated" / "model"))
    decision = encoder.decision
    assert decision is not None and decision.calibration is not None
    assert decision.calibration.method == min(decision.held_out_log_loss, key=decision.held_out_log_loss.get)
    _, test = _splits(setup_path / "more", "BQ")
    scores = encoder.similarity(test.texts_a, test.texts_b)
    probabilities = encoder.predict_proba(test.texts_a, test.texts_b)
    np.testing.assert_allclose(probabilities, decision.probability(scores), atol=1e-12)
    assert metrics["test"]["ece"] == pytest.approx(expected_calibration_error(probabilities, test.labels), abs=1e-6)
    assert metrics["test"]["calibration"] == decision.calibration.method
    decided = encoder.decide(test.texts_a, test.texts_b, rule="f1")
    assert decided.threshold == decision.thresholds["f1"] and decided.rule == "f1"
    np.testing.assert_array_equal(decided.matches, np.float64(scores) > decision.thresholds["f1"])
    np.testing.assert_allclose(decided.probabilities, probabilities, atol=1e-12)
    assert (setup_path / "calibrated" / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_graded_run_ships_the_expected_label_map_and_no_match_decision(tiny_setup):
    tmp_path, _ = tiny_setup
    metrics = train(tiny_config(tmp_path, "sts", task="STS-B"))
    encoder = SentenceEncoder.load(str(tmp_path / "sts" / "model"))
    _, test = _splits(tmp_path / "data", "STS-B")
    labels = encoder.predict_label(test.texts_a, test.texts_b)
    assert labels.min() >= test.labels.min() - 1e-12 and labels.max() <= 5
    scores = encoder.similarity(test.texts_a, test.texts_b)
    order = np.argsort(scores)
    assert np.all(np.diff(labels[order]) >= -1e-12)  # monotone in the score
    assert metrics["test"]["expected_label_mae"] == pytest.approx(np.mean(np.abs(labels - test.labels)), abs=1e-6)
    assert encoder.threshold is None
    with pytest.raises(ConfigError, match="--cut"):
        encoder.decide(test.texts_a, test.texts_b)
    with pytest.raises(ConfigError, match="--cut"):
        encoder.predict_proba(test.texts_a, test.texts_b)


def test_a_folder_from_before_decisions_decides_by_its_threshold(tmp_path):
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


def test_calibrate_fits_on_the_matchers_scores_and_saves_into_its_folder(tmp_path):
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


def test_a_matcher_without_a_folder_cannot_save_its_decision(tmp_path):
    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "m", config, pooling="last-avg", maxlen=16)
    loaded = SentenceEncoder.load(str(tmp_path / "m"))
    in_memory = SentenceEncoder(loaded.model, loaded.tokenizer)
    with pytest.raises(ConfigError, match="not loaded from a folder"):
        in_memory.calibrate(["你好"] * 60, ["您好"] * 60, [0, 1] * 30, "x", save=True)
