"""The kinds of model a matcher can be, as a table beside the tasks, losses and architectures.

A *feature* model (a siamese sentence encoder) turns each text into a vector and scores a pair
by the cosine of its two vectors; an *interaction* model (a cross-encoder) reads the two texts
of a pair together and scores them with a head. Everything that differs between the two at the
models layer is a field of :class:`ModelKind`; the layers above keep their own behaviour in a
small table keyed by :attr:`ModelKind.name` (as :data:`cosent_tf.inference.matchers.MATCHERS`
does, and :data:`cosent_tf.models.builders.BUILDERS` for the builder of each kind). Adding a kind
is one entry in :data:`KINDS` and one per such table.

This module is the floor of :mod:`cosent_tf.models`: plain data that imports no module of the
package above :mod:`cosent_tf.errors` and :mod:`cosent_tf.choices`, and no TensorFlow, so that the
spec, the sources, the builders and the run options' parser can all read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..choices import POOLING_MODES
from ..errors import ConfigError, lookup

# An interaction model's heads: one unbounded score, or the two-way softmax of the
# cross-entropy baseline.
INTERACTION_HEADS = ("score", "softmax")
# Each head's Dense layer on the pair's features, on both Kerases: (units, activation).
HEAD_LAYERS = {"score": (1, None), "softmax": (2, "softmax")}
# What an interaction head reads: the [CLS] hidden state (the original experiments), or BERT's
# pooler, dense + tanh on it (Hugging Face's BertForSequenceClassification).
HEAD_INPUTS = ("cls", "pooler")


def head_layer_name(head: str) -> str:
    """The Keras layer name of an interaction head (``Match-Score`` / ``Match-Softmax``), which its
    weights are saved under (``cosent/<name>/kernel``) by both Kerases.

    Example:
        >>> head_layer_name("score")
        'Match-Score'
    """
    return "Match-" + head.capitalize()


@dataclasses.dataclass(frozen=True)
class ModelKind:
    """One kind of model.

    Args:
        name: the ``--kind`` value and the ``kind`` of ``cosent_model.json``.
        rows_per_pair: the model's input rows per pair: 2 (the two sentences, interleaved) or
            1 (the concatenated pair).
        scored_by: how a pair is scored: ``cosine`` of two vectors or the model's ``head``.
        task_maxlen: the :class:`~cosent_tf.data.tasks.Task` field holding its default maxlen.
        output_prefix: what a run's default output folder name starts with.
        trains_on_nli: whether it can be trained on NLI (all matching tasks at once).
        sentence_vectors: whether it gives sentence vectors (and so retrieval and search).
        spec_field: the :class:`~cosent_tf.models.spec.ModelSpec` field that says how it scores
            (``pooling`` or ``head``), and ``spec_choices`` the values that field may take.
        described: what the kind is, in words, for a message that refuses the other kind.

    Example:
        >>> get_kind("interaction").rows_per_pair
        1
    """

    name: str
    rows_per_pair: int
    scored_by: str
    task_maxlen: str
    output_prefix: str
    trains_on_nli: bool
    sentence_vectors: bool
    spec_field: str
    spec_choices: tuple[str, ...]
    described: str

    @property
    def concatenated_pairs(self) -> bool:
        """Whether a pair is one input row (the two texts joined by [SEP])."""
        return self.rows_per_pair == 1

    def maxlen(self, task: Any) -> int:
        """The default maxlen of ``task`` (a :class:`~cosent_tf.data.tasks.Task`) for this kind."""
        return int(getattr(task, self.task_maxlen))

    def check_spec(self, spec: Any, where: str) -> None:
        """Raise ConfigError naming ``where`` unless ``spec`` says how this kind scores
        (a feature model's pooling, an interaction model's head) with a value it knows.
        ``spec`` is a :class:`~cosent_tf.models.spec.ModelSpec` (which sits above this module).

        Example:
            >>> get_kind("feature").check_spec(ModelSpec("feature", pooling="nope"), "x")  # doctest: +SKIP
            Traceback (most recent call last):
            ConfigError: x: pooling 'nope' is not one of cls, ...
        """
        value = getattr(spec, self.spec_field)
        if value in self.spec_choices:
            return
        if self.spec_field == "head":
            raise ConfigError(f"{where}: an {self.name} model needs head in {self.spec_choices}, got {value!r}")
        raise ConfigError(f"{where}: {self.spec_field} {value!r} is not one of {', '.join(self.spec_choices)}")


FEATURE = ModelKind(
    "feature",
    rows_per_pair=2,
    scored_by="cosine",
    task_maxlen="maxlen",
    output_prefix="",
    trains_on_nli=True,
    sentence_vectors=True,
    spec_field="pooling",
    spec_choices=tuple(POOLING_MODES),
    described="a feature model (a bi-encoder: a vector per text, compared by cosine)",
)
INTERACTION = ModelKind(
    "interaction",
    rows_per_pair=1,
    scored_by="head",
    task_maxlen="interaction_maxlen",
    output_prefix="interact-",
    trains_on_nli=False,
    sentence_vectors=False,
    spec_field="head",
    spec_choices=tuple(INTERACTION_HEADS),
    described="an interaction model (a cross-encoder: it scores the two texts of a pair together)",
)
KINDS = {kind.name: kind for kind in (FEATURE, INTERACTION)}


def get_kind(name: str) -> ModelKind:
    """The :class:`ModelKind` called ``name``.

    Args:
        name: ``feature`` or ``interaction``.

    Returns:
        Its entry of :data:`KINDS`.

    Raises:
        ConfigError: no such kind; the message lists the kinds.

    Example:
        >>> get_kind("feature").scored_by
        'cosine'
    """
    return lookup(KINDS, name, "model kind")
