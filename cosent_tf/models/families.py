"""The transformer families cosent-tf builds, as a table of plain data: :data:`ARCHITECTURES`.

Each row names its bert4keras class rather than holding it, so that reading the table (the run
options' parser lists its names for ``--architecture``) imports neither bert4keras nor
TensorFlow; :func:`cosent_tf.models.architectures.transformer_class` resolves the name when a
model is built.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import lookup


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A transformer family ``build_encoder(architecture=...)`` accepts.

    Attributes:
        base: the name of its transformer class in ``bert4keras.models``.
        word_level: its vocabulary is of words (jieba pre-tokenisation, as WoBERT and the
            original RoFormer).
        learned_positions: positions are a table of ``max_position_embeddings`` rows, which
            bounds maxlen.
        first_token_only: its last block can be computed at [CLS] alone (BERT-style blocks
            with absolute positions).
        keras_hub_backbone: the keras-hub backbone class the Keras 3 route builds it on
            (:mod:`cosent_tf.keras3.backbones`), or None where only the Keras 2 engine has it.

    Example:
        >>> ARCHITECTURES["wobert"].word_level
        True
    """

    base: str
    word_level: bool = False
    learned_positions: bool = True
    first_token_only: bool = True
    keras_hub_backbone: Optional[str] = None


ARCHITECTURES = {
    "bert": Architecture("BERT", keras_hub_backbone="BertBackbone"),
    "roberta": Architecture("BERT", keras_hub_backbone="BertBackbone"),  # RoBERTa-wwm checkpoints are BERT format
    "wobert": Architecture("BERT", word_level=True),
    "nezha": Architecture("NEZHA", learned_positions=False, first_token_only=False),
    # one block shared by all depths
    "albert": Architecture("ALBERT", first_token_only=False, keras_hub_backbone="AlbertBackbone"),
    "roformer": Architecture("RoFormer", word_level=True, learned_positions=False, first_token_only=False),
}


def get_architecture(name: str) -> Architecture:
    """The :class:`Architecture` called ``name``.

    Args:
        name: a key of :data:`ARCHITECTURES`.

    Returns:
        Its row.

    Raises:
        ConfigError: an unknown name; the message lists the choices.

    Example:
        >>> get_architecture("nezha").learned_positions
        False
    """
    return lookup(ARCHITECTURES, name, "architecture", sorted(ARCHITECTURES))
