"""What a command shows on the console: the package's log on stderr, TensorFlow's start-up lines
held back unless asked for, live progress bars only on a terminal, and one ``error: ...`` line
for a failure.

Shared by the ``cosent-tf`` command (:mod:`cosent_tf.cli`) and the training scripts and report
(:mod:`cosent_tf.experiments.scripts`), so that they speak alike.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, Optional

from .errors import CosentError

VERBOSE_HELP = (
    "show TensorFlow's start-up lines (absl, oneDNN, CUDA probing), which are held back by default, "
    "and the traceback of an error"
)


def live_progress_on(stream: Optional[Any] = None) -> bool:
    """Whether a progress bar redrawn in place (with carriage returns) belongs on ``stream``.

    Only a terminal, or a Jupyter cell (whose stream is ipykernel's, drawn as a widget or
    redrawn in the cell), shows a live bar; a file or a pipe (``2> train.log``, a job's log)
    would keep every redraw, so progress there is a line per epoch or nothing.

    Args:
        stream: the stream the bar would be written to (default: ``sys.stderr``, looked up
            at the call).

    Returns:
        True for a terminal or a Jupyter cell, False otherwise (a closed stream included).

    Example:
        >>> import io
        >>> live_progress_on(io.StringIO())
        False
    """
    stream = sys.stderr if stream is None else stream
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False
    return type(stream).__module__.startswith("ipykernel.")


def validation_line(
    epoch: int, metrics: Mapping[str, float], best: float, best_epoch: Optional[int], monitor: str = "spearman"
) -> str:
    """The log line of an epoch end's validation, the same on both Kerases.

    Args:
        epoch: the epoch that ended, from 1.
        metrics: its valid metrics, by name.
        best: the best score so far of the metric that picks the best epoch (this epoch's included).
        best_epoch: the epoch that scored it (None while no score was finite).
        monitor: the metric that picks the best epoch (``--best-metric``).

    Example:
        >>> validation_line(2, {"spearman": 0.81234, "pearson": 0.79}, 0.81234, 2)
        'epoch 2 valid: spearman 0.8123, pearson 0.7900  (best so far)'
    """
    if best_epoch is None:
        best_said = "  (no finite score yet)"
    elif best_epoch == epoch:
        best_said = "  (best so far)"
    else:
        best_said = f"  (best {monitor} {best:.4f} at epoch {best_epoch})"
    return f"epoch {epoch} valid: {metrics_text(metrics)}{best_said}"


def metrics_text(metrics: Mapping[str, float]) -> str:
    """``spearman 0.8123, pearson 0.7900``: metrics as a log line shows them."""
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


@contextlib.contextmanager
def console_logging() -> Iterator[None]:
    """Show the package's log (progress, warnings, errors) on stderr within the block.

    So stdout carries a command's result alone (``cosent-tf train ... > metrics.json``). The
    handler is removed, and the logger's level put back, afterwards.

    Example:
        >>> with console_logging():
        ...     logging.getLogger("cosent_tf").info("shown on stderr")
    """
    package = logging.getLogger("cosent_tf")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO)
    previous_level, previous_propagate = package.level, package.propagate
    package.setLevel(logging.INFO)
    package.propagate = False  # shown here once, not again by a handler of the root logger
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(previous_level)
        package.propagate = previous_propagate


@contextlib.contextmanager
def tensorflow_start_up_shown(verbose: bool) -> Iterator[None]:
    """With ``verbose``, show TensorFlow's native start-up lines if it is first imported within the block.

    It sets ``COSENT_TF_VERBOSE=1`` (read by :mod:`cosent_tf.backend`), and puts the variable
    back afterwards.

    Args:
        verbose: whether to show them (the ``--verbose`` option).

    Example:
        >>> with tensorflow_start_up_shown(verbose=True):
        ...     import cosent_tf.backend
    """
    previous = os.environ.get("COSENT_TF_VERBOSE")
    if verbose:
        os.environ["COSENT_TF_VERBOSE"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("COSENT_TF_VERBOSE", None)
        else:
            os.environ["COSENT_TF_VERBOSE"] = previous


def error_message(error: BaseException) -> str:
    """The ``error: ...`` line's text for ``error``.

    An OSError says which file and what the system said (``out.npy: No space left on device``),
    not its errno and repr.

    Args:
        error: the exception that ended the command.

    Returns:
        The text after ``error:``.

    Example:
        >>> error_message(OSError(28, "No space left on device", "out.npy"))
        'out.npy: No space left on device'
    """
    if isinstance(error, OSError):
        names = [os.fsdecode(name) for name in (error.filename, error.filename2) if name is not None]
        said = error.strerror or (str(error.args[0]) if error.args else type(error).__name__)
        return ": ".join([" -> ".join(names), said] if names else [said])
    return str(error)


@contextlib.contextmanager
def errors_reported(verbose: bool) -> Iterator[None]:
    """End the process with one ``error: ...`` line for bad input or a failed file operation.

    Within the block, a CosentError, ValueError or OSError (a full or read-only disk, a path
    under a file) becomes that line naming the file, and exit status 1. Other exceptions are
    bugs, and keep their traceback.

    Args:
        verbose: print the traceback first.

    Raises:
        SystemExit: with the ``error: ...`` line, in place of the error.

    Example:
        >>> with errors_reported(verbose=False):
        ...     raise ValueError("bad")
        Traceback (most recent call last):
        SystemExit: error: bad
    """
    try:
        yield
    except (CosentError, ValueError, OSError) as error:
        if verbose:
            traceback.print_exc()
        raise SystemExit(f"error: {error_message(error)}") from None


# What TensorFlow's native code prints at start-up whatever TF_CPP_MIN_LOG_LEVEL says: absl's
# notice, oneDNN's, the CPU-feature note, and CUDA probing on a machine without a GPU.
TENSORFLOW_STARTUP_LINES = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on|Could not find cuda drivers"
    r"|failed call to cuInit|Unable to register cu|This TensorFlow binary is optimized to use"
    r"|rebuild TensorFlow with the appropriate compiler flags"
)


@contextlib.contextmanager
def tensorflow_start_up_held_back() -> Iterator[None]:
    """For the block, hold back what native code writes to stderr (file descriptor 2); then
    pass on every line but TensorFlow's start-up lines. ``COSENT_TF_VERBOSE=1`` shows them.

    Both Kerases import TensorFlow within it: the Keras 2 engine (:mod:`cosent_tf.backend`) and the
    Keras 3 route (:func:`cosent_tf.keras3.runtime.checked_keras`).

    Example:
        >>> with tensorflow_start_up_held_back():
        ...     import tensorflow  # doctest: +SKIP
    """
    if os.environ.get("COSENT_TF_VERBOSE") == "1":
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not TENSORFLOW_STARTUP_LINES.search(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
