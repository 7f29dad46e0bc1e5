"""What a run on Keras 3 cannot do, said once: the options the engine refuses there, with why.

The engine (:mod:`cosent_tf.training.engine`) trains on the process's Keras: tf-keras with bert4keras
backbones, or Keras 3 (``--keras 3``) with keras-hub backbones on the TensorFlow or JAX backend. Every
other option works on both; those listed here are refused by name before anything is read or written,
never silently ignored. The architectures keras-hub has no backbone for are refused by
:func:`cosent_tf.keras3.runtime.keras_hub_backbone`. This module imports no Keras.
"""

from __future__ import annotations

from .config import RunConfig


def unsupported_options(cfg: RunConfig, backend: str, accelerated: bool = False) -> list[str]:
    """Each option of ``cfg`` that a run on Keras 3's ``backend`` cannot honour, with why (empty: all can be);
    ``accelerated``: the backend computes on a GPU or TPU, not on the CPU alone."""
    problems = []
    if cfg.precision == "fp16" and backend == "jax" and not accelerated:
        problems.append(
            "--precision fp16 on the jax backend's CPU: XLA's CPU matrix products take no float16; use bf16, or "
            "KERAS_BACKEND=tensorflow"
        )
    if cfg.strategy == "multi-worker" and backend == "jax":
        problems.append(
            "--strategy multi-worker on the jax backend: its data parallelism (keras.distribution) spans one "
            "machine's devices here (--strategy mirrored); across machines train with the Keras 2 engine"
        )
    if cfg.strategy == "mirrored" and backend == "jax" and not cfg.global_batch_loss:
        problems.append(
            "--per-replica-loss on the jax backend: --strategy mirrored there is one program over the global batch "
            "(keras.distribution), whose loss sees the whole batch, not each device's share"
        )
    return problems
