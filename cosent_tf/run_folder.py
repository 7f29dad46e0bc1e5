"""A training run's output folder: what it holds, and the rules for starting, resuming or
replacing a run in it.

A run writes its outputs (:data:`RUN_OUTPUTS`) into one folder. A folder holding a finished
run (``metrics.json``) is trained over only with ``overwrite``, which first removes that
run's outputs; an unfinished run is resumed only with the settings it was started with
(``epochs`` may grow; evaluation and backup frequencies may change). A folder holding one
of the run's inputs, or anything but a cosent-tf run, is refused.
"""

import json
import os
import shutil

from .errors import ConfigError
from .io import FolderKind, is_inside

# What a run writes into its output folder (see cosent_tf.training), and the folder itself.
RUN_OUTPUTS = (
    "config.json",
    "best.weights.h5",
    "valid_metrics.csv",
    "valid_curve.png",
    "test_scores.npz",
    "model",
    "metrics.json",
    "backup",
)
RUN_FOLDER = FolderKind("a cosent-tf training run", "config.json", RUN_OUTPUTS + (".lock", ".tmp-*", ".old-*"))
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
PATH_SETTINGS = ("data_dir", "config", "checkpoint", "vocab")
# Settings that were saved under another name by earlier versions: {old: new}.
RENAMED_SETTINGS = {"model": "architecture"}


def _comparable(settings):
    """Settings as config.json holds them, with paths resolved so that spellings compare equal."""
    settings = json.loads(json.dumps(settings))
    for old, new in RENAMED_SETTINGS.items():
        if old in settings:
            settings.setdefault(new, settings.pop(old))
    return {
        key: os.path.realpath(value) if key in PATH_SETTINGS and value else value for key, value in settings.items()
    }


def _remove_run_outputs(folder):
    for name in RUN_OUTPUTS:
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def check_run_folder(folder: str, inputs=()) -> None:
    """Raise ConfigError, writing nothing, if ``folder`` may not hold a run reading ``inputs``.

    Refused: a folder holding one of the run's inputs, or anything but a cosent-tf run.
    Called before the folder is locked, so that a refused folder gets no lock file.
    """
    for source in inputs:
        if source and is_inside(source, folder):
            raise ConfigError(
                f"{folder}: holds the run's input {source}; nothing was written: choose another --output-dir"
            )
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if names not in ([], [".lock"]) and not RUN_FOLDER.holds_only_its_own(names):
        shown = ", ".join(n for n in names if n != ".lock")
        raise ConfigError(
            f"{folder}: already exists and is not a cosent-tf training run (it holds {shown}); "
            "nothing was written: choose a new or empty --output-dir"
        )


def prepare_run_folder(folder: str, settings: dict, overwrite: bool = False):
    """Say how a run with ``settings`` starts in ``folder``, checked and locked by the caller.

    Returns a note for the user, or None for a new run in a new or empty folder. Raises
    ConfigError, having written nothing, for a finished run without ``overwrite`` and for
    an unfinished run whose settings differ from these in what training computes.
    """
    names = sorted(os.listdir(folder))
    if names in ([], [".lock"]):
        return None
    if overwrite:
        _remove_run_outputs(folder)
        return "--overwrite: the earlier run's outputs in this folder were removed; training from scratch"
    if "metrics.json" in names:
        raise ConfigError(
            f"{folder}: holds a finished run (metrics.json); nothing was written: pass --overwrite "
            "to train it again from scratch, or choose another --output-dir"
        )
    backup = os.path.join(folder, "backup")
    if not (os.path.isdir(backup) and os.listdir(backup)):
        _remove_run_outputs(folder)
        return (
            "an unfinished run here left no training state to resume; its outputs were removed, training from scratch"
        )
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        saved = _comparable(json.load(f))
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
    changed = [
        f"{key} {saved.get(key)!r} -> {current.get(key)!r}"
        for key in RESUMABLE_CHANGES
        if key != "output_dir" and saved.get(key) != current.get(key)
    ]
    return "resuming the unfinished run in this folder" + (f" with {', '.join(changed)}" if changed else "")
