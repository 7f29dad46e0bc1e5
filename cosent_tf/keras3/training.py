"""Training on Keras 3: ``cosent-tf train --keras 3``, the one engine
(:func:`cosent_tf.training.engine.train`) run in a process that holds Keras 3, on keras-hub backbones
(:mod:`cosent_tf.keras3.models`) on the TensorFlow or JAX backend.

The run reads the same :class:`~cosent_tf.training.config.RunConfig`, writes the same run folder and
model folder as a run on Keras 2, and reports the same metrics; what Keras 3 cannot do
(:func:`cosent_tf.training.keras_support.unsupported_options`) is refused by option name, never
silently ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..calibration import MatchDecision
from ..models.families import get_architecture
from ..models.kinds import FEATURE
from ..models.spec import ModelSpec, write_model_folder
from ..training.config import RunConfig
from ..training.keras_support import unsupported_options  # noqa: F401  (named here as before)


def resolve(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its defaults filled in (:meth:`RunConfig.resolved`, in a process holding Keras 3).

    Raises:
        ConfigError: a number out of range, an unknown task, loss or recipe, an architecture only
            Keras 2 has, or an option Keras 3 cannot honour (named, with why).
    """
    return cfg.resolved()


def train(cfg: RunConfig, overwrite: bool = False, callbacks: Sequence[Any] = ()) -> dict:
    """Train ``cfg`` on Keras 3: :func:`cosent_tf.training.engine.train` (its arguments, results and errors)."""
    from ..training import engine

    return engine.train(cfg, overwrite, callbacks)


def save_model_folder(
    directory: str,
    backbone: Any,
    architecture: str,
    config: dict,
    vocab_path: str,
    *,
    pooling: str,
    maxlen: int,
    do_lower_case: bool,
    has_pooler: bool = True,
    source: Optional[dict] = None,
    overwrite: bool = True,
    decision: Optional[MatchDecision] = None,
) -> None:
    """Write the model folder of a keras-hub ``backbone`` (a feature model), atomically, as
    :func:`cosent_tf.models.spec.write_model_folder` writes every model folder: ``cosent_model.json``,
    ``bert_config.json``, a Google-format ``bert_model.ckpt``, ``vocab.txt`` and, given a ``decision``,
    ``decision.json`` stamped with the weights' fingerprint.

    A keras-hub backbone always has BERT's pooler, random unless its source held one: pass
    ``has_pooler=False`` for such a backbone and the pooler is written only where the pooling reads it
    (:func:`cosent_tf.keras3.models.backbone_arrays`). The default writes the backbone whole."""
    from .models import backbone_arrays

    spec = ModelSpec(
        FEATURE.name,
        architecture,
        pooling=pooling,
        maxlen=int(maxlen),
        do_lower_case=bool(do_lower_case),
        word_level=get_architecture(architecture).word_level,
        source=dict(source or {}),
    )
    arrays = backbone_arrays(backbone, spec, keep_pooler=has_pooler)
    write_model_folder(directory, arrays, spec, config, vocab_path, overwrite, decision)
