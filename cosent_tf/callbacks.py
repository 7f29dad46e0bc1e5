"""Keras callbacks of the training engine: keep the best epoch, stop on a non-finite loss,
save the training state for an exact resume, and say how an epoch is going in a log file.

Written once over the process's Keras (:mod:`cosent_tf.process_keras`): the same classes run on
tf-keras and on Keras 3 (TensorFlow or JAX backend)."""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional

import numpy as np

from .console import metrics_text, validation_line
from .errors import NonFiniteLossError, TrainingInterrupted
from .io import (  # noqa: F401  (in io, which imports no TensorFlow; read_history and write_history named here as before)
    atomic_path,
    read_history,
    read_json,
    write_history,
    write_json,
)
from .process_keras import KERAS_MAJOR, keras

logger = logging.getLogger(__name__)


def optimizer_step(model: Any) -> int:
    """The optimizer steps ``model`` has taken (a resumed run's restored ones included)."""
    return int(model.optimizer.iterations.numpy())


class ValidationCheckpoint(keras.callbacks.Callback):
    """Evaluate on valid after each epoch (and every ``every_steps`` steps), keep the best.

    Epoch-end results are logged as ``val_<metric>``; the weights of the best epoch by
    ``monitor`` (higher is better) are written atomically, so a crash leaves the previous best
    intact. Every evaluation becomes a row (epoch, step, end_of_epoch, metrics...) of the
    history file, rewritten atomically; a resumed run reloads the rows up to the restored step
    and carries on. Best weights are chosen at epoch ends only, as in the original experiments,
    and a NaN score is never the best: while every one is NaN, ``best_epoch`` stays None (the
    engine then fails).

    Args:
        evaluate: ``evaluate(model) -> dict`` of metric name -> value on the validation data.
        weights_path: where the best epoch's weights are saved (None: kept in memory only).
        monitor: the metric that picks the best epoch (higher is better).
        restore_best: the model ends training holding the best weights.
        every_steps: also validate every this many optimizer steps (0: at epoch ends only).
        csv_path: the history file (``valid_metrics.csv``); None writes none.
        progress_bar: a Keras progress bar is being redrawn on stdout, so a validation within an
            epoch first ends its line (fit's own ProgbarLogger should come before this callback,
            so that it ends the line at epoch ends).
        writes: False for the workers other than the chief of a multi-worker run. They validate
            and save in step with the chief, because saving the weights reads the loss metric,
            which is a collective op under that strategy, but into a scratch file, and they only
            read the history (the chief's, for a resumed run's best so far).

    Example:
        >>> checkpoint = ValidationCheckpoint(lambda model: {"spearman": 0.5}, "best.weights.h5")
        >>> model.fit(batches, epochs=3, callbacks=[checkpoint])  # doctest: +SKIP
        >>> checkpoint.best_epoch  # doctest: +SKIP
        1
    """

    def __init__(
        self,
        evaluate: Callable[[keras.Model], Mapping[str, float]],
        weights_path: Optional[str] = None,
        monitor: str = "spearman",
        restore_best: bool = True,
        every_steps: int = 0,
        csv_path: Optional[str] = None,
        progress_bar: bool = False,
        writes: bool = True,
    ) -> None:
        super().__init__()
        self.writes = writes
        self.evaluate = evaluate
        self.weights_path = weights_path
        self.monitor = monitor
        self.restore_best = restore_best
        self.every_steps = int(every_steps or 0)
        self.csv_path = csv_path
        self.progress_bar = progress_bar
        self.best = -math.inf
        self.best_epoch: Optional[int] = None
        self.steps_done: Optional[int] = None  # the optimizer's step when training ended
        self.history: list[dict[str, Any]] = []
        self._best_weights = None
        self._resume_checked = False

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self._resume_checked = False

    def _resume(self) -> None:
        """Reload the history up to the restored step (a backup callback restores it in on_train_begin)."""
        self._resume_checked = True
        step = optimizer_step(self.model)
        if step and self.csv_path and os.path.exists(self.csv_path):
            self.history = [row for row in read_history(self.csv_path) if row["step"] <= step]
            for row in self.history:
                if row["end_of_epoch"] and row[self.monitor] > self.best:
                    self.best, self.best_epoch = row[self.monitor], row["epoch"]
            logger.info(
                "resumed at step %d: best valid %s so far %.4f (epoch %s)",
                step,
                self.monitor,
                self.best,
                self.best_epoch,
            )

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        if not self.every_steps or batch + 1 == self.params.get("steps"):
            return
        step = optimizer_step(self.model)
        if step % self.every_steps == 0:
            metrics = self._record(self._epoch + 1, step, False)
            if self.progress_bar:
                sys.stdout.write("\n")  # the bar's line is unfinished
            logger.info("step %d valid: %s", step, metrics_text(metrics))

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        if not self._resume_checked:
            self._resume()
        self._epoch = epoch

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        metrics = self._record(epoch + 1, optimizer_step(self.model), True)
        if logs is not None:
            logs.update({f"val_{k}": v for k, v in metrics.items()})
        value = metrics[self.monitor]
        improved = value > self.best
        if improved:
            self.best, self.best_epoch = value, epoch + 1
            self._best_weights = self.model.get_weights()
            self._save_best()
        logger.info("%s", validation_line(epoch + 1, metrics, self.best, self.best_epoch, self.monitor))

    def _save_best(self) -> None:
        if self.weights_path and self.writes:
            with atomic_path(self.weights_path) as tmp:
                self.model.save_weights(tmp)
        elif self.weights_path:
            with tempfile.TemporaryDirectory() as scratch:
                self.model.save_weights(os.path.join(scratch, os.path.basename(self.weights_path)))

    def _record(self, epoch: int, step: int, end_of_epoch: bool) -> Mapping[str, float]:
        metrics = self.evaluate(self.model)
        self.history.append({"epoch": epoch, "step": step, "end_of_epoch": end_of_epoch, **metrics})
        if self.csv_path and self.writes:
            write_history(self.csv_path, self.history)
        return metrics

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        if not self._resume_checked:  # resumed after the last epoch: no epoch ran
            self._resume()
        # before the best weights come back: a weights file also holds the optimizer's state then
        self.steps_done = optimizer_step(self.model)
        if not self.restore_best:
            return
        if self._best_weights is not None:
            self.model.set_weights(self._best_weights)
        elif self.best_epoch is not None and self.weights_path and os.path.exists(self.weights_path):
            self.model.load_weights(self.weights_path)  # best epoch came before a resume


# Without a live progress bar (a log file, a pipe) a line says how an epoch is going at most this
# often: a job's log shows within a minute that training is alive, and an epoch of hours stays a
# screenful.
PROGRESS_LINE_SECONDS = 60.0


def duration(seconds: float) -> str:
    """``seconds`` as people read a duration: ``45s``, ``6m20s``, ``2h05m``."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class ProgressLines(keras.callbacks.Callback):
    """A line within each epoch, at most every ``every_seconds``: the step of the epoch, the time
    since the epoch began and an estimate of the time to its end, and the loss so far.

    For a console that is not a terminal, where Keras's bar would keep every redraw and Keras
    prints one line an epoch (``verbose=2``): a long epoch then shows that it is alive. No line
    at the epoch's last step (Keras's own line follows). The estimate is from the steps run since
    the epoch began in this process (a resumed epoch's earlier steps took no time here).

    Args:
        every_seconds: the least time between two lines.
        clock: seconds from a fixed point (``time.monotonic``; a test's own clock).

    Example:
        >>> model.fit(batches, epochs=3, callbacks=[ProgressLines()], verbose=2)  # doctest: +SKIP
        epoch 1/3: step 240/1000, 1m00s elapsed, ETA 3m10s, loss 0.5123
    """

    def __init__(
        self, every_seconds: float = PROGRESS_LINE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.every_seconds = float(every_seconds)
        self.clock = clock
        self._epoch = 0
        self._started = self._said = 0.0
        self._first_batch: Optional[int] = None

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        self._epoch = epoch
        self._started = self._said = self.clock()
        self._first_batch = None

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        if self._first_batch is None:
            self._first_batch = batch
        steps = self.params.get("steps")
        now = self.clock()
        if now - self._said < self.every_seconds or (steps is not None and batch + 1 >= steps):
            return
        self._said = now
        elapsed = now - self._started
        run_here = batch + 1 - self._first_batch
        said = f"epoch {self._epoch + 1}/{self.params.get('epochs')}: step {batch + 1}"
        said += f"/{steps}" if steps else ""
        said += f", {duration(elapsed)} elapsed"
        if steps:
            said += f", ETA {duration(elapsed / run_here * (steps - batch - 1))}"
        loss = (logs or {}).get("loss")
        if loss is not None:
            said += f", loss {float(loss):.4f}"
        logger.info("%s", said)


def epoch_progress(live: bool) -> tuple[list[keras.callbacks.Callback], int]:
    """How ``fit`` shows progress: ``(callbacks, verbose)``. ``live`` (a terminal, a Jupyter cell,
    see :func:`cosent_tf.console.live_progress_on`): Keras's bar redrawn in place; otherwise a line
    an epoch (``verbose=2``) and :class:`ProgressLines` within it.

    Example:
        >>> callbacks, verbose = epoch_progress(live=False)
        >>> verbose
        2
    """
    if live:
        # tf-keras's bar counts samples unless told to count steps; Keras 3's counts steps, and has no such option
        bar = keras.callbacks.ProgbarLogger(count_mode="steps") if KERAS_MAJOR == 2 else keras.callbacks.ProgbarLogger()
        return [bar], 1
    return [ProgressLines()], 2


class EpochSetter(keras.callbacks.Callback):
    """Tells a batch stream whose batches are drawn anew each epoch (its ``epoch``) which epoch is
    starting, a resumed run's first one included."""

    def __init__(self, batches: Any) -> None:
        super().__init__()
        self.batches = batches

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        self.batches.epoch = epoch


class StartStep(keras.callbacks.Callback):
    """The optimizer's step when ``fit`` starts, for a batch stream to start from (call it).

    It is read in ``on_train_begin``: list it after a backup callback, whose restore happens
    there; a stream started before (to build the loss, not to train) starts at 0. The stream
    must not read the step itself when tf.data first pulls a batch: that happens in another
    thread while the first training step runs, and the step counter's update does not wait for
    the batch, so the stream could start one batch late.
    """

    def __init__(self) -> None:
        super().__init__()
        self.step: Optional[int] = None

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self.step = optimizer_step(self.model)

    def __call__(self) -> int:
        if self.step is None:
            # Keras 3 on JAX draws one batch to build the loss before training begins, and starts the
            # dataset again for training: that batch is never trained on, wherever the stream starts
            return 0
        return self.step


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raise NonFiniteLossError, naming the step, as soon as the loss is NaN or infinite.

    Raising (rather than Keras's TerminateOnNaN, which ends ``fit`` normally) aborts
    ``fit`` before BackupAndRestore's end-of-training clean-up, so the state of the last
    completed epoch and the best weights so far stay on disk.
    """

    def __init__(self, kept: Iterable[tuple[str, str]] = (), advice: str = "") -> None:
        super().__init__()
        self.kept = kept  # (what, path) pairs worth pointing the user at, if they exist by then
        self.advice = advice

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            step = optimizer_step(self.model)
            kept = [f"{what}: {path}" for what, path in self.kept if os.path.exists(path)]
            raise NonFiniteLossError(
                f"the training loss became {loss} at step {step} (batch {batch + 1} of the epoch); "
                "training stopped. "
                + ("; ".join(kept) + "." if kept else "Nothing was saved yet.")
                + (" " + self.advice if self.advice else "")
            )


# tf-keras's BackupAndRestore saves the batch within the epoch and its fit resumes at the batch after it;
# Keras 3's saves the epoch only, so StepBackup writes and restores the position itself there (its own
# files, below) and ends the resumed epoch after the batches it has left.
KERAS_RESUMES_MID_EPOCH = KERAS_MAJOR == 2

# Keras 3's training state: the weights and optimizer of one position, in a file named by it, and the
# position with that file's name in STATE_FILE. Each is written whole and renamed into place, the
# position last, so a process killed while saving leaves the previous state readable.
STATE_FILE = "training_metadata.json"  # Keras 3's BackupAndRestore's name, which held the epoch alone
STATE_WEIGHTS = "state-{steps}.weights.h5"


class StepBackup(keras.callbacks.BackupAndRestore):
    """Keras BackupAndRestore that saves at the right moments for an exact resume.

    The training state (weights, optimizer, epoch and batch counters) is saved

    * at the end of every epoch, after the callbacks listed before this one have run
      their ``on_epoch_end`` (list it last, after validation);
    * every ``every_steps`` optimizer steps, if given (a crash then loses at most that many);
    * after the current step when SIGTERM or SIGINT arrives; training then stops with
      :class:`TrainingInterrupted`.

    The same ``fit`` call resumes from the last save, mid-epoch included: the resumed epoch trains
    only the batches it had left. Callbacks that read the restored step must do so from
    ``on_epoch_begin`` on, since this one restores in ``on_train_begin`` after them. The backup
    outlives ``fit``: the caller removes it once everything that depends on the training is written.

    Keras's own callback either backs up at epoch ends (and then resumes at the next
    epoch even from a mid-epoch save) or every N batches (and then never after the
    epoch-end callbacks, such as validation, have run): this one saves at both moments. On
    tf-keras it calls the private ``_backup`` hook, and tf-keras's fit resumes at the saved batch.
    Keras 3's fit resumes at an epoch's start only, so there this callback writes the position
    (epoch and batches done) beside the weights and, in a resumed epoch, sets ``params["steps"]``
    to the batches that epoch has left (what every callback's test of an epoch's last batch reads;
    batches are counted from 0 in it, as Keras 3 counts them) and ends that epoch after them
    through ``stop_training``, which it clears again at the epoch's end. The batch stream must
    start at the restored step (:class:`StartStep`). The signal handlers it installs are put back
    when training ends, however it ends. ``writes``: False for the workers
    other than the chief of a multi-worker run, which save the same state (every worker takes part)
    into a folder removed after, as tf-keras's do, and restore from the chief's.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, backup_dir: str, every_steps: int = 0, writes: bool = True) -> None:
        # An integer save_freq makes tf-keras's restore resume at the saved batch, not the next epoch.
        super().__init__(backup_dir, save_freq=1 << 62, delete_checkpoint=False)
        self.every_steps = int(every_steps or 0)
        self.writes = writes
        self.received: Optional[int] = None
        self._handlers: dict[int, Any] = {}
        # Keras 3: the batches per epoch, and the restored epoch with the batches of it already trained
        self._epoch_steps = 0
        self._resumed: tuple[int, int] = (0, 0)
        self._epoch = 0
        self._trained_before = 0  # of the epoch running, before this fit
        self._ending_epoch = False

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        if KERAS_RESUMES_MID_EPOCH:
            super().on_train_begin(logs)
        else:
            self._epoch_steps = int(self.params["steps"])
            self._resumed = self._restore(logs)
        self.received = None
        self._handlers = {number: signal.signal(number, self._receive) for number in self.SIGNALS}

    def _restore(self, logs: Optional[dict]) -> tuple[int, int]:
        """Keras 3: load the saved state, if any; (the epoch to resume in, the batches of it trained)."""
        state_path = os.path.join(self.backup_dir, STATE_FILE)
        state = read_json(state_path, "the training state's position") if os.path.exists(state_path) else {}
        if "weights" not in state:  # none saved, or Keras 3's own (epoch ends only), which its restore reads
            super().on_train_begin(logs)
            return int(self.model._initial_epoch or 0), 0
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)  # its variables, to load into
        self.model.load_weights(os.path.join(self.backup_dir, state["weights"]))
        epoch, trained = int(state["epoch"]), int(state["batch"])
        self.model._initial_epoch = epoch  # where Keras 3's fit starts (its own restore sets it so)
        return epoch, trained

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        super().on_epoch_begin(epoch, logs)
        if KERAS_RESUMES_MID_EPOCH:
            return
        self._epoch = epoch
        self._trained_before = self._resumed[1] if epoch == self._resumed[0] else 0
        self.params["steps"] = self._epoch_steps - self._trained_before

    def _receive(self, number: int, frame: Any) -> None:
        self.received = number

    def restore_signal_handlers(self) -> None:
        """Put back the signal handlers that were there before training began."""
        for number, handler in self._handlers.items():
            signal.signal(number, handler)
        self._handlers = {}

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        if batch + 1 == self.params.get("steps"):
            if self._trained_before:  # a resumed epoch on Keras 3, whose fit would go on to a whole one
                self._ending_epoch = self.model.stop_training = True
            return  # the epoch's end saves, once its validation has run
        step = optimizer_step(self.model)
        if self.received is not None or (self.every_steps and step % self.every_steps == 0):
            self._save(epoch=self._current_epoch if KERAS_RESUMES_MID_EPOCH else self._epoch, batch=batch)
        self._stop_if_signalled()

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if not KERAS_RESUMES_MID_EPOCH:
            self.params["steps"] = self._epoch_steps
            if self._ending_epoch:
                self._ending_epoch = self.model.stop_training = False
        self._save(epoch=epoch, batch=self.params.get("steps", 1) - 1 - self._trained_before)
        self._stop_if_signalled()

    def _save(self, epoch: int, batch: int) -> None:
        """The training state after ``batch`` of ``epoch`` (counted from 0; on Keras 3, from the first
        batch this fit trained in the epoch)."""
        if KERAS_RESUMES_MID_EPOCH:
            self._backup(epoch=epoch, batch=batch)  # tf-keras's hook, of both its save modes
            return
        trained = self._trained_before + batch + 1
        if trained == self._epoch_steps:
            epoch, trained = epoch + 1, 0
        weights = STATE_WEIGHTS.format(steps=epoch * self._epoch_steps + trained)
        if not self.writes:  # the chief's save, made by every worker alike, into a folder of its own
            with tempfile.TemporaryDirectory() as scratch:
                self.model.save_weights(os.path.join(scratch, weights))
            return
        with atomic_path(os.path.join(self.backup_dir, weights)) as tmp:
            self.model.save_weights(tmp)
        write_json(os.path.join(self.backup_dir, STATE_FILE), {"epoch": epoch, "batch": trained, "weights": weights})
        for name in os.listdir(self.backup_dir):  # the states before, Keras 3's own included
            if name != weights and name != STATE_FILE and not name.startswith(".tmp-"):
                os.remove(os.path.join(self.backup_dir, name))

    def _stop_if_signalled(self) -> None:
        if self.received is None:
            return
        self.restore_signal_handlers()
        name = signal.Signals(self.received).name
        saved = f"training state saved after step {optimizer_step(self.model)} in {self.backup_dir}"
        raise TrainingInterrupted(
            self.received, f"{name} received: {saved}; run the same command again to resume from there"
        )

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        self.restore_signal_handlers()
        super().on_train_end(logs)
