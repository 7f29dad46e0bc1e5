"""Training learns: the model improves, seeds repeat, the threshold is tuned on valid."""

import json
import os

import numpy as np
import pytest

from cosent_tf.experiments.scripts import train_main
from cosent_tf.optimizers import build_optimizer
from cosent_tf.training import engine as training
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import train
from cosent_tf.training.run_data import load_run_data
from tests.either_keras import cosines, sentence_encoder, shipped_threshold
from tests.helpers import CHARACTERS, tiny_pairs, write_config, write_tiny_data
from tests.training.run_helpers import read_csv, tiny_run

SYNONYMS = dict(zip(CHARACTERS[:15], CHARACTERS[15:30])) | dict(zip(CHARACTERS[15:30], CHARACTERS[:15]))


def synonym_pairs(rng, count, graded):
    """Pairs whose label is how many of 5 positions hold a character's synonym: no characters
    are shared, so an untrained encoder cannot tell them apart and a trained one can."""
    characters, rows = list(CHARACTERS[:30]), []
    for _ in range(count):
        first = "".join(rng.choice(characters, 5))
        same = set(rng.choice(5, int(rng.integers(0, 6)), replace=False).tolist())
        second = "".join(
            SYNONYMS[c] if i in same else rng.choice([o for o in characters if o not in (c, SYNONYMS[c])])
            for i, c in enumerate(first)
        )
        rows.append((first, second, len(same) if graded else int(len(same) >= 3)))
    return rows


def write_task(root, task, rows_of_split):
    os.makedirs(root / "senteval_cn" / task, exist_ok=True)
    for split, rows in rows_of_split.items():
        lines = "".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows)
        (root / "senteval_cn" / task / f"{task}.{split}.data").write_text(lines, encoding="utf-8")


@pytest.mark.heavy
@pytest.mark.parametrize("kind, task", [("feature", "STS-B"), ("interaction", "BQ")])
def test_training_learns_what_the_untrained_model_cannot(kind, task, tiny_setup):
    """A correct loss and wiring lift valid Spearman well above the same run left at
    initialisation (lr 1e-12); a loss of the wrong sign, or labels paired with the wrong
    pairs, cannot."""
    tmp_path, _ = tiny_setup
    rng = np.random.default_rng(0)
    if kind == "feature":  # no shared characters: only training finds the synonyms
        rows = {
            split: synonym_pairs(rng, n, task == "STS-B")
            for split, n in (("train", 512), ("valid", 128), ("test", 128))
        }
    else:  # a cross-encoder learns to count the characters the two texts share
        rows = {
            split: tiny_pairs(rng, n, scores=False) for split, n in (("train", 1024), ("valid", 128), ("test", 128))
        }
    write_task(tmp_path / "learn", task, rows)
    vocab_size = len((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
    config = write_config(
        tmp_path / "c64.json", vocab_size=vocab_size, hidden=64, layers=2, heads=2, intermediate=128, max_position=256
    )
    settings = dict(
        task=task,
        kind=kind,
        data_dir=str(tmp_path / "learn"),
        config=config,
        vocab=str(tmp_path / "vocab.txt"),
        batch_size=16,
        epochs=6,
    )
    # At lr 1e-12 no step moves a weight: one step of one epoch is the run left at initialisation.
    at_start = dict(settings, epochs=1, steps_per_epoch=1)
    untrained = train(RunConfig(lr=1e-12, output_dir=str(tmp_path / "untrained"), **at_start))
    trained = train(RunConfig(lr=1e-3, output_dir=str(tmp_path / "trained"), **settings))
    for split in ("valid", "test"):  # measured here: feature 0.60 over 0.03, interaction 0.60 over -0.04 (valid)
        assert trained[split]["spearman"] > untrained[split]["spearman"] + 0.3, (split, trained, untrained)


@pytest.mark.heavy
def test_same_seed_same_result_and_periodic_validation(tiny_setup):
    tmp_path, options = tiny_setup
    first = train_main(["BQ", "--epochs", "1", "--eval-every", "2", "--output-dir", str(tmp_path / "a")] + options)
    second = train_main(["BQ", "--epochs", "1", "--output-dir", str(tmp_path / "b")] + options)
    assert first["test"] == second["test"]
    rows = read_csv(tmp_path / "a" / "valid_metrics.csv")
    # 48 pairs / 8 = 6 steps: in-epoch validations at steps 2 and 4, then the epoch end at 6.
    assert [(r["step"], r["end_of_epoch"]) for r in rows] == [("2", "False"), ("4", "False"), ("6", "True")]


@pytest.mark.keras2_only(
    reason="the zoo's BQ run is a random model pooled by [CLS], whose valid cosines all lie within 1e-6 of 1 on "
    "Keras 3's backbone: which cut is best there is float32 rounding, not the split it was tuned on"
)
def test_the_threshold_is_tuned_on_valid_not_on_test(bq_run):
    from cosent_tf.data.benchmarks import load_task
    from cosent_tf.evaluation import best_threshold

    metrics = json.loads((bq_run.run / "metrics.json").read_text())  # the zoo's finished BQ run
    encoder = sentence_encoder(bq_run.run / "model")
    folder = bq_run.setup / "data" / "senteval_cn"
    valid, test = load_task(folder, "BQ", "valid"), load_task(folder, "BQ", "test")
    on_valid = best_threshold(cosines(encoder, valid.texts_a, valid.texts_b), valid.labels)[0]
    on_test = best_threshold(cosines(encoder, test.texts_a, test.texts_b), test.labels)[0]
    shipped = shipped_threshold(bq_run.run / "model")
    assert metrics["test"]["threshold"] == pytest.approx(on_valid, abs=1e-7) == shipped
    assert on_test != on_valid  # the two splits give different thresholds, so the test can tell them apart


@pytest.mark.heavy
def test_a_run_trains_first_on_the_first_batch_of_its_stream(tiny_setup):
    """The batch stream starts at the step fit starts from (read once training has begun), not
    at whatever the step counter says when tf.data's thread first pulls a batch."""
    from cosent_tf.process_keras import random_seed

    tiny_run(tiny_setup, "one-step", task="BQ", steps_per_epoch=1, pooling="last-avg")
    trained = sentence_encoder(tiny_setup[0] / "one-step" / "model").model.get_weights()
    cfg = RunConfig(**json.loads((tiny_setup[0] / "one-step" / "config.json").read_text()))
    data = load_run_data(cfg)
    with random_seed(cfg.seed):
        matcher = training.Matcher(cfg, data.task)
        model, loss, labels = matcher.training_model(data.train)
        model.compile(optimizer=build_optimizer(cfg.lr, 1), loss=loss)
    first_batch = matcher.dataset(matcher.prepare(data.train), labels, 0).take(1)
    model.fit(first_batch, epochs=1, verbose=0)
    for expected, actual in zip(matcher.model.get_weights(), trained):
        np.testing.assert_allclose(actual, expected, atol=1e-6)


@pytest.mark.slow
@pytest.mark.backends("tensorflow")  # XLA's CPU matrix products take no float16: Keras 3 on JAX refuses it there
def test_float16_training_with_loss_scaling_ends_near_float32(tiny_setup):
    tmp_path, _ = tiny_setup
    write_tiny_data(tmp_path / "more", counts=(400, 200, 200))  # enough test pairs for a steady Spearman
    settings = dict(task="BQ", data_dir=str(tmp_path / "more"), batch_size=16, epochs=3, pooling="last-avg")
    runs = {
        precision: tiny_run(tiny_setup, precision, precision=precision, **settings) for precision in ("float32", "fp16")
    }
    assert runs["fp16"]["test"]["spearman"] == pytest.approx(runs["float32"]["test"]["spearman"], abs=0.01)
    assert runs["float32"]["test"]["spearman"] > 0.5  # both learned
    config = json.loads((tmp_path / "fp16" / "config.json").read_text())
    assert config["precision"] == "fp16"
