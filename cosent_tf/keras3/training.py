"""Training on Keras 3: ``cosent-tf train --keras 3``, the Keras 2 engine's run of a feature model
(:func:`cosent_tf.training.engine.train`) on a keras-hub backbone, on the TensorFlow or JAX backend.

The run reads the same :class:`~cosent_tf.training.config.RunConfig`, the same data readers
(:mod:`cosent_tf.data`), tokenises with this project's :class:`~cosent_tf.models.tokenization.SentenceTokenizer`,
trains on interleaved pair batches (rows 2k and 2k+1 are pair k) with the loss of
:mod:`cosent_tf.keras3.losses`, validates Spearman after every epoch keeping the best weights, and
writes the SAME model folder as the Keras 2 engine (``cosent_model.json``, ``bert_config.json``, a
Google-format ``bert_model.ckpt``, ``vocab.txt`` and the match decision ``decision.json``), which
``cosent-tf evaluate`` and ``encode`` load. What the run reports (its metrics, the decision fitted on
valid, the JSON line, the last line of the log) is the Keras 2 engine's
(:mod:`cosent_tf.training.run_results`). Nothing here imports the Keras 2 engine
(:mod:`cosent_tf.backend`): one Keras per process.

What the Keras 2 engine does that this route does not is refused by option name
(:func:`unsupported_options`), never silently ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from ..calibration import MatchDecision
from ..callbacks import (
    EpochSetter,
    StepBackup,
    StopOnNonFiniteLoss,
    ValidationCheckpoint,
    epoch_progress,
    write_history,
)
from ..choices import CPU_DEVICES_VARIABLE
from ..console import live_progress_on
from ..data.batching import batch_indices, batches_per_epoch, pair_lengths
from ..data.pairs import PairData
from ..data.tasks import CNSD, FILES, Task, get_task
from ..errors import ConfigError, NonFiniteLossError
from ..evaluation import mean_over_tasks, pair_retrieval, task_metrics
from ..inference.vectors import l2_normalize, row_cosines
from ..io import read_json, write_json
from ..losses.registry import get_loss, keras3_losses
from ..models.families import get_architecture
from ..models.kinds import FEATURE
from ..models.sources import ModelSource
from ..models.spec import ModelSpec, write_model_folder
from ..optimizers import build_optimizer
from ..training import run_rules
from ..training.config import RunConfig
from ..training.run_data import RunData, check_input_files, load_run_data, run_inputs
from ..training.run_folder import plot_valid_curve
from ..training.run_results import model_origin, printed_results, run_summary, say_random_weights, test_and_decide
from ..weight_decay import decayed
from .runtime import backend_name, checked_keras, imported_quietly, keras_hub_backbone

logger = logging.getLogger(__name__)

# A run's output folder is the Keras 2 engine's kind (cosent_tf.training.run_rules: its marker,
# lock, fingerprints of the inputs, and the outputs --overwrite may remove), its validations the
# Keras 2 engine's too (VALID_METRICS, cosent_tf.callbacks.ValidationCheckpoint); its best weights
# (BEST_WEIGHTS) are Keras 3's own file.


def unsupported_options(cfg: RunConfig, backend: str) -> list[str]:
    """Each option of ``cfg`` that ``--keras 3`` cannot honour, with why (empty: all can be).

    The architecture is checked by :func:`cosent_tf.keras3.runtime.keras_hub_backbone`."""
    problems = []
    if cfg.kind != FEATURE.name:
        problems.append(
            f"--kind {cfg.kind}: the Keras 3 route trains sentence encoders (feature models) only; train "
            "cross-encoders with the Keras 2 engine (leave out --keras 3)"
        )
    elif cfg.loss not in keras3_losses():
        problems.append(
            f"--loss {cfg.loss}: not trained on Keras 3 yet (it takes {', '.join(keras3_losses())}): its batches "
            "(groups, a classification head or in-batch negatives kept apart) are the Keras 2 engine's"
        )
    if cfg.matryoshka_dims:
        problems.append("--matryoshka-dims: not on Keras 3 yet; train it with the Keras 2 engine")
    if cfg.precision == "fp16":
        problems.append(
            "--precision fp16: float16 needs dynamic loss scaling, which the Keras 3 route does not set up; "
            "use bf16 or float32"
        )
    if cfg.strategy == "multi-worker":
        problems.append("--strategy multi-worker: the Keras 3 route runs on one machine (default or mirrored)")
    if cfg.strategy == "mirrored" and backend != "tensorflow":
        problems.append(
            f"--strategy mirrored: a tf.distribute strategy, which the {backend} backend does not run; use "
            "KERAS_BACKEND=tensorflow"
        )
    if cfg.micro_batch_size:
        problems.append("--micro-batch-size: the gradient cache is the Keras 2 engine's (GradientCacheModel) only")
    if cfg.eval_every:
        problems.append("--eval-every: the Keras 3 route validates at epoch ends only")
    if cfg.best_metric not in (None, "spearman"):
        problems.append(f"--best-metric {cfg.best_metric}: the Keras 3 route picks the best epoch by valid spearman")
    if cfg.backup_every:
        problems.append(
            "--backup-every: Keras 3's BackupAndRestore restores the epoch but not the batch within it, so a run "
            "resumed from a mid-epoch backup would train that epoch's first batches twice; the Keras 3 route "
            "saves its state at epoch ends only"
        )
    if cfg.train_from_valid:
        problems.append(
            "--train-from-valid: the Keras 3 route trains on a task's own train split or on --train files; "
            "hold out part of valid with the Keras 2 engine"
        )
    if cfg.matryoshka_weights and not cfg.matryoshka_dims:
        problems.append("--matryoshka-weights: weights of --matryoshka-dims, which the Keras 3 route does not train")
    # Options of the losses the Keras 3 route does not train (groups, in-batch negatives, mixes).
    for option, value in (
        ("--group-size", cfg.group_size),
        ("--hard-negatives-from-labels", cfg.hard_negatives_from_labels),
        ("--symmetric", cfg.symmetric or None),
        ("--cosine-weight", cfg.cosine_weight),
        ("--ibn-weight", cfg.ibn_weight),
        ("--angle-weight", cfg.angle_weight),
    ):
        if value is not None and cfg.loss in keras3_losses():
            problems.append(f"{option}: an option of losses the Keras 3 route does not train, not of --loss {cfg.loss}")
    if cfg.task and not cfg.train_file and get_task(cfg.task).data == CNSD:
        problems.append(f"{cfg.task}: NLI training (evaluated on every matching task) is the Keras 2 engine's only")
    return problems


def resolve(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its defaults filled in as :meth:`RunConfig.resolved` does for the Keras 2 engine
    (:meth:`RunConfig.filled_in`, the same rules), and refused where Keras 3 cannot run it.

    Raises:
        ConfigError: a number out of range, an unknown task, loss or recipe, an architecture only
            Keras 2 has, or an option this route cannot honour (named, with why).
    """
    return _resolve(cfg)[0]


def _resolve(cfg: RunConfig) -> tuple[RunConfig, ModelSource]:
    """:func:`resolve`, and the run's model source (:meth:`RunConfig.model_source`), opened once."""
    cfg.check()
    keras_hub_backbone(cfg.architecture)  # ConfigError for NEZHA, RoFormer, WoBERT
    problems = unsupported_options(cfg, backend_name())
    if problems:
        raise ConfigError("--keras 3 cannot run this: " + "; ".join(problems))
    resolved, source = cfg.filled_in()
    # A model folder (or a Hugging Face folder, read as one) goes on pooling as it pools unless
    # --pooling says otherwise; the Keras 2 engine starts it on the recipe's pooling.
    own_pooling = source.spec.pooling if source.spec is not None else None
    return dataclasses.replace(resolved, keras=3, pooling=cfg.pooling or own_pooling or resolved.pooling), source


# -- data ------------------------------------------------------------------------------------------


def padded(rows: Sequence[Sequence[int]], multiple: int = 8) -> np.ndarray:
    """int32 token ids padded with 0 to the longest row rounded up to ``multiple`` (fewer shapes to
    compile than one a batch, far less padding than ``maxlen``)."""
    width = max(len(row) for row in rows)
    width = -(-width // multiple) * multiple
    out = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def pair_batches(
    keras: Any,
    ids_a: list,
    ids_b: list,
    labels: np.ndarray,
    batch_size: int,
    seed: int,
    group_by_length: bool = True,
    replicas: int = 1,
) -> Any:
    """A ``keras.utils.PyDataset`` of interleaved pair batches: x (2B, T) int32 token ids, rows 2k
    and 2k+1 the two texts of pair k, and y (2B,) float32, each pair's label on both its rows.

    An epoch's batches are the Keras 2 engine's (:func:`cosent_tf.data.batching.batch_indices`: a
    seeded shuffle of its own for every epoch, grouped by length when asked, each batch a multiple of
    ``replicas`` pairs), so that a run on either Keras with one seed sees the same batches, and a
    resumed run the ones an uninterrupted one would. Its ``epoch`` is set by
    :class:`cosent_tf.callbacks.EpochSetter` before each epoch draws its batches."""
    lengths = pair_lengths(ids_a, ids_b)
    labels = np.asarray(labels, np.float32)

    class PairBatches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0
            self._cut: tuple[int, list] = (-1, [])

        def __len__(self) -> int:
            return batches_per_epoch(len(lengths), batch_size, replicas)

        def __getitem__(self, index: int) -> tuple:
            if self._cut[0] != self.epoch:
                self._cut = (
                    self.epoch,
                    batch_indices(lengths, batch_size, self.epoch, True, group_by_length, seed, replicas),
                )
            pairs = self._cut[1][index]
            rows = [ids for i in pairs for ids in (ids_a[i], ids_b[i])]
            return padded(rows), np.repeat(labels[pairs], 2)

    return PairBatches()


def fit_input(keras: Any, batches: Any) -> Any:
    """What ``fit`` reads: ``batches`` itself on JAX; on TensorFlow a ``tf.data`` of them whose token
    width is left open. (Keras 3 would fix a PyDataset's shapes from its first two batches, so that a
    later batch of another width fails.)"""
    if keras.backend.backend() != "tensorflow":
        return batches
    import tensorflow as tf

    def rows() -> Any:
        for index in range(len(batches)):
            yield batches[index]

    signature = (tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None,), tf.float32))
    dataset = tf.data.Dataset.from_generator(rows, output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))


# -- model ------------------------------------------------------------------------------------------


def encode_ids(encoder: Any, ids: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
    """float32 vectors of token id rows, batched by length (each batch padded to its own longest)."""
    order = np.argsort([len(row) for row in ids], kind="stable")
    out = np.zeros((len(ids), int(encoder.output.shape[-1])), np.float32)
    for start in range(0, len(ids), batch_size):
        chosen = order[start : start + batch_size]
        out[chosen] = np.asarray(encoder(padded([ids[i] for i in chosen]), training=False), np.float32)
    return out


def cosines(encoder: Any, ids_a: list, ids_b: list) -> np.ndarray:
    """The cosine of each pair's two vectors (float64)."""
    return row_cosines(encode_ids(encoder, ids_a).astype(np.float64), encode_ids(encoder, ids_b).astype(np.float64))


def build_loss(cfg: RunConfig, task: Task) -> Any:
    """The run's feature loss, made by its row of the loss table on this process's Keras 3."""
    return get_loss(cfg.kind, cfg.loss).build(
        scale=cfg.scale,
        epsilon=cfg.epsilon,
        max_label=task.max_label,
        positive_above=task.positive_above,
        global_batch=cfg.global_batch_loss,
    )


def not_decayed_variables(encoder: Any, backbone: Any) -> list:
    """The trainable variables of ``encoder`` that weight decay skips: those whose Google checkpoint
    name (:func:`cosent_tf.keras3.backbones.weight_table`) :func:`~cosent_tf.weight_decay.decayed`
    rejects, and any variable outside the table (none today; never decayed unasked)."""
    from .backbones import weight_table

    decayed_ids = {id(variable) for name, variable, _ in weight_table(backbone) if decayed(name)}
    return [variable for variable in encoder.trainable_variables if id(variable) not in decayed_ids]


def compiled_encoder(cfg: RunConfig, backbone: Any, task: Task, total_steps: int) -> Any:
    """The encoder on ``backbone`` with ``cfg.pooling``, compiled with the run's loss and optimizer
    (under the active distribution strategy's scope when the caller opened one)."""
    from .encoder import build_encoder

    assert cfg.pooling is not None, "the run's pooling is resolved before the encoder is built"
    encoder = build_encoder(backbone, pooling=cfg.pooling)
    loss = build_loss(cfg, task)
    assert cfg.lr is not None and cfg.schedule is not None, "a resolved RunConfig"
    optimizer = build_optimizer(
        cfg.lr,
        total_steps,
        cfg.weight_decay or 0.0,
        cfg.warmup or 0.0,
        cfg.schedule,
        not_decayed=not_decayed_variables(encoder, backbone),
    )
    encoder.compile(optimizer=optimizer, loss=loss)
    return encoder


def _strategy(cfg: RunConfig) -> Any:
    """The tf.distribute strategy of ``--strategy mirrored`` (TF backend), or None; the CPU split into
    ``COSENT_TF_CPU_DEVICES`` logical devices when asked, as the Keras 2 engine does."""
    if cfg.strategy != "mirrored":
        return None
    import tensorflow as tf

    wanted = os.environ.get(CPU_DEVICES_VARIABLE)
    if wanted and not tf.config.list_physical_devices("GPU"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(int(wanted))]
            )
        except RuntimeError:
            if len(tf.config.list_logical_devices("CPU")) != int(wanted):
                raise ConfigError(
                    f"{CPU_DEVICES_VARIABLE}={wanted}: TensorFlow had already started in this process with "
                    f"{len(tf.config.list_logical_devices('CPU'))} CPU devices; set it before the run starts"
                ) from None
    return tf.distribute.MirroredStrategy()


# -- the run ------------------------------------------------------------------------------------------


def _adopt_validation_record(folder: str) -> None:
    """An unfinished run of an earlier Keras 3 trainer kept its validations in ``validation.json``
    (VALIDATION_STATE): they become the rows of ``valid_metrics.csv``, which the run resumes from as
    the Keras 2 engine's does (the rows' training loss, which that file does not hold, left out)."""
    old, new = os.path.join(folder, run_rules.VALIDATION_STATE), os.path.join(folder, run_rules.VALID_METRICS)
    if not os.path.exists(old) or os.path.exists(new):
        return
    record = read_json(old, "the run's validation record")
    write_history(new, [{key: value for key, value in row.items() if key != "loss"} for row in record["history"]])
    os.remove(old)


def train(
    cfg: RunConfig,
    overwrite: bool = False,
    callbacks: Sequence[Any] = (),
) -> dict:
    """Train a feature model on Keras 3 as :func:`cosent_tf.training.engine.train` does on Keras 2.

    The run sets the dtype policy of ``cfg.precision`` and seeds the generators; the policy and
    Python's and NumPy's generators are put back on return. The run is deterministic given
    ``cfg.seed`` and its starting weights (``--checkpoint``: the same Google-format checkpoint gives
    a Keras 2 and a Keras 3 run the very same start; without one, random weights drawn from the
    seed): the batches are a seeded shuffle per epoch, and Keras's generators are seeded. An
    interrupted run (killed, or stopped by an exception) resumes from its backup in
    ``output_dir``/backup (``keras.callbacks.BackupAndRestore``) when run again with the same settings.

    Args:
        cfg: the run's settings (defaults resolved by :func:`resolve`).
        overwrite: replace a finished run (or one with other settings) in the output folder.
        callbacks: more Keras callbacks for ``fit`` (a progress display; a test's interruption).

    Returns:
        The metrics written to ``metrics.json``, the Keras 2 engine's (``valid`` and ``test``: Spearman,
        Pearson, and on test the match decision's figures and retrieval; ``tasks``, ``best_epoch``,
        ``steps``, ``notes``, ``random_weights``, ...) and ``keras``, ``backend`` and ``history``.

    Raises:
        ConfigError: an option this route cannot honour (named), or an output folder that may not
            hold this run.
        DataError: a data file missing or unusable.
    """
    keras = checked_keras()
    # TensorFlow comes in on either backend (keras-hub imports it, and Keras seeds it on JAX too):
    # imported here, its start-up lines are held back as the Keras 2 engine's are
    imported_quietly("tensorflow")
    cfg, source = _resolve(cfg)
    started = time.time()
    check_input_files(cfg, source)
    data = load_run_data(cfg)
    backend = backend_name()
    policy = keras.config.dtype_policy()
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        keras.utils.set_random_seed(cfg.seed)
        if cfg.precision == "bf16":
            keras.config.set_dtype_policy("mixed_bfloat16")
        return _train(keras, cfg, source, overwrite, data, backend, started, callbacks)
    finally:
        # Put back what can be put back: the dtype policy and Python's and NumPy's generators
        # (TensorFlow's and Keras's global seeds stay at the run's seed: neither says what it was).
        keras.config.set_dtype_policy(policy)
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _backbone(cfg: RunConfig, source: ModelSource) -> tuple:
    """(keras-hub backbone, BERT config dict, lower-cases, whether the source held BERT's pooler)."""
    from .backbones import backbone_from_config, load_backbone

    if cfg.checkpoint:
        loaded = load_backbone(cfg.checkpoint, cfg.architecture)
        return loaded.backbone, dict(loaded.config), loaded.do_lower_case, loaded.has_pooler
    return backbone_from_config(source.config, cfg.architecture), source.config, source.do_lower_case, False


def _train(
    keras: Any,
    cfg: RunConfig,
    source: ModelSource,
    overwrite: bool,
    data: RunData,
    backend: str,
    started: float,
    callbacks: Sequence[Any],
) -> dict:
    from ..models.tokenization import SentenceTokenizer

    with contextlib.ExitStack() as held:  # the run folder's lock, once taken
        strategy = _strategy(cfg)
        replicas = strategy.num_replicas_in_sync if strategy is not None else 1
        output_dir, batch_size, epochs, maxlen = cfg.output_dir, cfg.batch_size, cfg.epochs, cfg.maxlen
        pooling, vocab = cfg.pooling, cfg.vocab
        assert output_dir is not None and batch_size is not None and epochs is not None and maxlen is not None
        assert pooling is not None and vocab is not None, "a resolved RunConfig"
        assert isinstance(data.train, PairData), "the Keras 3 route trains on pairs (no group loss)"
        valid, test = data.evaluation[cfg.task]
        if batch_size % replicas:
            raise ConfigError(f"--batch-size {batch_size} cannot be shared equally by {replicas} replicas")
        # A batch too small for the loss to learn from is refused by name, before anything is written.
        get_loss(cfg.kind, cfg.loss).check_batch(batch_size, replicas, cfg.global_batch_loss)
        with _scope(strategy):
            backbone, config, lower, has_pooler = _backbone(cfg, source)
        # The Keras 2 engine's run folder rules: refused before the lock if it is not a run's (nothing
        # written); then locked, marked with the inputs' fingerprints, resumed only over the same
        # settings and inputs, and --overwrite removes the run's own outputs only.
        paths = run_inputs(cfg, data, source)
        note = (
            run_rules.take_run_folder(output_dir, dataclasses.asdict(cfg), paths, cfg.checkpoint, overwrite, held)
            or "a new run"
        )
        logger.info("%s: %s (Keras 3, %s backend)", output_dir, note, backend)
        random_weights = source.random_weights
        if random_weights:
            say_random_weights(cfg.checkpoint)
        for data_note in data.notes:
            logger.warning("NOTE: %s", data_note)
        write_json(os.path.join(output_dir, run_rules.RUN_CONFIG), dataclasses.asdict(cfg))
        tokenizer = SentenceTokenizer(vocab, maxlen, get_architecture(cfg.architecture).word_level, lower)
        ids = {
            name: (
                tokenizer.encode_all(pairs.texts_a, f"{pairs.source}, first texts"),
                tokenizer.encode_all(pairs.texts_b, f"{pairs.source}, second texts"),
            )
            for name, pairs in (("train", data.train), ("valid", valid), ("test", test))
        }
        batches = pair_batches(
            keras, *ids["train"], data.train.labels, batch_size, cfg.seed, cfg.group_by_length, replicas
        )
        steps_per_epoch = cfg.steps_per_epoch or len(batches)
        with _scope(strategy):
            encoder = compiled_encoder(cfg, backbone, data.task, steps_per_epoch * epochs)

        def evaluate_valid() -> dict:
            return task_metrics(cosines(encoder, *ids["valid"]), valid.labels)

        # A bar redrawn in place only where Keras writes to a terminal (cosent-tf train: stderr), a
        # line an epoch elsewhere; the bar's logger first, so that it ends its line before validation speaks.
        progress_bar = live_progress_on(sys.stdout)
        _adopt_validation_record(output_dir)
        best_weights = os.path.join(output_dir, run_rules.BEST_WEIGHTS)
        validation = ValidationCheckpoint(
            lambda _: evaluate_valid(),
            best_weights,
            csv_path=os.path.join(output_dir, run_rules.VALID_METRICS),
            progress_bar=progress_bar,
        )
        backup = StepBackup(os.path.join(output_dir, run_rules.BACKUP))
        guard = StopOnNonFiniteLoss(
            kept=[
                ("the best weights so far", best_weights),
                ("the last saved training state", backup.backup_dir),
            ],
            advice="Lower --lr and run the command again; it resumes from the saved state.",
        )
        shown, verbose = epoch_progress(progress_bar)
        # the backup after validation: an epoch's state is saved after its validation
        fit_callbacks = [*shown, EpochSetter(batches), guard, validation, backup, *callbacks]
        try:
            encoder.fit(
                fit_input(keras, batches),
                epochs=epochs,
                steps_per_epoch=cfg.steps_per_epoch,
                callbacks=fit_callbacks,
                verbose=verbose,
                shuffle=False,
            )
        finally:
            backup.restore_signal_handlers()
        if validation.best_epoch is None:
            raise NonFiniteLossError("validation never gave a finite Spearman: the model diverged; nothing was saved")
        steps = validation.steps_done  # the model holds the best epoch's weights now
        logger.info("training done; scoring valid and test with the best weights")

        def unit_vectors(texts: Sequence[str]) -> np.ndarray:
            return l2_normalize(encode_ids(encoder, tokenizer.encode_all(texts, "retrieval texts")))

        per_task, decision = test_and_decide(
            cfg,
            data.evaluation,
            data.tasks,
            lambda _: (cosines(encoder, *ids["valid"]), cosines(encoder, *ids["test"])),
            lambda pairs, task: pair_retrieval(unit_vectors, pairs, task) or {},
            FEATURE.scored_by,
        )
        title = f"{cfg.kind} {cfg.loss} on {cfg.task}"
        plot_valid_curve(validation.history, os.path.join(output_dir, run_rules.VALID_CURVE), title)
        test = mean_over_tasks({name: results["test"] for name, results in per_task.items()})
        metrics = {
            "task": cfg.task,
            "kind": cfg.kind,
            "loss": cfg.loss,
            "architecture": cfg.architecture,
            "keras": 3,
            "backend": backend,
            "best_epoch": validation.best_epoch,
            "best_metric": "spearman",  # the one this route picks by (resolve refuses another)
            "best_valid": validation.best,
            "steps": steps,
            "train_pairs": len(data.train),
            "replicas": replicas,
            "comparable": not data.notes and data.task.data != FILES,
            "random_weights": random_weights,
            "notes": data.notes,
            "valid": mean_over_tasks({name: results["valid"] for name, results in per_task.items()}),
            "test": test,
            "tasks": per_task,
            "history": validation.history,
            "wall_seconds": round(time.time() - started, 1),
        }
        origin = {
            **model_origin(cfg, random_weights, validation.best_epoch, test),
            "keras": keras.__version__,
            "backend": backend,
            "precision": cfg.precision,
        }
        save_model_folder(
            os.path.join(output_dir, run_rules.MODEL),
            backbone,
            cfg.architecture,
            config,
            vocab,
            pooling=pooling,
            maxlen=maxlen,
            do_lower_case=lower,
            has_pooler=has_pooler,
            source=origin,
            decision=decision,
        )
        write_json(os.path.join(output_dir, run_rules.METRICS), metrics)
        # last: until metrics.json exists, a rerun resumes from the backup
        shutil.rmtree(os.path.join(output_dir, run_rules.BACKUP), ignore_errors=True)
        logger.info("%s", run_summary(metrics, os.path.join(output_dir, run_rules.MODEL)))
        return metrics


def _scope(strategy: Any) -> Any:
    """A fresh scope of ``strategy``, or no scope without one."""
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


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
    """Write the Keras 2 engine's model folder for a keras-hub ``backbone``, atomically:
    ``cosent_model.json``, ``bert_config.json``, a Google-format ``bert_model.ckpt`` (Google's
    variable names, :func:`cosent_tf.keras3.backbones.google_arrays`), ``vocab.txt`` and, given a
    ``decision``, ``decision.json`` (stamped with the weights' fingerprint, as the Keras 2 engine's).

    A keras-hub backbone always has BERT's pooler, random unless its source held one: pass
    ``has_pooler=False`` for such a backbone (the trainer does, from its source) and the pooler is
    written only when the pooling is ``pooler`` (then trained), as the Keras 2 builder does, so
    that a random pooler is never shipped as if it were trained. The default writes the backbone whole."""
    from .backbones import POOLER_NAMES, google_arrays

    spec = ModelSpec(
        FEATURE.name,
        architecture,
        pooling=pooling,
        maxlen=int(maxlen),
        do_lower_case=bool(do_lower_case),
        word_level=get_architecture(architecture).word_level,
        source=dict(source or {}),
    )
    arrays = {name: np.asarray(value, np.float32) for name, value in google_arrays(backbone, architecture).items()}
    if not has_pooler and pooling != "pooler":
        arrays = {name: value for name, value in arrays.items() if name not in POOLER_NAMES}
    write_model_folder(directory, arrays, spec, config, vocab_path, overwrite, decision)


def run_training(cfg: RunConfig, overwrite: bool = False, print_config: bool = False) -> dict:
    """``cosent-tf train --keras 3``: train ``cfg`` and print the Keras 2 engine's JSON line of its
    metrics (:func:`cosent_tf.training.run_results.printed_results`), the only line on stdout (the log
    and Keras's progress go to stderr), as the Keras 2 engine's command does; return all the metrics.

    ``print_config``: print the resolved settings instead, reading and writing nothing else."""
    from ..io import json_text

    if print_config:
        settings = dataclasses.asdict(resolve(cfg))
        print(json_text(settings, indent=2, ensure_ascii=False))
        return settings
    with contextlib.redirect_stdout(sys.stderr):
        metrics = train(cfg, overwrite)
    print(json_text(printed_results(metrics), ensure_ascii=False), flush=True)
    return metrics
