"""A run on Keras 3 with --backup-every, stopped within an epoch, resumes at the saved step (not at the
epoch's start) and ends as an uninterrupted run: the same weights, optimizer state and validations.
A stop by a callback, in this process, as a crash would stop it; the signal's path (SIGTERM saves after
the current step, and the run resumes there) is tests/keras3/test_training.py's."""

import dataclasses
import json
import os

import numpy as np
import pytest

from cosent_tf.io import read_history
from cosent_tf.keras3.training import train
from tests.keras3.test_training import tiny_run  # noqa: F401  (the fixture: 48 pairs, batches of 8, 2 epochs)

STEPS_PER_EPOCH = 6  # the tiny run's
BACKUP_EVERY = 3
EVAL_EVERY = 2  # step 6, the resumed epoch's last batch, is validated once, as the epoch's end


def final_state():
    """A callback keeping the model's weights and its optimizer's variables at the last epoch's end
    (listed after the backup, whose save comes first; before the best epoch's weights are put back)."""
    import keras

    class FinalState(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.weights, self.optimizer = [], []
            self.batches = 0  # trained in this fit

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1

        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == self.params["epochs"]:
                self.weights = self.model.get_weights()
                self.optimizer = [keras.ops.convert_to_numpy(v) for v in self.model.optimizer.variables]

    return FinalState()


def stop_at(step):
    """A callback that stops the run at ``step`` as a failure would: the backup's last save before it
    is what the next run resumes from."""
    import keras

    from cosent_tf.errors import TrainingInterrupted

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == step:
                raise TrainingInterrupted(15, f"stopped at step {step}")

    return StopAt()


@pytest.mark.heavy
def test_a_run_stopped_within_an_epoch_resumes_at_the_saved_step_to_the_uninterrupted_state(tiny_run, caplog):  # noqa: F811
    from cosent_tf.errors import TrainingInterrupted

    cfg, _ = tiny_run
    cfg = dataclasses.replace(cfg, backup_every=BACKUP_EVERY, eval_every=EVAL_EVERY)
    whole_cfg = dataclasses.replace(cfg, output_dir=cfg.output_dir + "-whole")
    whole_state = final_state()
    whole = train(whole_cfg, callbacks=[whole_state])

    backup = os.path.join(cfg.output_dir, "backup")
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stop_at(5)])  # after the backup of step 3, in the first epoch
    with open(os.path.join(backup, "training_metadata.json"), encoding="utf-8") as f:
        position = json.load(f)
    assert position == {"epoch": 0, "batch": 3, "weights": "state-3.weights.h5"}
    assert sorted(os.listdir(backup)) == ["state-3.weights.h5", "training_metadata.json"]
    state = final_state()
    with caplog.at_level("INFO", logger="cosent_tf"):
        resumed = train(cfg, callbacks=[state])

    assert "resumed at step 3" in caplog.text
    assert state.batches == 2 * STEPS_PER_EPOCH - 3  # the first epoch's last 3 batches, then the second's 6
    assert resumed["steps"] == whole["steps"] == 2 * STEPS_PER_EPOCH
    history, whole_history = (read_history(os.path.join(c.output_dir, "valid_metrics.csv")) for c in (cfg, whole_cfg))
    assert [(r["epoch"], r["step"], r["end_of_epoch"]) for r in history] == [
        (1, 2, False),
        (1, 4, False),
        (1, 6, True),
        (2, 8, False),
        (2, 10, False),
        (2, 12, True),
    ]
    assert [(r["epoch"], r["step"], r["end_of_epoch"]) for r in whole_history] == [
        (r["epoch"], r["step"], r["end_of_epoch"]) for r in history
    ]
    np.testing.assert_allclose([r["spearman"] for r in history], [r["spearman"] for r in whole_history], atol=1e-6)
    assert len(state.weights) == len(whole_state.weights) > 0
    for got, expected in zip(state.weights, whole_state.weights):
        np.testing.assert_allclose(got, expected, atol=1e-6)
    assert len(state.optimizer) == len(whole_state.optimizer) > 0
    for got, expected in zip(state.optimizer, whole_state.optimizer):  # Adam's second moments are far below 1e-6
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-9)
    assert resumed["test"]["spearman"] == pytest.approx(whole["test"]["spearman"], abs=1e-6)
    assert not os.path.exists(backup)
