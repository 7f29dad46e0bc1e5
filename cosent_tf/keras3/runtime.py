"""The Keras 3 that the route runs on: which one is in the process, and what it cannot do.

A process holds one Keras for cosent-tf: bert4keras (under the Keras 2 engine,
:mod:`cosent_tf.backend`) points ``sys.modules["keras"]`` at tf-keras, after which ``import keras``
no longer gives Keras 3. :func:`checked_keras` says so by name instead of failing later.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ..console import tensorflow_start_up_held_back
from ..errors import ConfigError
from ..models.families import ARCHITECTURES, get_architecture


def checked_keras() -> Any:
    """The ``keras`` module of this process, checked to be Keras 3.

    Raises:
        ImportError: ``keras`` here is tf-keras (Keras 2), because the Keras 2 engine or
            bert4keras was imported first, or Keras 3 is not installed.
    """
    if "cosent_tf.backend" in sys.modules or "bert4keras.backend" in sys.modules:
        imported = "cosent_tf's Keras 2 engine" if "cosent_tf.backend" in sys.modules else "bert4keras"
        raise ImportError(
            f"cosent_tf.keras3 needs Keras 3, but {imported} was imported first in this process and points "
            "`keras` at tf-keras (Keras 2): use one Keras per process, and run the Keras 3 code in a process "
            "that has not imported cosent_tf's Keras 2 modules (cosent_tf.backend, models, training, inference)"
        )
    try:
        keras = imported_quietly("keras")
    except ImportError as error:
        raise ImportError(
            f"cosent_tf.keras3 needs Keras 3 and keras-hub: pip install 'cosent-tf[keras3]' ({error})"
        ) from None
    if not str(getattr(keras, "__version__", "0")).startswith("3."):
        raise ImportError(f"cosent_tf.keras3 needs Keras 3, but `keras` in this process is {keras.__name__}")
    return keras


def imported_quietly(name: str) -> Any:
    """The module ``name``, imported on first use with TensorFlow's start-up lines held back, as the
    Keras 2 engine's import of TensorFlow holds them (:func:`cosent_tf.console.tensorflow_start_up_held_back`).

    Keras 3 imports TensorFlow on its TensorFlow backend, and keras-hub on either; where TensorFlow
    came in, its devices are probed within the block too, which is when CUDA's probing speaks."""
    if name in sys.modules:
        return sys.modules[name]
    with tensorflow_start_up_held_back():
        module = importlib.import_module(name)
        if "tensorflow" in sys.modules:
            sys.modules["tensorflow"].config.list_physical_devices()
    return module


# The Keras 3 backends the route is tested on.
BACKENDS = ("tensorflow", "jax")


def backend_name() -> str:
    """The Keras 3 backend this process runs on: ``tensorflow`` or ``jax``.

    Raises:
        ConfigError: another backend (``KERAS_BACKEND=torch``, ``numpy``): the route is not tested there.
    """
    name = str(checked_keras().backend.backend())
    if name not in BACKENDS:
        raise ConfigError(
            f"Keras 3 runs on its {name} backend here (KERAS_BACKEND), on which cosent_tf.keras3 is not tested: "
            f"set KERAS_BACKEND to {' or '.join(BACKENDS)} before keras is imported"
        )
    return name


def accelerated() -> bool:
    """Whether this process's Keras 3 backend computes on an accelerator (a GPU or TPU), not the CPU alone."""
    if backend_name() == "jax":
        import jax

        return any(device.platform != "cpu" for device in jax.devices())
    # the physical devices: listing the logical ones starts TensorFlow's runtime, after which the CPU
    # can no longer be split (COSENT_TF_CPU_DEVICES) for a mirrored strategy
    return bool(imported_quietly("tensorflow").config.list_physical_devices("GPU"))


def keras_hub_backbone(architecture: str) -> str:
    """The keras-hub backbone class that ``architecture`` is built on in the Keras 3 route.

    Raises:
        ConfigError: an unknown architecture, or one only the Keras 2 engine has (bert4keras's
            NEZHA, RoFormer, WoBERT).
    """
    backbone = get_architecture(architecture).keras_hub_backbone
    if backbone is None:
        on_keras3 = sorted(name for name, row in ARCHITECTURES.items() if row.keras_hub_backbone)
        raise ConfigError(
            f"architecture {architecture!r} is on the Keras 2 engine only (bert4keras builds it; keras-hub has no "
            f"such backbone): train and serve it with cosent-tf's Keras 2 commands. The Keras 3 route takes "
            f"{', '.join(on_keras3)}"
        )
    return backbone
