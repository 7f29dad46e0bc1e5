"""Public names that load their module on first use.

The package's ``__init__`` files re-export names this way so that ``import cosent_tf`` and
``cosent-tf --help`` do not import TensorFlow, and so that a name's home can move without
breaking ``from cosent_tf.training import train``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable


def lazy_names(package: str, homes: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names live in its submodules.

    Args:
        package: the package's ``__name__``.
        homes: public name -> the module that defines it, relative to ``package`` (".engine").

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's top level.

    Example:
        >>> __getattr__, __dir__ = lazy_names(__name__, {"train": ".engine"})
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name in homes:
            value = getattr(importlib.import_module(homes[name], package), name)
        elif importlib.util.find_spec(f"{package}.{name}") is not None:  # a submodule
            value = importlib.import_module(f".{name}", package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
