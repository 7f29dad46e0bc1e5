"""Every loss the engine trains with: one entry each, read by the engine, its command line and
the result tables. Adding a loss is one entry in :data:`LOSSES`.

The table is plain data: a row's factories import their Keras classes when first called, so
that reading the names and rows (the run options' parser does, for ``--loss``) imports no
TensorFlow.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..choices import BEST_METRICS, FALLBACK_BEST_METRIC, RETRIEVAL_FIGURE
from ..errors import ConfigError
from ..models.kinds import FEATURE as FEATURE_KIND
from ..models.kinds import INTERACTION as INTERACTION_KIND
from ..models.kinds import KINDS

if TYPE_CHECKING:  # the loss modules import Keras, which the table's rows do not need
    from ..process_keras import keras

# The model kinds' table lives with the models; its names are what a loss entry's kind holds.
FEATURE, INTERACTION = FEATURE_KIND.name, INTERACTION_KIND.name


def _imported_when_called(module: str, name: str) -> Callable[..., Any]:
    """A stand-in for the class ``name`` of the loss module ``module`` that imports it on its
    first call and makes an instance, so that a row's factory names its class as it reads."""

    def make(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module, __package__), name)(*args, **kwargs)

    make.__name__ = make.__qualname__ = name
    return make


class LossClasses:
    """The loss classes (:mod:`cosent_tf.losses`, written once over this process's Keras), each
    imported on its first call; a row's ``make`` builds its loss from them."""

    CoSENTLoss = _imported_when_called(".cosent", "CoSENTLoss")
    InteractionCoSENTLoss = _imported_when_called(".interaction_cosent", "InteractionCoSENTLoss")
    CosineMSELoss = _imported_when_called(".mse", "CosineMSELoss")
    ThresholdContrastiveLoss = _imported_when_called(".contrastive", "ThresholdContrastiveLoss")
    SentenceBertSoftmaxLoss = _imported_when_called(".softmax", "SentenceBertSoftmaxLoss")
    SentenceBertHead = _imported_when_called(".softmax", "SentenceBertHead")
    MultipleNegativesRankingLoss = _imported_when_called(".mnrl", "MultipleNegativesRankingLoss")
    AnglELoss = _imported_when_called(".angle", "AnglELoss")
    CoSENTIBNLoss = _imported_when_called(".cosent_ibn", "CoSENTIBNLoss")


# What a loss's batches hold: interleaved (or concatenated) labelled pairs, or groups of an anchor,
# its positive and its hard negatives (MultipleNegativesRankingLoss's layout).
PAIRS, GROUPS = "pairs", "groups"
# The in-batch softmax directions of ``--symmetric``: each anchor picks its positive, and each
# positive its anchor (sentence-transformers' names).
ONE_WAY, BOTH_WAYS = ("query_to_doc",), ("query_to_doc", "doc_to_query")
# The cosent-ibn mix's default weights (cosine, in-batch, angle): CoSENTIBNLoss's own.
MIX_WEIGHTS = (0.0, 20.0, 1.0)


@dataclasses.dataclass(frozen=True)
class LossEntry:
    """One training objective.

    Attributes:
        name: the ``--loss`` value (unique per kind).
        kind: the model it trains: ``feature`` (a siamese encoder, batches of interleaved
            sentences) or ``interaction`` (a cross-encoder, batches of concatenated pairs).
        title: its name in result tables.
        make: ``make(losses, scale=, epsilon=, max_label=, positive_above=, global_batch=, group_size=,
            symmetric=, weights=)`` -> the loss made from the classes of ``losses``
            (:class:`LossClasses`, which :meth:`build` passes); it names the options it reads
            (:attr:`reads`) and takes the others as ``**_``.
        on_classes: trained on class labels (a task's graded scores are split first).
        training_head: a layer factory ``(num_classes) -> layer`` put on a feature
            model's output for training only (the encoder is still scored by cosine).
        interaction_head: the head of the interaction model it trains (``score`` or
            ``softmax``, see :func:`cosent_tf.models.builders.build_interaction_model`).
        batch_size: the original script's batch size when it is not the task's default.
        min_pairs: the fewest pairs (or examples) a batch must hold for the loss to learn
            anything; each replica's share, for a loss that ranks each replica's pairs alone.
        batch_role: what the loss does with a batch's pairs, which is why it needs ``min_pairs``.
        examples: what a batch holds: :data:`PAIRS` (labelled pairs) or :data:`GROUPS` (an
            anchor, its positive and its hard negatives, without labels).
        in_batch: each anchor takes the other texts of its batch as negatives, so a text twice in
            a batch is a false negative (the batches keep duplicates apart).
        ranks_labels: the loss ranks the pairs of a batch by their labels, so pairs that all have
            one label give it nothing to learn.
        feature_only_because: for a feature loss that an interaction model cannot train with,
            why not (said when it is asked for with ``--kind interaction``).
        mix_weights: for a weighted mix (cosine, in-batch, angle), its default weights, which
            ``build(weights=)`` replaces.
        best_metric: the valid figure that picks the best epoch by default (a name of
            :data:`cosent_tf.choices.BEST_METRICS`, ``--best-metric`` chooses another): what the loss
            trains for, Spearman for a loss that scores pairs, MRR@10 for one that trains a search
            (each anchor picking its positive among the batch's texts).
    """

    name: str
    kind: str
    title: str
    make: Callable[..., keras.losses.Loss]
    on_classes: bool = False
    training_head: Optional[Callable[[int], keras.layers.Layer]] = None
    interaction_head: Optional[str] = None
    batch_size: Optional[int] = None
    min_pairs: int = 1
    batch_role: str = "ranks the pairs of a batch against each other"
    examples: str = PAIRS
    in_batch: bool = False
    ranks_labels: bool = False
    feature_only_because: str = ""
    mix_weights: Optional[tuple[float, float, float]] = None
    best_metric: str = "spearman"

    def build(self, **options: Any) -> keras.losses.Loss:
        """The loss of this row, on this process's Keras, with the run's ``options`` (see ``make``)."""
        return self.make(LossClasses, **options)

    def check_batch(self, batch_size: int, replicas: int = 1, global_batch: bool = True) -> None:
        """Raise ConfigError if batches of ``batch_size`` pairs, shared by ``replicas`` (each ranking
        its own share unless ``global_batch``), give this loss nothing to learn from."""
        share = batch_size if global_batch or replicas == 1 else batch_size // replicas
        if share >= self.min_pairs:
            return
        if share == batch_size:
            raise ConfigError(
                f"--batch-size {batch_size}: the {self.name} loss {self.batch_role}, so a batch of fewer than "
                f"{self.min_pairs} {self.unit} gives a loss of 0 at every step and the model never changes; pass "
                f"--batch-size {self.min_pairs} or more"
            )
        raise ConfigError(
            f"--batch-size {batch_size} with --per-replica-loss gives each of the {replicas} replicas {share} "
            f"{self.unit if share != 1 else self.unit[:-1]}, and the {self.name} loss {self.batch_role} "
            f"within each replica's share alone, so it needs at least {self.min_pairs} there (else its loss is 0 "
            f"at every step); pass --batch-size "
            f"{self.min_pairs * replicas} or more, or leave out --per-replica-loss"
        )

    @property
    def reads(self) -> frozenset[str]:
        """The run options this loss reads: the names ``make`` takes (``scale``, ``epsilon``,
        ``global_batch`` ...), each of the others being one it ignores, which a run that gives it is
        refused for (:meth:`cosent_tf.training.config.RunConfig.resolve`).

        Example:
            >>> sorted(LOSSES["feature", "contrastive"].reads)
            ['epsilon', 'positive_above']
        """
        _, *options = inspect.signature(self.make).parameters.values()  # the first: the loss classes
        return frozenset(option.name for option in options if option.kind is not option.VAR_KEYWORD)

    @property
    def matryoshka_problem(self) -> str:
        """Why :class:`~cosent_tf.losses.matryoshka.MatryoshkaLoss` cannot wrap this loss; empty when it can
        (a feature loss that reads the sentence vectors themselves)."""
        if self.kind != FEATURE:
            return "an interaction model scores a pair at once, without a sentence vector to cut"
        if self.training_head is not None:
            return f"the {self.title} loss trains a head on the whole vector, not the vector's own cosines"
        return ""

    def chosen_best_metric(self, asked: Optional[str] = None, no_retrieval_because: str = "") -> tuple[str, str]:
        """The valid figure that picks a run's best epoch, and a line that tells the user which and why.

        Args:
            asked: ``--best-metric``; None for this loss's :attr:`best_metric`.
            no_retrieval_because: why a retrieval figure cannot be computed on the run's valid pairs
                (an interaction model, no positive pair); empty when it can.

        Returns:
            ``(metric, line)``: the metric asked for or the loss's default, or
            :data:`~cosent_tf.choices.FALLBACK_BEST_METRIC` (said in the line) when that is a
            retrieval figure and ``no_retrieval_because`` says why there is none.

        Example:
            >>> LOSSES["feature", "mnrl"].chosen_best_metric()[0]
            'mrr@10'
        """
        metric = asked or self.best_metric
        why = "--best-metric" if asked else f"the {self.name} loss's default; --best-metric chooses another"
        if BEST_METRICS[metric] == RETRIEVAL_FIGURE and no_retrieval_because:
            return FALLBACK_BEST_METRIC, (
                f"the best epoch is the one of the highest valid {FALLBACK_BEST_METRIC}: {metric} ({why}) is a "
                f"retrieval figure over the valid pairs, and {no_retrieval_because}"
            )
        return metric, f"the best epoch is the one of the highest valid {metric} ({why})"

    @property
    def unit(self) -> str:
        """What ``--batch-size`` counts for this loss: ``pairs`` or ``examples``."""
        return "examples" if self.examples == GROUPS else "pairs"


def _sentence_bert_head(num_classes: int) -> keras.layers.Layer:
    return LossClasses.SentenceBertHead(num_classes, name="SentenceBert-Head")


def _cross_entropy(losses: Any, **_: Any) -> keras.losses.Loss:
    from ..process_keras import keras

    return keras.losses.SparseCategoricalCrossentropy()


LOSSES = {
    (entry.kind, entry.name): entry
    for entry in (
        LossEntry(
            "cosent",
            FEATURE,
            "CoSENT",
            lambda losses, scale, global_batch=True, **_: losses.CoSENTLoss(scale, global_batch),
            min_pairs=2,
            ranks_labels=True,
        ),
        LossEntry(
            "sbert",
            FEATURE,
            "Sentence-BERT",
            lambda losses, **_: losses.SentenceBertSoftmaxLoss(),
            on_classes=True,
            training_head=_sentence_bert_head,
        ),
        LossEntry(
            "mse",
            FEATURE,
            "MSE",
            lambda losses, max_label, **_: losses.CosineMSELoss(max_label=max_label),
        ),
        LossEntry(
            "contrastive",
            FEATURE,
            "Contrastive",
            lambda losses, epsilon, positive_above, **_: losses.ThresholdContrastiveLoss(
                epsilon, positive_above=positive_above
            ),
        ),
        LossEntry(
            "mnrl",
            FEATURE,
            "MNRL",
            lambda losses, scale, group_size=2, symmetric=False, global_batch=True, **_: (
                losses.MultipleNegativesRankingLoss(
                    scale, group_size, BOTH_WAYS if symmetric else ONE_WAY, global_batch=global_batch
                )
            ),
            min_pairs=2,
            batch_role="takes the other examples of a batch as each anchor's negatives",
            examples=GROUPS,
            in_batch=True,
            best_metric="mrr@10",
            feature_only_because=(
                "in-batch negatives compare each anchor's sentence vector with the vectors of the other texts "
                "of its batch, and an interaction model scores a pair at once, without a vector per text"
            ),
        ),
        LossEntry(
            "angle",
            FEATURE,
            "AnglE",
            lambda losses, scale, global_batch=True, **_: losses.AnglELoss(scale, global_batch),
            min_pairs=2,
            ranks_labels=True,
            feature_only_because=(
                "AnglE ranks pairs by the angle between their two sentence vectors, and an interaction model "
                "scores a pair at once, without a vector per text"
            ),
        ),
        LossEntry(
            "cosent-ibn",
            FEATURE,
            "CoSENT + IBN + AnglE",
            lambda losses, scale, positive_above, weights=MIX_WEIGHTS, symmetric=False, global_batch=True, **_: (
                losses.CoSENTIBNLoss(
                    *weights,
                    cosine_scale=scale,
                    ibn_scale=scale,
                    angle_scale=scale,
                    positive_above=positive_above,
                    directions=BOTH_WAYS if symmetric else ONE_WAY,
                    global_batch=global_batch,
                )
            ),
            min_pairs=2,
            in_batch=True,
            ranks_labels=True,
            mix_weights=MIX_WEIGHTS,
            best_metric="mrr@10",  # its default weights are mostly the in-batch negatives'
            feature_only_because=(
                "its in-batch negatives and angle compare sentence vectors, and an interaction model scores a "
                "pair at once, without a vector per text"
            ),
        ),
        LossEntry(
            "ce",
            INTERACTION,
            "CE",
            _cross_entropy,
            on_classes=True,
            interaction_head="softmax",
        ),
        LossEntry(
            "cosent",
            INTERACTION,
            "CoSENT",
            lambda losses, global_batch=True, **_: losses.InteractionCoSENTLoss(global_batch),
            interaction_head="score",
            batch_size=64,
            min_pairs=2,
            ranks_labels=True,
        ),
    )
}


def loss_names(kind: str) -> tuple[str, ...]:
    """The ``--loss`` values of one model kind."""
    return tuple(name for entry_kind, name in LOSSES if entry_kind == kind)


def in_batch_losses() -> tuple[str, ...]:
    """The ``--loss`` values whose batches give each anchor the other texts as negatives."""
    return tuple(name for (_, name), entry in LOSSES.items() if entry.in_batch)


def group_losses() -> tuple[str, ...]:
    """The ``--loss`` values that train on groups (an anchor, its positive, its hard negatives)."""
    return tuple(name for (_, name), entry in LOSSES.items() if entry.examples == GROUPS)


def best_metric_defaults() -> str:
    """The losses' default ``--best-metric``, for its help: ``mrr@10 for --loss mnrl, ...; spearman for the others``."""
    other = {entry.best_metric for entry in LOSSES.values()} - {FALLBACK_BEST_METRIC}
    said = [
        f"{metric} for --loss {', '.join(dict.fromkeys(n for (_, n), e in LOSSES.items() if e.best_metric == metric))}"
        for metric in sorted(other)
    ]
    return "; ".join([*said, f"{FALLBACK_BEST_METRIC} for the others"])


def mix_losses() -> tuple[str, ...]:
    """The ``--loss`` values that are a weighted mix (``--cosine-weight`` ...)."""
    return tuple(name for (_, name), entry in LOSSES.items() if entry.mix_weights is not None)


def get_loss(kind: str, name: str) -> LossEntry:
    """The :class:`LossEntry` of ``name`` for ``kind`` models; a ConfigError listing the choices otherwise."""
    if (kind, name) not in LOSSES:
        if kind not in KINDS:
            raise ConfigError(f"unknown model kind {kind!r}; choose one of {', '.join(KINDS)}")
        feature_loss = LOSSES.get((FEATURE, name))
        if kind == INTERACTION and feature_loss is not None and feature_loss.feature_only_because:
            raise ConfigError(
                f"--loss {name} trains feature models (sentence encoders) only: {feature_loss.feature_only_because}; "
                f"train a feature model (--kind feature), or an interaction model with one of "
                f"{', '.join(loss_names(kind))}"
            )
        raise ConfigError(f"unknown {kind} loss {name!r}; choose one of {', '.join(loss_names(kind))}")
    return LOSSES[kind, name]
