"""What several of the training tests share: the files a finished run holds, its validation rows,
a tiny run's configuration."""

import csv

from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import train

RUN_FILES = [
    ".cosent-run",
    ".lock",
    "best.weights.h5",
    "config.json",
    "metrics.json",
    "model",
    "test_scores.npz",
    "valid_curve.png",
    "valid_metrics.csv",
]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def tiny_run_config(tmp_path, task):
    """A run of ``task`` on tiny_setup's data, config and vocabulary, into tmp_path/run."""
    return RunConfig(
        task=task,
        data_dir=str(tmp_path / "data"),
        config=str(tmp_path / "config.json"),
        vocab=str(tmp_path / "vocab.txt"),
        output_dir=str(tmp_path / "run"),
    )


def tiny_config(tmp_path, name="run", **settings):
    """A one-epoch run on tiny_setup's data, config and vocabulary into tmp_path/name."""
    base = dict(
        data_dir=str(tmp_path / "data"),
        config=str(tmp_path / "config.json"),
        vocab=str(tmp_path / "vocab.txt"),
        batch_size=8,
        epochs=1,
        lr=1e-3,
        output_dir=str(tmp_path / name),
    )
    return RunConfig(**{**base, **settings})


def tiny_run(tiny_setup, name, **settings):
    return train(tiny_config(tiny_setup[0], name, **settings))
