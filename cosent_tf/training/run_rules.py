"""The rules of a training run's output folder, shared by the Keras 2 engine
(:mod:`cosent_tf.training.engine`, through :mod:`cosent_tf.training.run_folder`) and the Keras 3
trainer (:mod:`cosent_tf.keras3.training`): this module imports neither Keras, so that a run folder
is one kind of folder whichever Keras wrote it.

A run writes its outputs (:data:`RUN_OUTPUTS`) into one folder, and the first of them is the
marker :data:`RUN_MARKER`: only a folder holding it (and nothing but a run's outputs) is taken
for a run, so no folder of the user's is ever resumed over or removed. The marker records a
fingerprint of every file the run reads (:func:`fingerprints`). A folder holding a finished run
(``metrics.json``) is trained over only with ``overwrite``, which first removes that run's
outputs; an unfinished run is resumed only with the settings and the input files it was started
with (``epochs`` may grow; evaluation and backup frequencies may change). A folder holding one
of the run's inputs, or anything but a cosent-tf run, is refused. Removing a run's outputs
removes its own names only, a link as a link, and in ``model/`` only a model folder's files.
A finished run of cosent-tf 0.3, which wrote no marker, is known by its ``config.json`` (a
run's settings), ``metrics.json`` and model folder; an unfinished one is refused.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterable
from typing import Optional

from ..errors import ConfigError, DataError
from ..io import FolderKind, folder_lock, is_inside, json_field, read_json, write_history, write_json
from ..models.checkpoint_files import RUN_MARKER, RUN_MODEL_FOLDER, TF_GLOB_CHARACTERS
from ..models.kinds import KINDS
from ..models.spec import MODEL_FOLDER, SPEC_FILE
from .config import KIND_SETTINGS

# RUN_MARKER is written first into a new run's folder; it records the fingerprints of the run's
# inputs (named in cosent_tf.models.checkpoints, which tells a run folder from a checkpoint).
# What a run writes into its output folder (see cosent_tf.training.engine), each named once here.
RUN_CONFIG = "config.json"  # the full, resolved configuration
BEST_WEIGHTS = "best.weights.h5"  # weights of the epoch with the best valid Spearman
VALID_METRICS = "valid_metrics.csv"  # every validation (each epoch end, and every --eval-every steps)
VALID_CURVE = "valid_curve.png"  # valid Spearman against training steps (plot_valid_curve)
TEST_SCORES = "test_scores.npz"  # test scores and labels per task, for similarity-distribution plots
RELIABILITY = "reliability.png"  # test pairs' reliability diagram before and after the shipped calibration
MODEL = RUN_MODEL_FOLDER  # the best model as a model folder, with the threshold tuned on valid
METRICS = "metrics.json"  # the final metrics; its presence makes the run finished
BACKUP = "backup"  # the training state while the run is unfinished, removed last
LOCK = ".lock"  # held while a run writes to the folder
VALIDATION_STATE = "validation.json"  # an earlier Keras 3 trainer's validations, turned into VALID_METRICS on resuming
RUN_OUTPUTS = (
    RUN_MARKER,
    RUN_CONFIG,
    BEST_WEIGHTS,
    VALIDATION_STATE,
    VALID_METRICS,
    VALID_CURVE,
    TEST_SCORES,
    RELIABILITY,
    MODEL,
    METRICS,
    BACKUP,
)
RUN_FOLDER = FolderKind("a cosent-tf training run", RUN_MARKER, RUN_OUTPUTS + (LOCK, ".tmp-*", ".old-*"))
MARKER_FORMAT = "cosent-tf-run"
# Settings a resumed run may change, since they do not change what training computes, each with
# the condition (on the resumed run's settings) under which that holds. The strategy may change
# only while the loss ranks the global batch: per replica (--per-replica-loss), what a step
# computes depends on the number of replicas.
RESUMABLE_CHANGES = {
    **dict.fromkeys(
        ("epochs", "eval_every", "backup_every", "strict", "output_dir", "worker_timeout"), lambda settings: True
    ),
    "strategy": lambda settings: settings.get("global_batch_loss", True),
}
PATH_SETTINGS = ("data_dir", "config", "checkpoint", "vocab", "train_file", "valid_file", "test_file")
# Settings that were saved under another name by earlier versions: {old: new}.
RENAMED_SETTINGS = {"model": "architecture"}


def _comparable(settings):
    """Settings as config.json holds them, with paths resolved so that spellings compare equal."""
    settings = json.loads(json.dumps(settings))
    for old, new in RENAMED_SETTINGS.items():
        if old in settings:
            settings.setdefault(new, settings.pop(old))
    # Earlier versions recorded the setting a model kind does not read too (a cross-encoder's
    # pooling, a sentence encoder's head input): neither reaches the run.
    kind = KINDS.get(settings.get("kind"))
    if kind is not None:
        settings.update({name: None for field, name in KIND_SETTINGS.items() if field != kind.spec_field})
    return {
        key: os.path.realpath(value) if key in PATH_SETTINGS and isinstance(value, str) and value else value
        for key, value in settings.items()
    }


def fingerprints(paths) -> dict:
    """{real path: sha256 of its content} of each file in ``paths``, read in blocks."""
    digests = {}
    for path in dict.fromkeys(os.path.realpath(p) for p in paths if p):
        if not stat.S_ISREG(os.stat(path).st_mode):  # a pipe would hang or be consumed
            raise DataError(path, "not a regular file; a run reads its inputs again to resume: pass a file")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        digests[path] = digest.hexdigest()
    return digests


def _names(folder):
    return sorted(name for name in os.listdir(folder) if name != LOCK) if os.path.isdir(folder) else []


def _earlier_version_run(folder, names, settings):
    """ "finished" or "unfinished" for a run folder written before runs had a marker (cosent-tf 0.3),
    recognised by its config.json holding a run's settings; None for anything else."""
    if not settings or RUN_CONFIG not in names or RUN_MARKER in names:
        return None
    if not all(any(fnmatch.fnmatchcase(name, pattern) for pattern in RUN_FOLDER.entries) for name in names):
        return None
    try:
        saved = read_json(os.path.join(folder, RUN_CONFIG), "the run's settings")
    except ConfigError:
        return None
    keys = set(_comparable(saved))
    if not {"task", "kind", "loss", "output_dir"} <= keys or not keys <= set(settings):
        return None
    finished = METRICS in names and os.path.isfile(os.path.join(folder, MODEL, SPEC_FILE))
    return "finished" if finished else "unfinished"


def _check_is_run(folder, names, settings):
    """Refuse ``folder`` unless it is new, empty, a run's folder, or a finished run of cosent-tf 0.3."""
    if not names or RUN_FOLDER.holds_only_its_own(names):
        return
    earlier = _earlier_version_run(folder, names, settings)
    if earlier == "finished":
        return
    if earlier == "unfinished":
        raise ConfigError(
            f"{folder}: holds an unfinished run of an earlier cosent-tf version (no {RUN_MARKER}), which this "
            "version does not resume; nothing was written: choose another --output-dir (or, if it is only that "
            "run, remove the folder yourself)"
        )
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    if RUN_CONFIG in names and RUN_MARKER not in names:
        raise ConfigError(
            f"{folder}: does not look like a cosent-tf training run (it holds {shown} but no {RUN_MARKER}, "
            "which every run writes first); nothing was written: choose a new or empty --output-dir"
        )
    raise ConfigError(
        f"{folder}: already exists and is not a cosent-tf training run (it holds {shown}); "
        "nothing was written: choose a new or empty --output-dir"
    )


def _removals(folder):
    """The paths to remove to clear a run's outputs from ``folder``, the marker last; a ConfigError,
    before anything is removed, if one of them is not what a run writes. A link is removed itself,
    never what it points to."""
    paths = []
    for name in RUN_OUTPUTS[1:] + RUN_OUTPUTS[:1]:
        path = os.path.join(folder, name)
        if not os.path.lexists(path):
            continue
        if os.path.islink(path) or not os.path.isdir(path) or name == BACKUP:
            paths.append(path)
        elif name == MODEL:
            inside = sorted(os.listdir(path))
            foreign = [n for n in inside if not _model_file(os.path.join(path, n))]
            if foreign:
                raise ConfigError(
                    f"{path}: holds {', '.join(foreign[:8])}, which a run does not write; nothing was removed: "
                    "move them out, or choose another --output-dir"
                )
            paths += [os.path.join(path, n) for n in inside] + [path]
        else:
            raise ConfigError(
                f"{path}: is a folder, which a run does not write there; nothing was removed: "
                "move it out, or choose another --output-dir"
            )
    return paths


def _model_file(path):
    """Whether ``path``, inside a run's model folder, is a file (or link) such a folder holds."""
    name = os.path.basename(path)
    own = any(fnmatch.fnmatchcase(name, pattern) for pattern in MODEL_FOLDER.entries)
    return own and (os.path.islink(path) or not os.path.isdir(path))


def _remove_run_outputs(folder):
    for path in _removals(folder):
        if os.path.isdir(path) and not os.path.islink(path):
            if os.path.basename(path) == MODEL:
                os.rmdir(path)  # emptied just before
            else:
                shutil.rmtree(path)  # the training state, which Keras writes; rmtree does not follow links
        else:
            os.remove(path)


def _start(folder, inputs):
    write_json(os.path.join(folder, RUN_MARKER), {"format": MARKER_FORMAT, "inputs": dict(inputs or {})})


def _change(path, then, now):
    if then and now:
        return f"{path}: changed since the run started"
    return f"{path}: read when the run started, not now" if then else f"{path}: not read when the run started"


def check_run_folder(folder: str, inputs: Iterable = (), settings: Optional[dict] = None) -> None:
    """Raise ConfigError, writing nothing, if ``folder`` may not hold a run reading ``inputs``.

    Refused: a folder holding one of the run's inputs, or anything but a cosent-tf run (``settings``,
    the run's, tell a finished run of cosent-tf 0.3, which had no marker). Called before the
    folder is locked, so that a refused folder gets no lock file.
    """
    globbed = [c for c in TF_GLOB_CHARACTERS if c in os.path.abspath(folder)]
    if globbed:  # the training state's restore globs its path: such a run could never resume
        raise ConfigError(
            f"{folder}: its path holds {' '.join(globbed)}, which TensorFlow reads as a pattern when it restores "
            "a run's saved training state, so an interrupted run here could not resume; nothing was written: "
            "choose an --output-dir without them"
        )
    for source in inputs:
        if source and is_inside(source, folder):
            raise ConfigError(
                f"{folder}: holds the run's input {source}; nothing was written: choose another --output-dir"
            )
    _check_is_run(folder, _names(folder), settings)


def prepare_run_folder(
    folder: str, settings: dict, overwrite: bool = False, inputs: Optional[dict] = None
) -> Optional[str]:
    """Say how a run with ``settings`` starts in ``folder``, checked and locked by the caller, and
    write the marker of a run that starts anew, with ``inputs`` ({path: fingerprint}).

    Returns a note for the user, or None for a new run in a new or empty folder. Raises
    ConfigError, having written nothing, for a finished run without ``overwrite``, for an
    unfinished run whose settings differ from these in what training computes, and for one
    whose input files changed since it started.
    """
    names = _names(folder)
    _check_is_run(folder, names, settings)
    if not names:
        _start(folder, inputs)
        return None
    if overwrite:
        _remove_run_outputs(folder)
        _start(folder, inputs)
        return "--overwrite: the earlier run's outputs in this folder were removed; training from scratch"
    if METRICS in names:
        raise ConfigError(
            f"{folder}: holds a finished run (metrics.json); nothing was written: pass --overwrite "
            "to train it again from scratch, or choose another --output-dir"
        )
    backup = os.path.join(folder, BACKUP)
    if not (os.path.isdir(backup) and os.listdir(backup)):
        _remove_run_outputs(folder)
        _start(folder, inputs)
        return (
            "an unfinished run here left no training state to resume; its outputs were removed, training from scratch"
        )
    saved = _comparable(read_json(os.path.join(folder, RUN_CONFIG), "the run's settings (config.json)"))
    current = _comparable(settings)
    differences = [
        f"{key} {saved.get(key)!r} there, {current.get(key)!r} now"
        for key in sorted(set(saved) | set(current))
        if saved.get(key) != current.get(key) and not (key in RESUMABLE_CHANGES and RESUMABLE_CHANGES[key](current))
    ]
    if (current["epochs"] or 0) < (saved.get("epochs") or 0):
        differences.append(f"epochs {saved.get('epochs')} there, {current['epochs']} now (may only grow)")
    if differences:
        raise ConfigError(
            f"{folder}: holds an unfinished run with other settings ({'; '.join(differences)}); "
            "nothing was written: resume it with its own settings, or pass --overwrite to start again"
        )
    marker = os.path.join(folder, RUN_MARKER)
    recorded = json_field(read_json(marker, "the run's marker"), "inputs", dict, marker, default={})
    paths = sorted(set(recorded) | set(inputs or {}))
    changed = [
        _change(p, p in recorded, p in inputs) for p in paths if inputs is not None and recorded.get(p) != inputs.get(p)
    ]
    if changed:
        raise ConfigError(
            f"{folder}: holds an unfinished run whose input files differ now ({'; '.join(changed)}); nothing was "
            "written: put them back as they were to resume it, or pass --overwrite to train from scratch"
        )
    changed = [
        f"{key} {saved.get(key)!r} -> {current.get(key)!r}"
        for key in RESUMABLE_CHANGES
        if key != "output_dir" and saved.get(key) != current.get(key)
    ]
    return "resuming the unfinished run in this folder" + (f" with {', '.join(changed)}" if changed else "")


def take_run_folder(
    folder: str, settings: dict, paths: list, checkpoint: Optional[str], overwrite: bool, held: contextlib.ExitStack
) -> Optional[str]:
    """A run's start in ``folder``, as both Kerases' trainers take it: checked
    (:func:`check_run_folder`, before any lock, so that a refused folder gets none; ``paths``, the
    files the run reads, and its ``checkpoint`` may not lie inside it), locked until ``held``
    closes, and prepared (:func:`prepare_run_folder`, with the fingerprints of ``paths``).

    Returns:
        :func:`prepare_run_folder`'s note, or None for a new run in a new or empty folder.

    Raises:
        ConfigError: as :func:`check_run_folder` and :func:`prepare_run_folder`, or another run
            holds the folder's lock.
    """
    check_run_folder(folder, (*paths, checkpoint), settings)
    inputs = fingerprints(paths)
    held.enter_context(folder_lock(folder, "training run"))
    start = prepare_run_folder(folder, settings, overwrite, inputs)
    _adopt_validation_record(folder)
    return start


def _adopt_validation_record(folder: str) -> None:
    """An unfinished run of an earlier Keras 3 trainer kept its validations in ``validation.json``
    (VALIDATION_STATE): they become the rows of ``valid_metrics.csv``, which the run resumes from (the
    rows' training loss, which that file does not hold, left out)."""
    old, new = os.path.join(folder, VALIDATION_STATE), os.path.join(folder, VALID_METRICS)
    if not os.path.exists(old) or os.path.exists(new):
        return
    record = read_json(old, "the run's validation record")
    write_history(new, [{key: value for key, value in row.items() if key != "loss"} for row in record["history"]])
    os.remove(old)
