"""The backbone adapter: the few things a model build does differently on each Keras.

Everything above the backbone (the losses, pooling, heads, callbacks, the optimizer, the engine of
:mod:`cosent_tf.training.engine`) is written once over the process's Keras
(:mod:`cosent_tf.process_keras`). What differs is the backbone family: bert4keras on Keras 2
(:mod:`cosent_tf.models.builders`; every architecture) and keras-hub on Keras 3
(:mod:`cosent_tf.keras3.models`; BERT, RoBERTa and ALBERT). Both take their config, vocabulary and
weights from one :class:`~cosent_tf.models.sources.ModelSource` (:func:`~cosent_tf.models.sources.open_source`
is the one place a checkpoint is resolved), build a model from ``[token_ids, segment_ids]`` to
sentence vectors or to an interaction head's output, and give their weights back under Google
checkpoint names, so that the model folder one Keras writes, the other loads.

Each function imports its Keras's implementation on first use: a process holds one Keras.
"""

from __future__ import annotations

from typing import Any, Optional

from ..process_keras import KERAS_MAJOR
from .sources import ModelSource
from .spec import ModelSpec


def build_model(spec: ModelSpec, source: ModelSource, require_head: bool = False) -> Any:
    """The model ``spec`` describes, with ``source``'s weights (random without a checkpoint), on this
    process's Keras: inputs ``[token_ids, segment_ids]`` (int32, (B, T) each), float32 outputs.
    ``require_head``: an interaction head missing from the checkpoint is an error, not a random head
    (a model folder loaded for use).

    Raises:
        ConfigError: a spec the builder refuses (on Keras 3, an architecture keras-hub has no backbone for).
        CheckpointError: the checkpoint does not fit the config.
    """
    if KERAS_MAJOR == 3:
        from ..keras3.models import build_from_spec as keras3_build

        return keras3_build(spec, source, require_head=require_head)
    from .builders import build_from_spec

    if require_head:  # bert4keras's feature builder takes no require_head: passed only when asked for
        return build_from_spec(spec, source, require_head=True)
    return build_from_spec(spec, source)


def model_arrays(model: Any, spec: ModelSpec, config: dict) -> dict:
    """{Google checkpoint name: array} of everything a model folder holds of ``model`` (built by
    :func:`build_model` for ``spec``): the transformer's weights and an interaction head's."""
    if KERAS_MAJOR == 3:
        from ..keras3.models import model_arrays as keras3_arrays

        return keras3_arrays(model, spec)
    from ..inference.model_dir import model_folder_arrays

    return model_folder_arrays(model, spec, config)


def not_decayed_variables(model: Any) -> Optional[list]:
    """The trainable variables of ``model`` that decoupled weight decay skips, for
    :func:`cosent_tf.optimizers.build_optimizer`; None on Keras 2, where the optimizer finds them by
    bert4keras's variable names."""
    if KERAS_MAJOR == 3:
        from ..keras3.models import not_decayed_variables as keras3_not_decayed

        return keras3_not_decayed(model)
    return None
