"""The training engine: one function trains, validates and tests every kind of matcher, on either Keras.

:func:`train` takes a :class:`~cosent_tf.training.config.RunConfig`, reads the run's data
(:mod:`cosent_tf.training.run_data`), builds a :class:`Matcher`, fits it with validation and
backups, tests the best weights and writes the run folder. It runs on the process's Keras
(:mod:`cosent_tf.process_keras`): tf-keras with bert4keras backbones, or Keras 3 with keras-hub
backbones where :mod:`cosent_tf.keras3` was imported first; the backbone is built and saved through
:mod:`cosent_tf.models.adapter`, and what Keras 3 cannot do is refused when the configuration is
resolved (:mod:`cosent_tf.training.keras_support`). What the folder holds, and the
rules for resuming or replacing a run in it, are :mod:`cosent_tf.training.run_folder`'s.
The per-dataset scripts (:mod:`cosent_tf.experiments.scripts`) and ``cosent-tf train`` parse
their options into a RunConfig and call :func:`train`.

A run holds a lock on its folder from the moment it writes to it: a second run aimed at the
same folder stops with an error. Nothing is written before the data, config, vocabulary and
checkpoint have been read and checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from ..callbacks import StartStep, StepBackup, StopOnNonFiniteLoss, ValidationCheckpoint, epoch_progress
from ..choices import BEST_METRICS, PRECISIONS, RETRIEVAL_FIGURE
from ..console import live_progress_on
from ..data.batching import batches_per_epoch, duplicates_moved, text_keys
from ..data.groups import GroupData
from ..data.pairs import PairData
from ..data.pipeline import group_dataset, group_lengths, interaction_dataset, pair_dataset, pair_lengths
from ..data.tasks import CNSD, FILES, Task
from ..errors import ConfigError, NonFiniteLossError, WorkerLostError
from ..evaluation import mean_over_tasks, pair_retrieval, pair_retrieval_sets, pair_scores, task_metrics
from ..inference.runtime import batched_outputs, l2_normalize
from ..io import write_json
from ..losses import get_loss
from ..losses.matryoshka import MatryoshkaLoss
from ..models.adapter import build_model, model_arrays, not_decayed_variables
from ..models.families import get_architecture
from ..models.kinds import get_kind
from ..models.sources import ModelSource
from ..models.spec import ModelSpec, write_model_folder
from ..models.tokenization import SentenceTokenizer
from ..optimizers import build_optimizer
from ..process_keras import KERAS_MAJOR, dtype_policy, keras, random_seed, tf
from .config import RunConfig
from .distribute import fitting, get_strategy, is_chief, partial_batch_note, started_together, worker
from .run_data import check_inputs, load_run_data, run_inputs
from .run_folder import (
    BACKUP,
    BEST_WEIGHTS,
    METRICS,
    MODEL,
    RUN_CONFIG,
    VALID_CURVE,
    VALID_METRICS,
    plot_valid_curve,
)
from .run_results import (  # noqa: F401  (the notes and the summary line are named here too, as before)
    RANDOM_CHECKPOINT_NOTE,
    RANDOM_WEIGHTS_NOTE,
    model_origin,
    run_summary,
    say_random_weights,
    starts_from_random_weights,
    test_and_decide,
)
from .run_rules import take_run_folder

logger = logging.getLogger(__name__)

# Keras 3 on JAX compiles its training step once per batch shape: batch widths rounded up to a
# multiple of this leave few shapes to compile (TensorFlow's step takes any width as it comes).
COMPILED_WIDTH_MULTIPLE = 8


@dataclasses.dataclass
class GroupInputs:
    """The token ids of groups: each example's anchor, positive and hard negatives (any number
    at least ``group_size - 2``; the batches draw that many), and the texts per example."""

    anchors: list
    positives: list
    negatives: list
    group_size: int


def trained_widths(dims: Optional[list[int]], weights: Optional[list[float]]) -> Optional[list[int]]:
    """The widths a Matryoshka loss trains, widest first: those of ``dims`` with a weight above 0
    (all of them without weights); None without ``dims``."""
    if not dims:
        return None
    return sorted((dim for dim, weight in zip(dims, weights or [1.0] * len(dims)) if weight > 0), reverse=True)


def _check_matryoshka_width(dims: list[int], width: int, model: str) -> None:
    """A ConfigError naming ``--matryoshka-dims`` when one of ``dims`` is above ``width``, the
    dimensions of ``model``'s sentence vectors (named in the message)."""
    if max(dims) > width:
        raise ConfigError(
            f"--matryoshka-dims {','.join(map(str, dims))}: {model} makes vectors of {width} dimensions, fewer "
            f"than {max(dims)}; give widths of at most {width}"
        )


class Matcher:
    """A model being trained, with what scoring and batching it need.

    ``model`` is what gets saved and scored: a sentence encoder (feature kind, scored by
    the cosine of the two vectors) or a cross-encoder (interaction kind, scored by its
    head). The loss table entry says how it is trained.
    """

    def __init__(self, cfg: RunConfig, task: Task, source: Optional[ModelSource] = None):
        self.cfg, self.task, self.loss = cfg, task, get_loss(cfg.kind, cfg.loss)
        self.kind = get_kind(cfg.kind)
        if not self.kind.trains_on_nli and self.task.data == CNSD:
            raise ValueError("interaction models are trained on one matching task, not on NLI")
        assert cfg.config is not None and cfg.vocab is not None and cfg.maxlen is not None, "an unresolved RunConfig"
        assert cfg.pooling is not None or cfg.head_input is not None, "an unresolved RunConfig"
        # The run's source (RunConfig.resolve) has read the config, and reads the vocabulary and
        # the checkpoint once; the tokenizer lower-cases as the source does.
        self.source = source if source is not None else cfg.model_source()
        self.source.check_maxlen(cfg.architecture, cfg.maxlen)
        self.tokenizer = SentenceTokenizer(self.source, cfg.maxlen, get_architecture(cfg.architecture).word_level)
        settings: dict[str, Any] = dict(
            maxlen=cfg.maxlen, word_level=self.tokenizer.word_level, do_lower_case=self.tokenizer.do_lower_case
        )
        if self.kind.spec_field == "pooling":
            self.spec = ModelSpec(
                self.kind.name,
                cfg.architecture,
                pooling=cfg.pooling,
                matryoshka_dims=trained_widths(cfg.matryoshka_dims, cfg.matryoshka_weights),
                **settings,
            )
        else:
            head = self.loss.interaction_head
            assert head is not None, "every interaction loss names its head"
            assert cfg.head_input is not None, "a resolved interaction RunConfig names its head input"
            self.spec = ModelSpec(
                self.kind.name,
                cfg.architecture,
                pooling=None,
                head=head,
                head_input=cfg.head_input,
                pair_segments=cfg.head_input == "pooler",  # a Hugging Face style cross-encoder
                **settings,
            )
        self.model = build_model(self.spec, self.source)
        if cfg.matryoshka_dims:
            _check_matryoshka_width(cfg.matryoshka_dims, self.model.output.shape[-1], "this model")
        self.sep_id = self.tokenizer.sep_id if self.spec.pair_segments else None
        # A group loss's texts per example as the run's data resolved them (RunData.group_size),
        # whose resolving said how it was chosen; None: resolved from the examples when needed.
        self.group_size: Optional[int] = None

    def _group_size(self, groups: GroupData) -> int:
        return self.group_size if self.group_size is not None else groups.group_size(self.cfg.group_size)

    def prepare(self, pairs: PairData | GroupData):
        """Token ids of the pairs: (ids_a, ids_b) for an encoder, concatenated pairs otherwise; of
        groups, their :class:`GroupInputs`."""
        if isinstance(pairs, GroupData):
            negatives = self.tokenizer.encode_all(
                [text for texts in pairs.negatives for text in texts], f"{pairs.source}, negatives"
            )
            ends = np.cumsum([len(texts) for texts in pairs.negatives])
            return GroupInputs(
                self.tokenizer.encode_all(pairs.anchors, f"{pairs.source}, anchors"),
                self.tokenizer.encode_all(pairs.positives, f"{pairs.source}, positives"),
                [negatives[end - len(texts) : end] for end, texts in zip(ends, pairs.negatives)],
                self._group_size(pairs),
            )
        if self.kind.concatenated_pairs:
            return self.tokenizer.encode_pairs(pairs.texts_a, pairs.texts_b, f"{pairs.source}, pairs")
        return (
            self.tokenizer.encode_all(pairs.texts_a, f"{pairs.source}, first texts"),
            self.tokenizer.encode_all(pairs.texts_b, f"{pairs.source}, second texts"),
        )

    def scores(self, prepared):
        return pair_scores(self.model, self.cfg.kind, prepared, sep_id=self.sep_id)

    def retrieval(self, pairs: PairData, task: Task, report: bool = True) -> dict:
        """Retrieval metrics of a feature model over the pairs (:func:`cosent_tf.evaluation.pair_retrieval`);
        empty when no pair is positive. ``report=False``: the texts' truncation is not said again
        (validation, at every epoch, of texts already reported)."""

        def vectors(texts):
            ids = self.tokenizer.encode_all(texts, "retrieval texts", report=report)
            return l2_normalize(batched_outputs(self.model, ids))

        return pair_retrieval(vectors, pairs, task) or {}

    def training_model(self, train: PairData | GroupData):
        """(the Keras model to fit, its loss, the labels it is fitted on: None for groups, whose
        layout says which text is whose positive)."""
        cfg, task = self.cfg, self.task
        group_size = self._group_size(train) if isinstance(train, GroupData) else None
        weights = (cfg.cosine_weight, cfg.ibn_weight, cfg.angle_weight)
        loss = self.loss.build(
            scale=cfg.scale,
            epsilon=cfg.epsilon,
            max_label=task.max_label,
            positive_above=task.positive_above,
            global_batch=cfg.global_batch_loss,
            group_size=group_size,
            symmetric=cfg.symmetric,
            weights=weights if None not in weights else self.loss.mix_weights,
        )
        if cfg.matryoshka_dims:
            loss = MatryoshkaLoss(loss, cfg.matryoshka_dims, cfg.matryoshka_weights)
        labels = None
        if isinstance(train, PairData):
            labels = task.classes(train.labels) if self.loss.on_classes else train.labels
        model = self.model
        if self.loss.training_head is not None:
            assert labels is not None, "a training head classifies labelled pairs"
            head = self.loss.training_head(int(labels.max()) + 1)
            model = keras.Model(model.inputs, head(model.output))
        if cfg.micro_batch_size:
            from .gradient_cache import GradientCacheModel  # the train step of this process's Keras and backend

            rows_per_example = group_size or self.kind.rows_per_pair
            model = GradientCacheModel(model, cfg.micro_batch_size, rows_per_example, seed=cfg.seed)
        return model, loss, labels

    def duplicate_keys(self, train: PairData | GroupData):
        """The texts of each training example, by which an in-batch loss's batches keep examples
        that share a text apart; None when the loss has no in-batch negatives or the run lets
        duplicates meet (``--allow-duplicates-in-batch``)."""
        if not (self.loss.in_batch and self.cfg.keep_duplicates_apart):
            return None
        if isinstance(train, GroupData):
            return text_keys(train.anchors, train.positives, train.negatives)
        return text_keys(train.texts_a, train.texts_b)

    def dataset(self, prepared, labels, start_step, replicas=1, keys=None):
        cfg = self.cfg
        options = dict(
            group_by_length=cfg.group_by_length,
            seed=cfg.seed,
            start_step=start_step,
            repeat=True,
            replicas=replicas,
            width_multiple=COMPILED_WIDTH_MULTIPLE if keras.backend.backend() == "jax" else 1,
        )
        if isinstance(prepared, GroupInputs):
            return group_dataset(
                prepared.anchors,
                prepared.positives,
                prepared.negatives,
                prepared.group_size,
                cfg.batch_size,
                keys=keys,
                **options,
            )
        if self.kind.concatenated_pairs:
            return interaction_dataset(prepared, labels, cfg.batch_size, sep_id=self.sep_id, **options)
        return pair_dataset(*prepared, labels, cfg.batch_size, keys=keys, **options)


def train(cfg: RunConfig, overwrite: bool = False, callbacks: Sequence[Any] = ()) -> dict:
    """Train, validate after every epoch (and every ``eval_every`` steps), keep the best, test it.

    The run seeds every generator and sets the Keras dtype policy of ``cfg.precision``; both are
    put back as they were on return. Under ``cfg.strategy`` (:mod:`cosent_tf.training.distribute`)
    the model, its optimizer and its loss are built in the strategy's scope and every batch is
    shared by its replicas. What the run writes into ``cfg.output_dir``, and when an earlier run
    there is resumed or replaced, is :mod:`cosent_tf.training.run_folder`'s.

    Args:
        cfg: the run's settings; their defaults are resolved here (:meth:`RunConfig.resolved`).
        overwrite: replace a finished (or differently set) run in the output folder.
        callbacks: more Keras callbacks for ``fit`` (a test's interruption, a display of one's own).

    Returns:
        The metrics written to ``metrics.json``: ``valid`` and ``test`` (averaged over the
        evaluated tasks), ``tasks`` (per task), ``best_epoch``, ``steps``, ``notes`` and more. On
        a multi-worker run's workers other than the chief, which write nothing: ``{"worker", "steps"}``.

    Raises:
        ConfigError: a setting out of range or unknown, a batch the replicas cannot share, or an
            output folder that may not hold this run.
        DataError: a data file missing or unusable.
        CheckpointError: a checkpoint missing or unreadable.
        NonFiniteLossError: the loss or every validation score was not finite.
        TrainingInterrupted: SIGTERM or SIGINT stopped training after its state was saved.

    Example:
        >>> metrics = train(RunConfig(task="BQ", epochs=1, output_dir="runs/bq"))  # doctest: +SKIP
        >>> metrics["test"]["spearman"]  # doctest: +SKIP
    """
    cfg, source = cfg.resolve()  # the model source, opened once for the whole run
    assert cfg.batch_size is not None, "resolved() sets it"
    strategy = get_strategy(cfg.strategy, cfg.worker_timeout)
    loss = get_loss(cfg.kind, cfg.loss)
    if cfg.batch_size % strategy.num_replicas_in_sync:
        raise ConfigError(
            f"--batch-size {cfg.batch_size} {loss.unit} cannot be shared equally by the "
            f"{strategy.num_replicas_in_sync} replicas of --strategy {cfg.strategy}: make it a multiple of that"
        )
    loss.check_batch(cfg.batch_size, strategy.num_replicas_in_sync, cfg.global_batch_loss)
    with random_seed(cfg.seed), dtype_policy(PRECISIONS[cfg.precision]):
        return _train(cfg, overwrite, strategy, source, callbacks)


def _train(cfg, overwrite, strategy, source, callbacks):
    started = time.time()
    chief = is_chief(strategy)
    with contextlib.ExitStack() as run_folder_held:
        with started_together(strategy):
            check_inputs(cfg, source)
            if cfg.matryoshka_dims:  # before the run folder is touched: a feature model's vectors are its hidden size
                _check_matryoshka_width(
                    cfg.matryoshka_dims, int(source.config["hidden_size"]), f"the model of {source.config_path}"
                )
            random_weights = source.random_weights
            if random_weights:
                say_random_weights(cfg.checkpoint)
            data = load_run_data(cfg)
            if chief:
                paths = run_inputs(cfg, data, source)
                settings = dataclasses.asdict(cfg)
                start = take_run_folder(cfg.output_dir, settings, paths, cfg.checkpoint, overwrite, run_folder_held)
        train_pairs, evaluation, notes = data.train, data.evaluation, data.notes
        for note in notes:
            logger.warning("NOTE: %s", note)
        for note in data.data_notes:
            logger.info("%s", note)
        sizes = ", ".join(f"{t} {len(v)}/{len(s)}" for t, (v, s) in evaluation.items())
        unit = get_loss(cfg.kind, cfg.loss).unit
        logger.info("%s: %d train %s; valid/test pairs: %s", cfg.task, len(train_pairs), unit, sizes)

        with strategy.scope():
            matcher = Matcher(cfg, data.task, source)
        matcher.group_size = data.group_size
        train_inputs = matcher.prepare(train_pairs)
        prepared = {t: (matcher.prepare(v), matcher.prepare(s)) for t, (v, s) in evaluation.items()}
        keys = matcher.duplicate_keys(train_pairs)
        in_batch = _in_batch_report(cfg, matcher, train_inputs, keys, strategy.num_replicas_in_sync)
        backup_dir = os.path.join(cfg.output_dir, BACKUP)
        fit = functools.partial(
            _fit,
            cfg,
            matcher,
            train_pairs,
            train_inputs,
            keys,
            prepared,
            evaluation,
            data.tasks,
            backup_dir,
            strategy,
            callbacks,
        )
        if not chief:
            # The chief writes every output; this worker trains and validates in step with it and
            # resumes from the chief's backup (output_dir on a file system both can read).
            logger.info("%s: training in step with the chief, which writes %s", worker(strategy), cfg.output_dir)
            _, steps = fit(writes=False)
            return {"worker": worker(strategy), "steps": steps}
        if start:
            logger.info("%s: %s", cfg.output_dir, start)
        write_json(os.path.join(cfg.output_dir, RUN_CONFIG), dataclasses.asdict(cfg))
        validation, steps = fit()
        logger.info("training done; scoring valid and test with the best weights")
        per_task, decision = test_and_decide(
            cfg,
            evaluation,
            data.tasks,
            lambda name: (matcher.scores(prepared[name][0]), matcher.scores(prepared[name][1])),
            matcher.retrieval if matcher.kind.sentence_vectors else None,
            matcher.kind.scored_by,
        )
        plot_valid_curve(
            validation.history, os.path.join(cfg.output_dir, VALID_CURVE), f"{cfg.kind} {cfg.loss} on {cfg.task}"
        )
        metrics = {
            "task": cfg.task,
            "kind": cfg.kind,
            "loss": cfg.loss,
            "architecture": cfg.architecture,
            "keras": KERAS_MAJOR,
            "backend": keras.backend.backend(),
            "best_epoch": validation.best_epoch,
            "best_metric": validation.monitor,
            "best_valid": validation.best,
            "steps": steps,
            "train_pairs": len(train_pairs),
            **in_batch,
            "replicas": strategy.num_replicas_in_sync,
            "comparable": not notes and data.task.data != FILES,
            "random_weights": random_weights,
            "notes": notes,
            **({"data_notes": data.data_notes} if data.data_notes else {}),
            "valid": mean_over_tasks({t: m["valid"] for t, m in per_task.items()}),
            "test": mean_over_tasks({t: m["test"] for t, m in per_task.items()}),
            "tasks": per_task,
            "wall_seconds": round(time.time() - started, 1),
        }
        matcher.spec.threshold = None  # the thresholds are the decision's (decision.json)
        matcher.spec.source = {
            **model_origin(cfg, random_weights, validation.best_epoch, metrics["test"]),
            "keras": keras.__version__,
            "backend": metrics["backend"],
            "precision": cfg.precision,
        }
        write_model_folder(
            os.path.join(cfg.output_dir, MODEL),
            model_arrays(matcher.model, matcher.spec, source.config),
            matcher.spec,
            source.config,
            cfg.vocab,
            overwrite=True,
            decision=decision,
        )
        write_json(os.path.join(cfg.output_dir, METRICS), metrics)
        shutil.rmtree(backup_dir)  # last: until metrics.json exists, a rerun resumes from it
        logger.info("%s", run_summary(metrics, os.path.join(cfg.output_dir, MODEL)))
        return metrics


def _in_batch_report(cfg, matcher, train_inputs, keys, replicas) -> dict:
    """Say what a group loss trains on and what the no-duplicates batches moved (the first epoch's
    batches: each epoch's differ a little); the figures go into metrics.json."""
    report: dict = {}
    if isinstance(train_inputs, GroupInputs):
        size = train_inputs.group_size
        report["group_size"] = size
        logger.info(
            "%s: %d texts an example (anchor, positive%s); %d examples a batch, so each anchor picks its positive "
            "among %d candidates",
            cfg.loss,
            size,
            f", {size - 2} hard negative{'s' * (size != 3)}" if size > 2 else "",
            cfg.batch_size,
            cfg.batch_size * (size - 1),
        )
    if keys is not None:
        lengths = (
            group_lengths(train_inputs.anchors, train_inputs.positives, train_inputs.negatives)
            if isinstance(train_inputs, GroupInputs)
            else pair_lengths(*train_inputs)
        )
        moved, left = duplicates_moved(
            lengths,
            cfg.batch_size,
            keys,
            shuffle=True,
            group_by_length=cfg.group_by_length,
            seed=cfg.seed,
            replicas=replicas,
        )
        logger.info(
            "batches without duplicate texts: %d of %d examples moved to another batch in the first epoch%s "
            "(--allow-duplicates-in-batch turns this off)",
            moved,
            len(keys),
            f"; {left} still share a text with another of their batch, which the data did not allow to avoid"
            if left
            else "",
        )
        report.update(duplicates_moved=moved, duplicates_left=left)
    return report


def _best_metric(cfg, matcher, evaluation, tasks) -> tuple[str, str]:
    """The valid figure that picks the best epoch (``--best-metric`` or the loss's default) and the line
    that says which; Spearman when a retrieval figure was asked for and the valid pairs give none."""
    no_retrieval_because = ""
    if not matcher.kind.sentence_vectors:
        no_retrieval_because = f"a model of --kind {cfg.kind} gives no sentence vectors to search with"
    else:
        without = [
            name
            for name, (valid, _) in evaluation.items()
            if not pair_retrieval_sets(valid.texts_a, valid.texts_b, tasks[name].positive(valid.labels))[0]
        ]
        if without:
            no_retrieval_because = f"the valid pairs of {', '.join(without)} hold no positive pair to search for"
    return matcher.loss.chosen_best_metric(cfg.best_metric, no_retrieval_because)


def _fit(
    cfg,
    matcher,
    train_pairs,
    train_inputs,
    keys,
    prepared,
    evaluation,
    tasks,
    backup_dir,
    strategy,
    callbacks,
    writes=True,
):
    """Train with validation, best-weight keeping and backups; (the validation callback, steps done).
    ``writes``: False on a worker other than the chief, which validates but writes nothing."""
    replicas = strategy.num_replicas_in_sync
    steps_per_epoch = cfg.steps_per_epoch or batches_per_epoch(len(train_pairs), cfg.batch_size, replicas)
    if replicas > 1:
        logger.info(
            "%d replicas (--strategy %s), %d %s each a step; %s %s",
            replicas,
            cfg.strategy,
            cfg.batch_size // replicas,
            matcher.loss.unit,
            "CoSENT ranks" if cfg.loss == "cosent" else f"the {cfg.loss} loss takes",
            "the global batch"
            if cfg.global_batch_loss
            else f"each replica's {matcher.loss.unit} alone (--per-replica-loss)",
        )
        left_out = partial_batch_note(len(train_pairs), cfg.batch_size, replicas)
        if left_out:
            logger.info("%s", left_out)
    if cfg.micro_batch_size:
        logger.info(
            "the gradient of each batch is computed %d %s at a time (--micro-batch-size)",
            cfg.micro_batch_size,
            matcher.loss.unit,
        )
    if cfg.matryoshka_dims:
        logger.info(
            "the %s loss is the weighted sum of the loss at the widths %s of the vectors (--matryoshka-dims), "
            "weights %s",
            cfg.loss,
            ", ".join(map(str, cfg.matryoshka_dims)),
            ", ".join(f"{weight:g}" for weight in cfg.matryoshka_weights or [1.0] * len(cfg.matryoshka_dims)),
        )
    with strategy.scope():
        model, loss, labels = matcher.training_model(train_pairs)
        total = steps_per_epoch * cfg.epochs
        scaled = cfg.precision == "fp16"
        optimizer = build_optimizer(
            cfg.lr,
            total,
            cfg.weight_decay,
            cfg.warmup,
            cfg.schedule,
            loss_scaling=scaled,
            not_decayed=not_decayed_variables(matcher.model),
        )
        model.compile(optimizer=optimizer, loss=loss)
        # The step counter is made on first use. Made now, it is made at the same moment on
        # every worker: under multi-worker each new variable is a collective broadcast, and
        # collectives must come in the same order everywhere.
        optimizer.iterations  # noqa: B018

    monitor, chosen = _best_metric(cfg, matcher, evaluation, tasks)
    logger.info("%s", chosen)
    searched = BEST_METRICS[monitor] == RETRIEVAL_FIGURE

    def evaluate_valid(_):
        per_task = {}
        for t in evaluation:
            per_task[t] = task_metrics(matcher.scores(prepared[t][0]), evaluation[t][0].labels)
            if searched:  # only then: a search of valid costs as much again as scoring it
                figures = matcher.retrieval(evaluation[t][0], tasks[t], report=False)
                per_task[t].update({name: figures[name] for name in BEST_METRICS if name in figures})
        flat = mean_over_tasks(per_task)
        if monitor not in flat:  # several tasks: their mean picks the best epoch, as Spearman's does
            flat[monitor] = float(np.mean([figures[monitor] for figures in per_task.values()]))
        return flat

    progress_bar = live_progress_on(sys.stdout)  # where Keras writes (cosent-tf train: stderr)
    validation = ValidationCheckpoint(
        evaluate_valid,
        os.path.join(cfg.output_dir, BEST_WEIGHTS),
        monitor=monitor,
        every_steps=cfg.eval_every,
        csv_path=os.path.join(cfg.output_dir, VALID_METRICS),
        progress_bar=progress_bar,
        writes=writes,
    )
    backup = StepBackup(backup_dir, cfg.backup_every, writes=writes)
    guard = StopOnNonFiniteLoss(
        kept=[("the best weights so far", validation.weights_path), ("the last saved training state", backup_dir)],
        advice="Lower --lr (or use float32) and run the command again; it resumes from the saved state.",
    )
    start = StartStep()  # after the backup, which restores the step of a resumed run
    # the backup after validation: an epoch's state is saved after its validation
    # first, so that a bar's line is finished before validation speaks
    shown, verbose = epoch_progress(progress_bar)
    callbacks = [*shown, guard, validation, backup, start, *callbacks]
    try:
        with fitting(strategy, model):
            model.fit(
                matcher.dataset(train_inputs, labels, start, replicas, keys),
                epochs=cfg.epochs,
                steps_per_epoch=steps_per_epoch,
                callbacks=callbacks,
                verbose=verbose,
                shuffle=False,  # the batches are the seeded shuffle of the dataset's own
            )
    except tf.errors.UnavailableError as lost:
        if cfg.strategy != "multi-worker":
            raise
        # A peer that died or was stopped fails this worker's next collective within seconds;
        # TensorFlow's message names it among a traceback of the graph.
        named = {f"{job} {task}" for job, task in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", lost.message)}
        peers = " and ".join(sorted(named - {worker(strategy)})) or "another worker"
        raise WorkerLostError(
            f"{worker(strategy)}: lost contact with {peers} while training; the last saved training state is in "
            f"{backup_dir}: run the same command again on every worker to resume from it"
        ) from lost
    finally:
        backup.restore_signal_handlers()
    if validation.best_epoch is None:  # every epoch's score was NaN: no weights are worth keeping
        epochs = sum(row["end_of_epoch"] for row in validation.history)
        raise NonFiniteLossError(
            f"validation never gave a finite {validation.monitor} (not at the end of any of the {epochs} "
            "epochs): the model diverged, or it scores every valid pair alike; nothing was saved as the "
            f"model (no model/ or metrics.json in {cfg.output_dir}). Lower --lr (or use float32) and train "
            "again from scratch with --overwrite"
        )
    return validation, validation.steps_done
