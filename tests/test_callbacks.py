"""The training callbacks on the process's Keras: the Keras 3 suite runs the tests that do not
need TensorFlow's own data pipeline on each backend (tests/keras3/test_callbacks.py imports them)."""

import os

import numpy as np
import pytest

from cosent_tf.callbacks import ValidationCheckpoint, read_history
from cosent_tf.process_keras import keras


def test_validation_checkpoint_keeps_the_best_epoch(tmp_path):
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    scores = iter([0.1, 0.5, 0.3])
    snapshots = []

    def evaluate(m):
        snapshots.append(m.get_weights())
        return {"spearman": next(scores)}

    path = tmp_path / "best.weights.h5"
    callback = ValidationCheckpoint(evaluate, str(path))
    x = np.random.default_rng(0).normal(size=(16, 3))
    model.fit(x, x[:, :2] * 3, epochs=3, callbacks=[callback], verbose=0)
    assert callback.best_epoch == 2 and callback.best == 0.5
    for restored, best in zip(model.get_weights(), snapshots[1]):
        np.testing.assert_array_equal(restored, best)
    fresh = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    fresh.load_weights(str(path))
    for loaded, best in zip(fresh.get_weights(), snapshots[1]):
        np.testing.assert_array_equal(loaded, best)
    assert os.listdir(tmp_path) == ["best.weights.h5"]


def test_non_finite_loss_names_the_step_and_keeps_the_backup(tmp_path):
    import tensorflow as tf

    from cosent_tf import NonFiniteLossError
    from cosent_tf.callbacks import StopOnNonFiniteLoss

    def batches():  # four good batches, then NaN targets: the loss breaks at step 5 (epoch 2)
        for step in range(1, 100):
            x = np.ones((4, 2), np.float32)
            yield x, np.full((4, 1), np.nan if step >= 5 else 1.0, np.float32)

    dataset = tf.data.Dataset.from_generator(
        batches, output_signature=(tf.TensorSpec((None, 2), tf.float32), tf.TensorSpec((None, 1), tf.float32))
    )
    model = keras.Sequential([keras.layers.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), loss="mse")
    backup = tmp_path / "backup"
    epoch_ends = []
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epoch_ends.append(model.get_weights()))
    with pytest.raises(
        NonFiniteLossError,
        match=r"became nan at step 5 \(batch 2 of the epoch\); training stopped. the state: .*backup. lower --lr",
    ):
        model.fit(
            dataset,
            epochs=3,
            steps_per_epoch=3,
            verbose=0,
            callbacks=[
                keras.callbacks.BackupAndRestore(str(backup)),
                StopOnNonFiniteLoss([("the state", str(backup))], "lower --lr"),
                record,
            ],
        )
    assert len(epoch_ends) == 1  # stopped inside epoch 2
    # The backup still holds epoch 1's state: a fresh model restored from it has exactly those weights.
    restored = keras.Sequential([keras.layers.Input((2,)), keras.layers.Dense(1)])
    restored.compile(keras.optimizers.SGD(0.01), loss="mse")
    restored.fit(dataset.take(0), epochs=1, verbose=0, callbacks=[keras.callbacks.BackupAndRestore(str(backup))])
    for got, expected in zip(restored.get_weights(), epoch_ends[0]):
        np.testing.assert_array_equal(got, expected)


def test_every_evaluation_is_a_row_and_a_resumed_run_keeps_the_rows_up_to_its_step(tmp_path):
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    scores = iter([0.2, 0.4, 0.1, 0.3, 0.9, 0.8])
    csv_path = str(tmp_path / "valid_metrics.csv")
    callback = ValidationCheckpoint(lambda m: {"spearman": next(scores)}, every_steps=2, csv_path=csv_path)
    x = np.random.default_rng(0).normal(size=(16, 3))
    model.fit(x, x[:, :2], batch_size=4, epochs=2, callbacks=[callback], verbose=0)
    rows = read_history(csv_path)
    assert [(r["epoch"], r["step"], r["end_of_epoch"]) for r in rows] == [
        (1, 2, False),
        (1, 4, True),
        (2, 6, False),
        (2, 8, True),
    ]
    assert [r["spearman"] for r in rows] == [0.2, 0.4, 0.1, 0.3]
    assert (callback.best, callback.best_epoch) == (0.4, 1)
    # A run resumed at step 4 (end of epoch 1) keeps the rows up to there and its best.
    resumed = ValidationCheckpoint(lambda m: {"spearman": next(scores)}, csv_path=csv_path)
    model.optimizer.iterations.assign(4)
    resumed.set_model(model)
    resumed.on_train_begin()
    resumed.on_epoch_begin(1)
    assert [r["step"] for r in resumed.history] == [2, 4] and (resumed.best, resumed.best_epoch) == (0.4, 1)


def test_validation_checkpoint_chooses_no_epoch_while_every_score_is_nan(tmp_path, caplog):
    import logging

    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    scores = iter([np.nan, np.nan, 0.2])
    callback = ValidationCheckpoint(lambda m: {"spearman": next(scores)}, str(tmp_path / "best.weights.h5"))
    x = np.random.default_rng(0).normal(size=(16, 3))
    with caplog.at_level(logging.INFO, logger="cosent_tf.callbacks"):
        model.fit(x, x[:, :2], epochs=2, callbacks=[callback], verbose=0)
    assert callback.best_epoch is None and not (tmp_path / "best.weights.h5").exists()
    assert "epoch 2 valid: spearman nan  (no finite score yet)" in caplog.text
    model.fit(x, x[:, :2], epochs=1, callbacks=[callback], verbose=0)  # a finite score at last
    assert callback.best_epoch == 1 and callback.best == 0.2


def test_a_log_file_gets_a_progress_line_within_the_epoch_with_its_eta(monkeypatch):
    import io
    import sys

    from cosent_tf.callbacks import ProgressLines, epoch_progress
    from cosent_tf.console import console_logging, live_progress_on

    log = io.StringIO()  # a log file: no terminal
    monkeypatch.setattr(sys, "stderr", log)
    callbacks, verbose = epoch_progress(live_progress_on(log))
    assert verbose == 2 and [type(c) for c in callbacks] == [ProgressLines]
    ticks = iter(range(0, 1000, 10))  # a clock 10 s later at each reading: each step takes 10 s
    progress = ProgressLines(every_seconds=25, clock=lambda: next(ticks))
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.0), loss="mse")  # lr 0: the same loss at every step
    x = np.ones((8, 3), np.float32)
    loss = float(model.evaluate(x, np.zeros((8, 2)), verbose=0))
    with console_logging():
        model.fit(x, np.zeros((8, 2)), batch_size=1, epochs=2, shuffle=False, callbacks=[progress], verbose=0)
    # epoch 1 begins at 0 s, its steps end at 10, 20, ... 80 s; a line once 25 s have passed since the last
    assert log.getvalue().splitlines() == [
        f"epoch 1/2: step 3/8, 30s elapsed, ETA 50s, loss {loss:.4f}",
        f"epoch 1/2: step 6/8, 1m00s elapsed, ETA 20s, loss {loss:.4f}",
        f"epoch 2/2: step 3/8, 30s elapsed, ETA 50s, loss {loss:.4f}",
        f"epoch 2/2: step 6/8, 1m00s elapsed, ETA 20s, loss {loss:.4f}",
    ]


def test_durations_read_as_people_read_them():
    from cosent_tf.callbacks import duration

    assert [duration(s) for s in (0, 44.6, 60, 380, 3599, 3600, 7530)] == [
        "0s",
        "45s",
        "1m00s",
        "6m20s",
        "59m59s",
        "1h00m",
        "2h05m",
    ]


@pytest.mark.parametrize(
    ("loss", "asked", "best_epoch"),
    [("cosent", None, 2), ("mnrl", None, 3), ("mnrl", "spearman", 2), ("cosent", "mrr@10", 3)],
)
def test_the_best_epoch_is_the_one_of_the_metric_chosen_by_the_loss_or_the_option(loss, asked, best_epoch):
    from cosent_tf.losses import get_loss

    # Spearman is highest at epoch 2, MRR@10 at epoch 3
    history = iter(
        [{"spearman": 0.1, "mrr@10": 0.2}, {"spearman": 0.6, "mrr@10": 0.3}, {"spearman": 0.4, "mrr@10": 0.5}]
    )
    monitor, _ = get_loss("feature", loss).chosen_best_metric(asked)
    callback = ValidationCheckpoint(lambda model: next(history), monitor=monitor)
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    x = np.ones((4, 3), np.float32)
    model.fit(x, x[:, :2], epochs=3, callbacks=[callback], verbose=0)
    assert callback.best_epoch == best_epoch


def test_the_best_weights_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """A save that fails part-way (a full disk, a kill) leaves the earlier best weights readable."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    scores = iter([0.1, 0.5])
    callback = ValidationCheckpoint(lambda m: {"spearman": next(scores)}, str(tmp_path / "best.weights.h5"))
    callback.set_model(model)
    callback.on_epoch_end(0, {"loss": 1.0})
    first = [np.asarray(w) for w in model.get_weights()]
    model.set_weights([w + 1 for w in first])

    def torn(path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"torn")
        raise OSError("disk full")

    monkeypatch.setattr(model, "save_weights", torn)
    with pytest.raises(OSError):
        callback.on_epoch_end(1, {"loss": 1.0})
    monkeypatch.undo()
    model.load_weights(str(tmp_path / "best.weights.h5"))
    for a, b in zip(model.get_weights(), first):
        np.testing.assert_array_equal(a, b)
    assert os.listdir(tmp_path) == ["best.weights.h5"]
