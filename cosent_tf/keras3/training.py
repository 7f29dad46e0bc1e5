"""Training on Keras 3: ``cosent-tf train --keras 3``, the Keras 2 engine's run of a feature model
(:func:`cosent_tf.training.engine.train`) on a keras-hub backbone, on the TensorFlow or JAX backend.

The run reads the same :class:`~cosent_tf.training.config.RunConfig`, the same data readers
(:mod:`cosent_tf.data`), tokenises with this project's :class:`~cosent_tf.models.tokenization.SentenceTokenizer`,
trains on interleaved pair batches (rows 2k and 2k+1 are pair k) with the loss of
:mod:`cosent_tf.keras3.losses`, validates Spearman after every epoch keeping the best weights, and
writes the SAME model folder as the Keras 2 engine (``cosent_model.json``, ``bert_config.json``, a
Google-format ``bert_model.ckpt`` and ``vocab.txt``), which ``cosent-tf evaluate`` and ``encode``
load. Nothing here imports the Keras 2 engine (:mod:`cosent_tf.backend`): one Keras per process.

What the Keras 2 engine does that this route does not is refused by option name
(:func:`unsupported_options`), never silently ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
from scipy import stats

from ..calibration import DECISION_FILE
from ..choices import CPU_DEVICES_VARIABLE
from ..data.benchmarks import load_task, senteval_dir, shared_vocab, task_file
from ..data.files import PairFileFormat, read_pair_file
from ..data.pairs import PairData
from ..data.tasks import CNSD, FILES, Task, get_task
from ..errors import ConfigError, DataError, NonFiniteLossError
from ..io import FolderKind, atomic_directory, read_json, write_json
from ..losses.registry import get_loss, keras3_losses
from ..models.checkpoint_files import CHECKPOINT_ENTRIES
from ..models.families import get_architecture
from ..models.kinds import FEATURE, get_kind
from ..models.spec import SPEC_FILE
from ..training.config import RunConfig
from ..training.recipes import get_recipe
from .runtime import backend_name, checked_keras, keras_hub_backbone

logger = logging.getLogger(__name__)

# The bundled small random BERT (cosent_tf/configs), used when a run names no config or checkpoint.
SMALL_RANDOM_CONFIG = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "bert-small-random.json")

# What a run writes into its output folder; the names are the Keras 2 engine's
# (cosent_tf.training.run_folder), which the Keras 3 route cannot import.
RUN_CONFIG = "config.json"
BEST_WEIGHTS = "best.weights.h5"  # Keras 3's own weights file of the best epoch (not the Keras 2 engine's)
VALIDATION_STATE = "validation.json"  # the best epoch so far and every validation, kept for a resumed run
METRICS = "metrics.json"
MODEL = "model"
BACKUP = "backup"

# The folder a model is written as: what cosent_tf.inference.model_dir.MODEL_FOLDER says (that module
# imports the Keras 2 engine): its marker, cosent_model.json, and its entries.
MODEL_FOLDER = FolderKind("a cosent-tf model folder", SPEC_FILE, CHECKPOINT_ENTRIES + (SPEC_FILE, DECISION_FILE))

# Variables that decoupled weight decay skips, as the Keras 2 engine (cosent_tf.optimizers.NOT_DECAYED)
# does: every variable but a kernel (embeddings, layer norms and biases).
DECAYED_SUFFIX = "kernel"


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
    if cfg.task and not cfg.train_file and get_task(cfg.task).data == CNSD:
        problems.append(f"{cfg.task}: NLI training (evaluated on every matching task) is the Keras 2 engine's only")
    return problems


def resolve(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its defaults filled in as :meth:`RunConfig.resolved` does for the Keras 2 engine
    (which opens the model source through the Keras 2 engine), and refused where Keras 3 cannot run it.

    Raises:
        ConfigError: a number out of range, an unknown task, loss or recipe, an architecture only
            Keras 2 has, or an option this route cannot honour (named, with why).
    """
    cfg.check()
    backend = backend_name()
    keras_hub_backbone(cfg.architecture)  # ConfigError for NEZHA, RoFormer, WoBERT
    problems = unsupported_options(cfg, backend)
    if problems:
        raise ConfigError("--keras 3 cannot run this: " + "; ".join(problems))
    task = Task(cfg.task, data=FILES) if cfg.train_file else get_task(cfg.task)
    kind, recipe = get_kind(cfg.kind), get_recipe(cfg.recipe)
    values = dataclasses.asdict(cfg)
    values["keras"] = 3
    values["maxlen"] = cfg.maxlen or kind.maxlen(task)
    values["batch_size"] = cfg.batch_size or recipe.batch_size or task.batch_size
    values["epochs"] = cfg.epochs or recipe.epochs or task.epochs
    values["steps_per_epoch"] = cfg.steps_per_epoch or task.steps_per_epoch
    for name in ("lr", "weight_decay", "warmup", "schedule"):
        values[name] = getattr(recipe, name) if getattr(cfg, name) is None else getattr(cfg, name)
    values["head_input"] = cfg.head_input or "cls"
    # A checkpoint's own pooling (a sentence-transformers folder's) is known once it is loaded (_train).
    values["pooling"] = cfg.pooling or (None if cfg.checkpoint else recipe.pooling)
    if cfg.checkpoint is None:
        values["config"] = cfg.config or SMALL_RANDOM_CONFIG
    values["vocab"] = cfg.vocab
    values["output_dir"] = cfg.output_dir or os.path.join("runs", f"{kind.output_prefix}{cfg.loss}-{cfg.task}")
    return RunConfig(**values)


# -- data ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _RunData:
    train: PairData
    valid: PairData
    test: PairData
    task: Task
    notes: list


def _load_data(cfg: RunConfig) -> _RunData:
    """The run's pairs, read as the Keras 2 engine reads them (a benchmark task, or the user's files
    with a seeded hold-out), sampled with ``max_train_pairs`` and ``max_eval_pairs``."""
    notes: list[str] = []
    if cfg.train_file:
        file_format = PairFileFormat(cfg.file_format, cfg.text_a_field, cfg.text_b_field, cfg.label_field)
        train = read_pair_file(cfg.train_file, file_format, cfg.strict)
        task = Task.for_labels(cfg.task, train.label_kind, float(train.labels.min()), float(train.labels.max()))
        if cfg.valid_file:
            valid = read_pair_file(cfg.valid_file, file_format, cfg.strict)
        else:
            order = np.random.default_rng(cfg.seed).permutation(len(train))
            cut = int(round(len(train) * cfg.valid_fraction))
            if not 0 < cut < len(train):
                raise DataError(
                    train.source, f"{len(train)} pairs: --valid-fraction {cfg.valid_fraction:g} leaves none on a side"
                )
            held = np.zeros(len(train), bool)
            held[order[:cut]] = True
            valid, train = train.subset(np.flatnonzero(held)), train.subset(np.flatnonzero(~held))
            notes.append(f"no --valid file: a seeded {cfg.valid_fraction:.0%} of {cfg.train_file} is held out as valid")
        if cfg.test_file:
            test = read_pair_file(cfg.test_file, file_format, cfg.strict)
        else:
            test = valid
            notes.append("no --test file: the test metrics are the valid ones")
    else:
        folder, task = senteval_dir(cfg.data_dir), get_task(cfg.task)
        if not os.path.exists(task_file(folder, cfg.task, "train")):
            raise DataError(task_file(folder, cfg.task, "train"), "the train split is not here (file does not exist)")
        train, valid, test = (load_task(folder, cfg.task, split, cfg.strict) for split in ("train", "valid", "test"))
    train = train.sample(cfg.max_train_pairs, cfg.seed)
    valid, test = valid.sample(cfg.max_eval_pairs, cfg.seed), test.sample(cfg.max_eval_pairs, cfg.seed)
    for pairs in (train, valid):
        if len(np.unique(pairs.labels)) < 2 and not (pairs is train and cfg.allow_single_label):
            raise DataError(pairs.source, f"all {len(pairs)} pairs have one label: there is nothing to rank")
    return _RunData(train, valid, test, task, notes)


def padded(rows: Sequence[Sequence[int]], multiple: int = 8) -> np.ndarray:
    """int32 token ids padded with 0 to the longest row rounded up to ``multiple`` (fewer shapes to
    compile than one a batch, far less padding than ``maxlen``)."""
    width = max(len(row) for row in rows)
    width = -(-width // multiple) * multiple
    out = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def pair_batch_order(count: int, batch_size: int, seed: int, epoch: int) -> np.ndarray:
    """The pairs of each batch of ``epoch``: a (batches, batch_size) array of pair indices, a seeded
    shuffle of its own for every epoch (so that a resumed run sees the batches an uninterrupted
    one would); the last partial batch is left out, so that every batch splits evenly over replicas."""
    order = np.random.default_rng([seed, epoch]).permutation(count)
    batches = max(1, count // batch_size)
    return order[: batches * batch_size].reshape(batches, -1) if count >= batch_size else order[None, :]


def pair_batches(keras: Any, ids_a: list, ids_b: list, labels: np.ndarray, batch_size: int, seed: int) -> Any:
    """A ``keras.utils.PyDataset`` of interleaved pair batches: x (2B, T) int32 token ids, rows 2k
    and 2k+1 the two texts of pair k, and y (2B,) float32, each pair's label on both its rows.
    Its ``epoch`` is set by :class:`_EpochSetter` before each epoch draws its batches."""

    class PairBatches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0

        def __len__(self) -> int:
            return len(pair_batch_order(len(ids_a), batch_size, seed, 0))

        def __getitem__(self, index: int) -> tuple:
            pairs = pair_batch_order(len(ids_a), batch_size, seed, self.epoch)[index]
            rows = [ids for i in pairs for ids in (ids_a[i], ids_b[i])]
            return padded(rows), np.repeat(np.asarray(labels, np.float32)[pairs], 2)

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
    a, b = encode_ids(encoder, ids_a).astype(np.float64), encode_ids(encoder, ids_b).astype(np.float64)
    a /= np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b /= np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return np.sum(a * b, axis=1)


def spearman(scores: np.ndarray, labels: np.ndarray) -> float:
    """Spearman's rank correlation, as :func:`cosent_tf.evaluation.spearman`."""
    return float(stats.spearmanr(scores, labels).correlation)


class _LinearWarmup:
    """Builds the Keras 3 schedule of the Keras 2 engine's :class:`cosent_tf.optimizers.WarmupSchedule`:
    ``peak · t / warmup`` while ``t < warmup``, then ``peak`` (constant) or linear decay to 0 at ``total``."""

    @staticmethod
    def make(keras: Any, peak: float, total: int, warmup: int, decay: str) -> Any:
        ops = keras.ops

        class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
            def __call__(self, step: Any) -> Any:
                step = ops.cast(step, "float32")
                factor = ops.convert_to_tensor(1.0)
                if decay == "linear":
                    factor = ops.maximum(0.0, (total - step) / max(1.0, total - warmup))
                if warmup:
                    factor = ops.where(step < warmup, step / warmup, factor)
                return peak * factor

            def get_config(self) -> dict:
                return {}

        return WarmupSchedule()


def build_optimizer(keras: Any, cfg: RunConfig, total_steps: int, variables: list) -> Any:
    """The engine's recipe on Keras 3: Adam at ``lr``, AdamW-style decoupled weight decay of the
    kernels when ``weight_decay`` is set, under the warm-up / linear schedule when asked for."""
    assert cfg.lr is not None and cfg.schedule is not None, "a resolved RunConfig"
    rate: Any = cfg.lr
    if cfg.warmup or cfg.schedule != "constant":
        rate = _LinearWarmup.make(keras, cfg.lr, total_steps, round((cfg.warmup or 0.0) * total_steps), cfg.schedule)
    optimizer = keras.optimizers.Adam(rate, weight_decay=cfg.weight_decay or None)
    if cfg.weight_decay:
        optimizer.exclude_from_weight_decay(
            var_list=[v for v in variables if not v.path.split("/")[-1].startswith(DECAYED_SUFFIX)]
        )
    return optimizer


def build_loss(cfg: RunConfig, task: Task) -> Any:
    """The run's feature loss from :mod:`cosent_tf.keras3.losses`, made by its row of the loss table."""
    return get_loss(cfg.kind, cfg.loss).build_keras3(
        scale=cfg.scale,
        epsilon=cfg.epsilon,
        max_label=task.max_label,
        positive_above=task.positive_above,
        global_batch=cfg.global_batch_loss,
    )


def compiled_encoder(keras: Any, cfg: RunConfig, backbone: Any, task: Task, total_steps: int) -> Any:
    """The encoder on ``backbone`` with ``cfg.pooling``, compiled with the run's loss and optimizer
    (under the active distribution strategy's scope when the caller opened one)."""
    from .encoder import build_encoder

    assert cfg.pooling is not None, "the run's pooling is resolved before the encoder is built"
    encoder = build_encoder(backbone, pooling=cfg.pooling)
    loss = build_loss(cfg, task)
    encoder.compile(optimizer=build_optimizer(keras, cfg, total_steps, encoder.trainable_variables), loss=loss)
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


class _EpochSetter:
    """Callback factory: tells the batches which epoch is starting (the resumed one too)."""

    @staticmethod
    def make(keras: Any, batches: Any) -> Any:
        class EpochSetter(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
                batches.epoch = epoch

        return EpochSetter()


def _validation(keras: Any, score: Callable[[], float], folder: str) -> Any:
    """A callback that scores valid after every epoch, keeps the best epoch's weights in
    ``folder``/best.weights.h5 and its record in validation.json (read back by a resumed run)."""
    weights_path, state_path = os.path.join(folder, BEST_WEIGHTS), os.path.join(folder, VALIDATION_STATE)

    class Validation(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.state: dict = {"best_epoch": None, "best": None, "history": []}
            if os.path.exists(state_path):
                self.state = read_json(state_path, "the run's validation record")

        def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
            value = score()
            loss = (logs or {}).get("loss")
            if loss is not None and not math.isfinite(float(loss)):
                raise NonFiniteLossError(f"the training loss is {loss} at epoch {epoch + 1}: lower --lr")
            logger.info("epoch %d: valid spearman %.4f", epoch + 1, value)
            self.state["history"].append({"epoch": epoch + 1, "spearman": value, "loss": loss})
            if math.isfinite(value) and (self.state["best"] is None or value > self.state["best"]):
                self.model.save_weights(weights_path)
                self.state.update(best=value, best_epoch=epoch + 1)
            write_json(state_path, self.state)

    return Validation()


def _prepare_folder(cfg: RunConfig, overwrite: bool) -> str:
    """Check the output folder: new, empty, this run's unfinished folder (resumed), or a finished
    one with ``overwrite`` (emptied); a ConfigError otherwise. Returns what happens, for the log."""
    folder = cfg.output_dir
    assert folder is not None
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    settings = json.loads(json.dumps(dataclasses.asdict(cfg)))
    if not names:
        os.makedirs(folder, exist_ok=True)
        return "a new run"
    if RUN_CONFIG not in names:
        raise ConfigError(f"{folder}: already exists and is not a cosent-tf run (it holds {', '.join(names[:8])})")
    if overwrite:
        for name in names:
            path = os.path.join(folder, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        return "--overwrite: the earlier run's outputs were removed"
    if METRICS in names:
        raise ConfigError(f"{folder}: holds a finished run (metrics.json): pass --overwrite, or another --output-dir")
    saved = read_json(os.path.join(folder, RUN_CONFIG), "the run's settings")
    changed = [
        key for key in sorted(set(saved) | set(settings)) if key != "epochs" and saved.get(key) != settings.get(key)
    ]
    if changed:
        raise ConfigError(
            f"{folder}: holds an unfinished run with other settings ({', '.join(changed)}): resume it with its own "
            "settings, or pass --overwrite"
        )
    return "resuming the unfinished run in this folder"


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
        The metrics written to ``metrics.json``: ``valid`` and ``test`` Spearman, ``best_epoch``,
        ``steps``, ``keras``, ``backend``, ``notes``.

    Raises:
        ConfigError: an option this route cannot honour (named), or an output folder that may not
            hold this run.
        DataError: a data file missing or unusable.
    """
    keras = checked_keras()
    cfg = resolve(cfg)
    started = time.time()
    data = _load_data(cfg)
    backend = backend_name()
    policy = keras.config.dtype_policy()
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        keras.utils.set_random_seed(cfg.seed)
        if cfg.precision == "bf16":
            keras.config.set_dtype_policy("mixed_bfloat16")
        return _train(keras, cfg, overwrite, data, backend, started, callbacks)
    finally:
        # Put back what can be put back: the dtype policy and Python's and NumPy's generators
        # (TensorFlow's and Keras's global seeds stay at the run's seed: neither says what it was).
        keras.config.set_dtype_policy(policy)
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _backbone(cfg: RunConfig) -> tuple:
    """(keras-hub backbone, BERT config dict, vocab path, lower-cases, pooling the source names)."""
    from .backbones import backbone_from_config, load_backbone

    if cfg.checkpoint:
        loaded = load_backbone(cfg.checkpoint, cfg.architecture)
        vocab = cfg.vocab or loaded.vocab_path or shared_vocab(cfg.data_dir, RunConfig.data_dir)
        return loaded.backbone, dict(loaded.config), vocab, loaded.do_lower_case, loaded.pooling
    assert cfg.config is not None
    config = read_json(cfg.config, "the BERT config")
    vocab = cfg.vocab or shared_vocab(cfg.data_dir, RunConfig.data_dir)
    return backbone_from_config(config, cfg.architecture), config, vocab, True, None


def _train(
    keras: Any, cfg: RunConfig, overwrite: bool, data: _RunData, backend: str, started: float, callbacks: Sequence[Any]
) -> dict:
    from ..models.tokenization import SentenceTokenizer

    strategy = _strategy(cfg)
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    output_dir, batch_size, epochs, maxlen = cfg.output_dir, cfg.batch_size, cfg.epochs, cfg.maxlen
    assert output_dir is not None and batch_size is not None and epochs is not None and maxlen is not None
    if batch_size % replicas:
        raise ConfigError(f"--batch-size {batch_size} cannot be shared equally by {replicas} replicas")
    with _scope(strategy):
        backbone, config, vocab, lower, source_pooling = _backbone(cfg)
    pooling = cfg.pooling or source_pooling or get_recipe(cfg.recipe).pooling
    cfg = dataclasses.replace(cfg, pooling=pooling, vocab=vocab)
    note = _prepare_folder(cfg, overwrite)
    logger.info("%s: %s (Keras 3, %s backend)", output_dir, note, backend)
    write_json(os.path.join(output_dir, RUN_CONFIG), dataclasses.asdict(cfg))
    tokenizer = SentenceTokenizer(vocab, maxlen, get_architecture(cfg.architecture).word_level, lower)
    ids = {
        name: (tokenizer.encode_all(pairs.texts_a, f"{pairs.source}, first texts"), tokenizer.encode_all(pairs.texts_b))
        for name, pairs in (("train", data.train), ("valid", data.valid), ("test", data.test))
    }
    batches = pair_batches(keras, *ids["train"], data.train.labels, batch_size, cfg.seed)
    steps_per_epoch = cfg.steps_per_epoch or len(batches)
    with _scope(strategy):
        encoder = compiled_encoder(keras, cfg, backbone, data.task, steps_per_epoch * epochs)

    def score_valid() -> float:
        return spearman(cosines(encoder, *ids["valid"]), data.valid.labels)

    validation = _validation(keras, score_valid, output_dir)
    backup = keras.callbacks.BackupAndRestore(
        os.path.join(output_dir, BACKUP), save_freq=cfg.backup_every or "epoch", delete_checkpoint=False
    )
    encoder.fit(
        fit_input(keras, batches),
        epochs=epochs,
        steps_per_epoch=cfg.steps_per_epoch,
        callbacks=[_EpochSetter.make(keras, batches), validation, backup, *callbacks],
        verbose=2,
        shuffle=False,
    )
    state = validation.state
    if state["best_epoch"] is None:
        raise NonFiniteLossError("validation never gave a finite Spearman: the model diverged; nothing was saved")
    steps = int(np.asarray(encoder.optimizer.iterations))  # before the best weights (and their step) return
    encoder.load_weights(os.path.join(output_dir, BEST_WEIGHTS))
    valid = spearman(cosines(encoder, *ids["valid"]), data.valid.labels)
    test = spearman(cosines(encoder, *ids["test"]), data.test.labels)
    metrics = {
        "task": cfg.task,
        "kind": cfg.kind,
        "loss": cfg.loss,
        "architecture": cfg.architecture,
        "keras": 3,
        "backend": backend,
        "best_epoch": state["best_epoch"],
        "steps": steps,
        "train_pairs": len(data.train),
        "replicas": replicas,
        "random_weights": not cfg.checkpoint,
        "notes": data.notes,
        "valid": {"spearman": valid},
        "test": {"spearman": test},
        "history": state["history"],
        "wall_seconds": round(time.time() - started, 1),
    }
    source = {
        "task": cfg.task,
        "loss": cfg.loss,
        "checkpoint": cfg.checkpoint and os.path.abspath(cfg.checkpoint),
        "random_weights": not cfg.checkpoint,
        "run": os.path.abspath(output_dir),
        "best_epoch": state["best_epoch"],
        "test": metrics["test"],
        "keras": keras.__version__,
        "backend": backend,
        "precision": cfg.precision,
    }
    save_model_folder(
        os.path.join(output_dir, MODEL),
        backbone,
        cfg.architecture,
        config,
        vocab,
        pooling=pooling,
        maxlen=maxlen,
        do_lower_case=lower,
        source=source,
    )
    write_json(os.path.join(output_dir, METRICS), metrics)
    shutil.rmtree(os.path.join(output_dir, BACKUP), ignore_errors=True)  # last: until metrics.json, a rerun resumes
    logger.info("%s: test spearman %.4f (best valid %.4f at epoch %d)", cfg.task, test, valid, state["best_epoch"])
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
    source: Optional[dict] = None,
    overwrite: bool = True,
) -> None:
    """Write the Keras 2 engine's model folder for a keras-hub ``backbone``, atomically:
    ``cosent_model.json``, ``bert_config.json``, a Google-format ``bert_model.ckpt`` (Google's
    variable names, :func:`cosent_tf.keras3.backbones.google_arrays`) and ``vocab.txt``."""
    from ..models.checkpoint_files import (
        CHECKPOINT_PREFIX,
        CHECKPOINT_STATE,
        CONFIG_FILE,
        VOCAB_FILE,
        write_checkpoint_arrays,
    )
    from ..models.spec import ModelSpec, write_spec
    from .backbones import google_arrays

    spec = ModelSpec(
        FEATURE.name,
        architecture,
        pooling=pooling,
        maxlen=int(maxlen),
        do_lower_case=bool(do_lower_case),
        word_level=get_architecture(architecture).word_level,
        source=dict(source or {}),
    )
    spec.check("cosent_model.json")
    arrays = {name: np.asarray(value, np.float32) for name, value in google_arrays(backbone, architecture).items()}
    with atomic_directory(directory, MODEL_FOLDER, overwrite) as tmp:
        write_checkpoint_arrays(os.path.join(tmp, CHECKPOINT_PREFIX), arrays)
        with open(os.path.join(tmp, "checkpoint"), "w", encoding="utf-8") as f:
            f.write(CHECKPOINT_STATE)
        with open(os.path.join(tmp, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
        shutil.copyfile(vocab_path, os.path.join(tmp, VOCAB_FILE))
        write_spec(tmp, spec)


def run_training(cfg: RunConfig, overwrite: bool = False, print_config: bool = False) -> dict:
    """``cosent-tf train --keras 3``: train ``cfg`` and print the metrics as JSON, the only line on
    stdout (the log and Keras's progress go to stderr), as the Keras 2 engine's command does.

    ``print_config``: print the resolved settings instead, reading and writing nothing else."""
    import sys

    from ..io import json_text

    if print_config:
        settings = dataclasses.asdict(resolve(cfg))
        print(json_text(settings, indent=2, ensure_ascii=False))
        return settings
    with contextlib.redirect_stdout(sys.stderr):
        metrics = train(cfg, overwrite)
    print(json_text(metrics, ensure_ascii=False), flush=True)
    return metrics
