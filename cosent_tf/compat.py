"""Old names kept working for one release, each with a DeprecationWarning: every
compatibility shim of the package lives here, with the version that removes it.

0.4 moved the flat modules into packages (``cosent_tf.tasks`` is now ``cosent_tf.data.tasks``);
importing an old path gives the module at its new home.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any

REMOVED_IN = "0.5"

# old module (under cosent_tf) -> its home since 0.4
MOVED_MODULES = {
    "tasks": "data.tasks",
    "pipeline": "data.pipeline",
    "tokenization": "models.tokenization",
    "checkpoints": "models.checkpoints",
    "recipes": "training.recipes",
    "run_folder": "training.run_folder",
    "gradient_cache": "training.gradient_cache",
    "distribute": "training.distribute",
    "model_dir": "inference.model_dir",
    "graph_tokenization": "export.graph_tokenization",
    "report": "experiments.report",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the old module paths with the module at its new home."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != __package__ or name not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module):
        name = module.__name__.rpartition(".")[2]
        home = f"{__package__}.{MOVED_MODULES[name]}"
        warnings.warn(
            f"{module.__name__} moved to {home} in cosent-tf 0.4; the old path goes in {REMOVED_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        # The import system returns what sys.modules holds once exec_module is done: the module
        # itself, so that old and new paths name one module object.
        sys.modules[module.__name__] = importlib.import_module(home)


def install_moved_modules() -> None:
    """Let the old module paths import (done once, by ``import cosent_tf``)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


def renamed_keyword(old: str, new: str, old_value: Any, new_value: Any) -> Any:
    """The value of a keyword argument that was renamed: ``old_value`` when the caller still
    passes the old name (with a DeprecationWarning naming the new one), else ``new_value``.

    Args:
        old: the keyword's former name ("model").
        new: its name now ("architecture").
        old_value: what was passed under the old name; None when it was not passed.
        new_value: what was passed (or defaulted) under the new name.

    Returns:
        The value to use.

    Example:
        >>> renamed_keyword("model", "architecture", None, "bert")
        'bert'
    """
    if old_value is None:
        return new_value
    warnings.warn(f"{old}= is deprecated; use {new}=", DeprecationWarning, stacklevel=3)
    return old_value
