"""The process environment TensorFlow must find when it is first imported, and the one rule that
depends on it: whether a model's weights may change in this process.

Imports nothing heavy, so that ``import cosent_tf`` can set the environment up before the
user's ``import tensorflow``. Why each variable is set: docs/platform.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from .choices import CPU_DEVICES_VARIABLE
from .errors import ConfigError

# tf.keras (and so bert4keras's Keras) is resolved on first use of tf.keras, from TF_USE_LEGACY_KERAS
# then: set here, it holds even where tensorflow (or Keras 3 on its TensorFlow backend) was imported
# first, unless tf.keras was already used; cosent_tf.backend refuses that case by name. Keras 3
# itself (the cosent_tf.keras3 route) does not read the variable.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")

# -- logical CPU devices (COSENT_TF_CPU_DEVICES) ---------------------------------------------------

# JAX's CPU has as many devices as this XLA flag says, read from XLA_FLAGS once, when JAX's backend
# starts: so the split JAX's --strategy mirrored runs on (Keras 3) is asked for here, at import,
# where TensorFlow's is made by split_cpu. TensorFlow's XLA accepts the flag and leaves it unused.
XLA_CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def xla_flags_with_cpu_devices(environ: Mapping[str, str]) -> str | None:
    """``XLA_FLAGS`` with :data:`XLA_CPU_DEVICES_FLAG` set to ``COSENT_TF_CPU_DEVICES``'s number; None
    where it stays as it is: the variable unset or no number (:func:`split_cpu` refuses that when a
    strategy is made), or XLA_FLAGS already naming a count, the user's own.

    Example:
        >>> xla_flags_with_cpu_devices({"COSENT_TF_CPU_DEVICES": "2"})
        '--xla_force_host_platform_device_count=2'
    """
    wanted, flags = environ.get(CPU_DEVICES_VARIABLE, ""), environ.get("XLA_FLAGS", "")
    if not wanted.isdigit() or int(wanted) < 1 or XLA_CPU_DEVICES_FLAG in flags:
        return None
    return f"{flags} {XLA_CPU_DEVICES_FLAG}={int(wanted)}".strip()


_xla_flags = xla_flags_with_cpu_devices(os.environ)
if _xla_flags is not None:
    os.environ["XLA_FLAGS"] = _xla_flags

# -- frozen weights (docs/performance.md, 'Frozen weights') ---------------------------------------

# When it is set, TensorFlow's fused oneDNN matmuls reorder their weights once, on first use, and
# keep that copy: a model trained in the process would go on computing with its first weights.
# TensorFlow reads it once a process, so its value when cosent_tf was imported counts too.
FROZEN_WEIGHTS_VARIABLE = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"
FROZEN_WEIGHTS_AT_IMPORT = os.environ.get(FROZEN_WEIGHTS_VARIABLE)

# Commands of the cosent-tf script that only run models forward: their processes never change
# a model's weights.
INFERENCE_COMMANDS = ("evaluate", "encode", "similarity", "search")


def keras3_process() -> bool:
    """Whether this process holds Keras 3: it imported :mod:`cosent_tf.keras3`, or Keras 3 itself and
    not the Keras 2 engine. A module both routes use then imports what it needs without
    :mod:`cosent_tf.backend`, which would point ``keras`` at tf-keras (bert4keras does).

    Example:
        >>> keras3_process()  # doctest: +SKIP
        False
    """
    if "cosent_tf.keras3" in sys.modules:
        return True
    keras = sys.modules.get("keras")
    return "cosent_tf.backend" not in sys.modules and str(getattr(keras, "__version__", "")).startswith("3.")


def weights_assumed_frozen() -> bool:
    """Whether TensorFlow's oneDNN matmuls may take their weights for constants in this process.

    Returns:
        True where ``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS`` is 1 or true now, or was when cosent_tf
        was imported.

    Example:
        >>> weights_assumed_frozen()  # doctest: +SKIP
        False
    """
    values = (FROZEN_WEIGHTS_AT_IMPORT, os.environ.get(FROZEN_WEIGHTS_VARIABLE))
    return any((value or "").strip().lower() in ("1", "true") for value in values)


def check_weights_may_change() -> None:
    """Refuse to train where training could not change what the model computes.

    Raises:
        ConfigError: :func:`weights_assumed_frozen` is true.

    Example:
        >>> check_weights_may_change()  # doctest: +SKIP
    """
    if weights_assumed_frozen():
        raise ConfigError(
            f"{FROZEN_WEIGHTS_VARIABLE} is set in this process, so TensorFlow would keep computing "
            "with the first weights it saw and training would not change the model: it is for processes that "
            "only encode or serve; train without it"
        )


def keeps_weights_in_amx_layout(args: Any, cpu_flags: Collection[str], environ: Mapping[str, str]) -> bool:
    """Whether a ``cosent-tf`` process should set ``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1``.

    It should for an inference command in bf16, on a CPU with AMX, where the user has not set
    the variable either way: oneDNN then keeps each Dense layer's weights in the layout its AMX
    kernel needs. Elsewhere, and in float32, it gains nothing measured consistently (see
    docs/performance.md, 'Frozen weights').

    Args:
        args: the parsed command line (its ``command`` and ``precision``).
        cpu_flags: this CPU's extensions (:func:`cpu_flags`).
        environ: the process environment.

    Returns:
        Whether to set it.

    Example:
        >>> from types import SimpleNamespace
        >>> keeps_weights_in_amx_layout(SimpleNamespace(command="encode", precision="bf16"), {"amx_bf16"}, {})
        True
    """
    return (
        args.command in INFERENCE_COMMANDS
        and args.precision == "bf16"
        and "amx_bf16" in cpu_flags
        and environ.get(FROZEN_WEIGHTS_VARIABLE) is None
    )


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The instruction-set extensions this CPU has, as Linux's ``cpuinfo`` names them.

    Args:
        cpuinfo: the file to read.

    Returns:
        Flags such as ``amx_bf16`` and ``avx512_bf16``; empty where that file is missing.

    Example:
        >>> "amx_bf16" in cpu_flags()  # doctest: +SKIP
        True
    """
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1] for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return frozenset(flags.split())


def split_jax_cpu_checked(devices: Collection[Any]) -> None:
    """Make sure JAX's ``devices`` are the ``COSENT_TF_CPU_DEVICES`` logical CPU devices asked for,
    where they are CPU devices: JAX takes the split only from XLA_FLAGS when its backend starts
    (set when cosent_tf was imported). Nothing when the variable is unset or JAX runs on accelerators.

    Raises:
        ConfigError: the variable is not a positive number, or JAX had started with another number
            of CPU devices (JAX used before cosent_tf was imported, or XLA_FLAGS naming another count).
    """
    wanted = os.environ.get(CPU_DEVICES_VARIABLE)
    if not wanted:
        return
    if not wanted.isdigit() or int(wanted) < 1:
        raise ConfigError(f"{CPU_DEVICES_VARIABLE}={wanted!r}: give a number of devices, 1 or more")
    cpus = [device for device in devices if getattr(device, "platform", "") == "cpu"]
    if len(cpus) == len(devices) and len(cpus) != int(wanted):
        raise ConfigError(
            f"{CPU_DEVICES_VARIABLE}={wanted}, but JAX had started with {len(cpus)} CPU device(s) "
            f"(XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}): import cosent_tf before using JAX, and leave "
            f"{XLA_CPU_DEVICES_FLAG} out of XLA_FLAGS"
        )


def split_cpu(tf: Any) -> None:
    """Split the CPU into ``COSENT_TF_CPU_DEVICES`` logical devices of TensorFlow (``tf``), which a
    MirroredStrategy uses as that many replicas (:mod:`cosent_tf.training.distribute`): a way to try,
    and test, training on several devices without accelerators. Nothing when the variable is unset.

    Raises:
        ConfigError: the variable is not a positive number, or TensorFlow's runtime had started with
            another number of CPU devices (it takes the split only before it starts).
    """
    wanted = os.environ.get(CPU_DEVICES_VARIABLE)
    if not wanted:
        return
    if not wanted.isdigit() or int(wanted) < 1:
        raise ConfigError(f"{CPU_DEVICES_VARIABLE}={wanted!r}: give a number of devices, 1 or more")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * int(wanted))
    except RuntimeError:  # the runtime had started (TensorFlow was used before cosent_tf was imported)
        have = len(tf.config.list_logical_devices("CPU"))
        if have != int(wanted):
            raise ConfigError(
                f"{CPU_DEVICES_VARIABLE}={wanted}, but TensorFlow had already started with {have} CPU device(s): "
                "import cosent_tf before using TensorFlow"
            ) from None


@contextlib.contextmanager
def keras_dtype_policy(keras: Any, policy: str) -> Iterator[None]:
    """Within the block ``keras``'s global dtype policy is ``policy``; the previous one is put back.
    tf-keras and Keras 3 both keep it in ``keras.mixed_precision``."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
