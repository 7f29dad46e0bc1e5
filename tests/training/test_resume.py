"""An interrupted run resumes to the uninterrupted result; what a resumed run may change.

Written once over the process's Keras: tests/keras3/test_resume.py runs the same bodies on Keras 3. A
stop by a callback, in the test's process, shows a run stopped within an epoch resuming at its saved
step on either Keras; the signals and kills, which need a process of their own, go to the Keras 2
script (the Keras 3 command's signal path is tests/keras3/test_training.py's)."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf.console import TENSORFLOW_STARTUP_LINES
from cosent_tf.errors import TrainingInterrupted
from cosent_tf.experiments.scripts import train_main
from cosent_tf.io import read_history
from cosent_tf.training.engine import train
from cosent_tf.training.run_folder import RUN_MARKER, RUN_OUTPUTS
from cosent_tf.training.run_rules import VALIDATION_STATE
from tests.helpers import ROOT, make_tiny_setup, run_until, write_config
from tests.training.run_helpers import RUN_FILES, read_csv, tiny_config
from tests.zoo import copy_of

# the Keras 2 script in a process of its own, to be signalled or killed
SIGNALLED_SCRIPT = "a signal or a kill needs a process: the Keras 2 script's (the Keras 3 command's is test_training's)"


def resume_command(options):
    """The resume tests' training command over the tiny set-up's ``options``: 2 epochs of 12 steps;
    validation every 3 steps; state saved every 3 steps (and on SIGTERM); AdamW with a warm-up over
    the first 12 steps then linear decay, so a stop at step 6 is mid-warm-up."""
    return [
        sys.executable,
        os.path.join(ROOT, "scripts", "cosent.py"),
        "BQ",
        "--epochs",
        "2",
        "--steps-per-epoch",
        "12",
        "--eval-every",
        "3",
        "--backup-every",
        "3",
        "--weight-decay",
        "0.01",
        "--warmup",
        "0.5",
        "--schedule",
        "linear",
        *options,
    ]


def run_whole(command, tmp_path):
    """``command``'s uninterrupted run into ``tmp_path / "whole"``, the reference of the runs
    stopped and resumed: the script as a user runs it, from a fresh TensorFlow as every run compared
    with it (to 1e-6) starts; its stderr must hold no TensorFlow start-up lines. Returns its stderr."""
    reference = subprocess.run(
        command + ["--output-dir", str(tmp_path / "whole")], capture_output=True, text=True, timeout=600
    )
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert not TENSORFLOW_STARTUP_LINES.search(reference.stderr), reference.stderr[:1000]
    return reference.stderr


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(the tiny set-up, the resume tests' command, its uninterrupted run's folder), made once."""
    tmp_path, options = make_tiny_setup(tmp_path_factory.mktemp("resume"))
    command = resume_command(options)
    run_whole(command, tmp_path)
    return tmp_path, command


def interrupt(command, out, send, when):
    """Run ``command`` into ``out`` (a fresh run or one to resume) and send it SIGTERM or SIGINT
    ``send`` once its log shows ``when``: it stops without a traceback, with 128 + the signal's
    number, having saved its state; (the step it resumed at, None for a fresh run; the step saved
    after, as its log says). A process, to be signalled."""
    code, stderr = run_until(command + ["--output-dir", str(out)], when, send)
    assert not (out / "metrics.json").exists()
    assert code == 128 + send and "Traceback" not in stderr, stderr[-3000:]  # 143 for SIGTERM, 130 for SIGINT
    saved_at = int(re.search(rf"{send.name} received: training state saved after step (\d+)", stderr).group(1))
    resumed = re.search(r"resumed at step (\d+)", stderr)
    return (int(resumed.group(1)) if resumed else None), saved_at


def resume(command, out):
    """The same command again, to its end, from a fresh TensorFlow as the reference it must match
    to 1e-6 ran; (the step it resumed at, its stderr)."""
    resumed = subprocess.run(command + ["--output-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return int(re.search(r"resumed at step (\d+)", resumed.stderr).group(1)), resumed.stderr


def assert_the_uninterrupted_result(tmp_path, out):
    """``out`` ends as the uninterrupted run ``whole`` did: the same validations (to 1e-6), best
    epoch and test score, and no training state left behind."""
    whole_rows, rows = read_csv(tmp_path / "whole" / "valid_metrics.csv"), read_csv(out / "valid_metrics.csv")
    assert [(r["epoch"], r["step"]) for r in rows] == [(r["epoch"], r["step"]) for r in whole_rows]
    for got, expected in zip(rows, whole_rows):
        assert float(got["spearman"]) == pytest.approx(float(expected["spearman"]), abs=1e-6)
    whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    again = json.loads((out / "metrics.json").read_text())
    assert again["best_epoch"] == whole["best_epoch"]
    assert again["test"]["spearman"] == pytest.approx(whole["test"]["spearman"], abs=1e-6)
    assert not (out / "backup").exists()


STEPS_PER_EPOCH = 6  # tiny_setup's BQ train pairs in batches of 8
BACKUP_EVERY = 3
EVAL_EVERY = 2  # step 6, the resumed epoch's last batch, is validated once, as the epoch's end


def final_state():
    """A callback keeping the model's weights and its optimizer's variables at the last epoch's end
    (listed after the backup, whose save comes first; before the best epoch's weights are put back)."""
    from cosent_tf.process_keras import keras

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
                self.optimizer = [v.numpy() for v in self.model.optimizer.variables]

    return FinalState()


def stop_at(step):
    """A callback that stops the run at ``step`` as a failure would: the backup's last save before it
    is what the next run resumes from."""
    from cosent_tf.process_keras import keras

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == step:
                raise TrainingInterrupted(15, f"stopped at step {step}")

    return StopAt()


@pytest.mark.heavy
def test_a_run_stopped_within_an_epoch_resumes_at_the_saved_step_to_the_uninterrupted_state(tiny_setup, caplog):
    """Stopped after step 5 with --backup-every 3, the run resumes at step 3 (not at the epoch's
    start) and ends as an uninterrupted run: the same weights, optimizer state, validations and test
    score; the backup is gone at the end."""
    from cosent_tf.callbacks import KERAS_RESUMES_MID_EPOCH, STATE_FILE

    cfg = tiny_config(tiny_setup[0], task="BQ", epochs=2, backup_every=BACKUP_EVERY, eval_every=EVAL_EVERY)
    whole_cfg = dataclasses.replace(cfg, output_dir=cfg.output_dir + "-whole")
    whole_state = final_state()
    whole = train(whole_cfg, callbacks=[whole_state])

    backup = os.path.join(cfg.output_dir, "backup")
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stop_at(5)])  # after the backup of step 3, in the first epoch
    if not KERAS_RESUMES_MID_EPOCH:  # Keras 3's fit resumes at epochs: the position is StepBackup's own file
        with open(os.path.join(backup, STATE_FILE), encoding="utf-8") as f:
            position = json.load(f)
        assert position == {"epoch": 0, "batch": 3, "weights": "state-3.weights.h5"}
        assert sorted(os.listdir(backup)) == ["state-3.weights.h5", STATE_FILE]
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


# (signal, the log line it is sent at, the step the state is saved after at the earliest): SIGTERM
# mid-epoch at step 6 (mid-warm-up; by the time step 6's validation is printed, step 3's state is on
# disk), SIGTERM at the first epoch's end (after its validation), SIGINT mid-epoch in the second.
SIGNALLED = [
    (signal.SIGTERM, "step 6 valid", 6),
    (signal.SIGTERM, "epoch 1 valid", 12),
    (signal.SIGINT, "step 18 valid", 18),
]


@pytest.mark.slow
@pytest.mark.keras2_only(reason=SIGNALLED_SCRIPT)
def test_a_run_stopped_by_sigterm_and_sigint_resumes_each_time_to_the_same_result(uninterrupted):
    """Each signal of SIGNALLED stops the run after saving its state at the step its log says, the
    next command resumes at that step, and the run ends as the uninterrupted one did.

    The signals go one after another to the same run, each to the process resuming from the one
    before: a process per signal, as a signal needs, rather than a process to signal and another to
    resume from it for each."""
    tmp_path, command = uninterrupted
    unfinished = {}  # run folder -> the step its state was saved after
    out = None
    for index, (send, when, at_least) in enumerate(SIGNALLED):
        if out is not None and unfinished[out] >= at_least:
            # The signal before arrived a few steps after its line (the process went on meanwhile)
            # and the run is past this one's: it goes to a fresh run, and each is resumed at the end.
            out = None
        if out is None:
            out = tmp_path / f"signalled-{index}"
            resumed_at, saved_at = interrupt(command, out, send, when)
            assert resumed_at is None
        else:
            resumed_at, saved_at = interrupt(command, out, send, when)
            assert resumed_at == unfinished[out]
        assert saved_at >= at_least
        unfinished[out] = saved_at
    for out, saved_at in unfinished.items():
        step, _ = resume(command, out)
        assert step == saved_at
        assert_the_uninterrupted_result(tmp_path, out)


@pytest.mark.slow
@pytest.mark.keras2_only(reason=SIGNALLED_SCRIPT)
def test_a_run_in_micro_batches_with_dropout_killed_mid_epoch_and_after_training_resumes_to_the_same_result(
    tiny_setup,
):
    """SIGKILL mid-epoch loses the steps since the last periodic save, and the run resumes there; killed
    again once training is done, the same command finishes without training again. In micro-batches
    and with dropout, which a resumed run must draw as an uninterrupted one draws (keyed by the step).

    The second kill goes to the process resuming from the first: a process per kill, one to finish,
    and the uninterrupted run, which the micro-batches and the dropout make this test's own."""
    tmp_path, options = tiny_setup
    dropout = write_config(
        tmp_path / "dropout.json", vocab_size=135, hidden=16, layers=1, max_position=256, hidden_dropout_prob=0.1
    )
    command = resume_command(options) + ["--config", dropout, "--micro-batch-size", "3"]
    assert "the gradient of each batch is computed 3 pairs at a time" in run_whole(command, tmp_path)
    out = tmp_path / "killed"
    # By the time step 6's validation is printed, step 3's state is on disk. A process, to be killed.
    code, _ = run_until(command + ["--output-dir", str(out)], "step 6 valid", signal.SIGKILL)
    assert code == -signal.SIGKILL and not (out / "metrics.json").exists()
    # The resumed run, from a fresh TensorFlow as the reference it must match to 1e-6 ran: killed too.
    code, stderr = run_until(command + ["--output-dir", str(out)], "training done", signal.SIGKILL)
    assert code == -signal.SIGKILL
    step = int(re.search(r"resumed at step (\d+)", stderr).group(1))
    assert 3 <= step < 24 and step % 12 != 0  # mid-epoch
    assert (out / "backup").is_dir() and not (out / "metrics.json").exists()  # the state outlives fit
    step, stderr = resume(command, out)
    assert step == 24 and "resumed at step 24" in stderr and "epoch 1 valid" not in stderr  # no epoch trained again
    assert_the_uninterrupted_result(tmp_path, out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 24
    assert sorted(os.listdir(out)) == RUN_FILES


@pytest.mark.heavy
def test_an_unfinished_run_resumes_only_with_its_own_settings(bq_run, tmp_path):
    from cosent_tf.process_keras import keras

    options = bq_run.options  # the zoo run's own: BQ, 2 epochs
    out = copy_of(bq_run.run, tmp_path / "run")
    (out / "metrics.json").unlink()  # as if stopped before the end, with training state saved
    (out / "backup").mkdir()
    (out / "backup" / "state").write_text("")
    saved = (out / "config.json").read_text()
    changes = [
        (["--lr", "5e-2"], "lr 0.001 there, 0.05 now"),
        (["--batch-size", "16"], "batch_size 8 there, 16 now"),
        (["--epochs", "1"], r"epochs 2 there, 1 now \(may only grow\)"),
    ]
    if keras.backend.backend() == "tensorflow":  # JAX refuses a loss per replica before any run is read
        # the strategy may change (see test_distribute), but not while each replica ranks its own pairs
        changes.append(
            (
                ["--per-replica-loss", "--strategy", "mirrored"],
                "global_batch_loss True there, False now; strategy 'default' there, 'mirrored' now",
            )
        )
    for extra, difference in changes:
        with pytest.raises(
            SystemExit,
            match=f"holds an unfinished run with other settings \\({difference}\\); "
            "nothing was written: resume it with its own settings",
        ):
            train_main(["BQ", "--epochs", "2", "--output-dir", str(out)] + options + extra)
    assert (out / "config.json").read_text() == saved


@pytest.mark.heavy
@pytest.mark.backends("tensorflow")  # the loss counts its calls in a TensorFlow variable
def test_a_nan_after_a_saved_epoch_stops_and_the_same_command_resumes(tiny_setup, monkeypatch, capsys):
    from cosent_tf.losses import CoSENTLoss, registry
    from cosent_tf.process_keras import tf

    tmp_path, options = tiny_setup
    out = tmp_path / "nan"
    argv = ["BQ", "--epochs", "2", "--output-dir", str(out), *options]  # 6 steps an epoch
    calls = tf.Variable(0)

    class NanFromStepEight(CoSENTLoss):
        def call(self, y_true, y_pred):
            calls.assign_add(1)
            return tf.where(calls > 7, tf.constant(float("nan")), super().call(y_true, y_pred))

    monkeypatch.setattr(registry.LossClasses, "CoSENTLoss", NanFromStepEight)
    with pytest.raises(
        SystemExit,
        match=r"the training loss became nan at step 8 \(batch 2 of the epoch\); training "
        r"stopped\. the best weights so far: .*; the last saved training state: ",
    ):
        train_main(argv)
    monkeypatch.undo()
    assert (out / "backup").is_dir() and (out / "best.weights.h5").exists() and not (out / "metrics.json").exists()
    capsys.readouterr()
    metrics = train_main(argv)  # the same command, now with a finite loss
    assert "resumed at step 6: best valid spearman so far" in capsys.readouterr().err
    assert metrics["steps"] == 12 and [r["epoch"] for r in read_csv(out / "valid_metrics.csv")] == ["1", "2"]
    assert not (out / "backup").exists()


def test_every_output_of_a_run_arrives_whole_by_rename(bq_run):
    """Each output is written under a temporary name and renamed into place, so a process
    killed while writing it leaves the previous file (or none), never a partial one."""
    # The zoo run recorded every os.replace it made (BQ, 2 epochs, from train_main).
    renamed, out = bq_run.renamed, bq_run.run
    assert renamed[0][1] == RUN_MARKER  # first: the folder is a run's before it holds anything else
    targets = {target: source for source, target in renamed}
    # the training state is a folder Keras writes and removes; the reliability diagram is drawn only
    # for a calibration map, which these 24 valid pairs are too few for (test_decision_run draws one);
    # validation.json is the Keras 3 trainer's (tests/keras3/test_training.py)
    assert not (out / "reliability.png").exists()
    for name in set(RUN_OUTPUTS) - {"backup", "reliability.png", VALIDATION_STATE}:
        assert name in targets and targets[name].startswith(".tmp-"), (name, renamed)
    assert not [name for name in os.listdir(out) if name.startswith((".tmp-", ".old-"))]
