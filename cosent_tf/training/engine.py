"""The training engine: one function trains, validates and tests every kind of matcher.

Per-dataset scripts are a few lines over :func:`cosent_tf.cli.train_main`, which parses the
options into a :class:`RunConfig` and calls :func:`train`. A run writes to its output folder:

* ``.cosent-run``       first, the marker that makes the folder a run's (only such a folder is
  resumed or replaced), with a fingerprint of every file the run reads: a run resumes only
  while they are unchanged;
* ``config.json``       the full, resolved configuration;
* ``best.weights.h5``   weights of the epoch with the best valid Spearman;
* ``valid_metrics.csv`` every validation (each epoch end, and every ``--eval-every`` steps);
* ``valid_curve.png``   valid Spearman against training steps;
* ``test_scores.npz``   test scores and labels per task (for similarity-distribution plots);
* ``model/``            the best model as a model folder (see :mod:`cosent_tf.inference.model_dir`),
  with the tuned threshold: ``SentenceEncoder.load`` / ``PairScorer.load`` and the
  ``cosent-tf`` command use it;
* ``metrics.json``      final metrics: ``test.spearman`` (and ``test.accuracy`` with the
  threshold tuned on valid, for binary tasks), per task under ``tasks``;
* ``backup/``           the training state while the run is unfinished, saved at every
  epoch end, every ``--backup-every`` steps, and on SIGTERM/SIGINT: the same command
  resumes an interrupted run from there, mid-epoch included. It is removed only once
  every other output is written, so a run killed while testing or saving finishes
  without training again.

A run holds a lock on its folder (``.lock``) from the moment it writes to it: a second run
aimed at the same folder stops with an error. Nothing is written before the data, config,
vocabulary and checkpoint have been read and checked; :mod:`cosent_tf.training.run_folder` has the
rules for finished and unfinished runs already in the folder.
"""

import contextlib
import dataclasses
import glob
import logging
import math
import numbers
import os
import re
import shutil
import stat
import time

import numpy as np

from ..backend import check_weights_may_change, dtype_policy, get_architecture, keras, policy_name, random_seed, tf
from ..callbacks import StartStep, StepBackup, StopOnNonFiniteLoss, ValidationCheckpoint
from ..data.files import (
    PairData,
    PairFileFormat,
    load_task,
    nli_files,
    read_nli,
    read_pair_file,
    senteval_dir,
    shared_vocab,
    task_file,
)
from ..data.pipeline import batches_per_epoch, interaction_dataset, pair_dataset
from ..data.tasks import CNSD, FILES, MATCHING_TASKS, Task, get_task
from ..errors import CheckpointError, ConfigError, DataError, NonFiniteLossError, WorkerLostError, where
from ..evaluation import mean_over_tasks, pair_retrieval, pair_scores, task_metrics
from ..experiments.report import plot_valid_curve
from ..huggingface import folders as huggingface
from ..inference.matchers import batched_outputs, l2_normalize
from ..inference.model_dir import SPEC_FILE, ModelSpec, hf_spec, read_spec, save_model_dir
from ..io import atomic_path, folder_lock, write_json
from ..losses import get_loss
from ..models.builders import build_encoder, build_interaction_model, check_maxlen
from ..models.checkpoints import checkpoint_files, open_checkpoint, read_config
from ..models.tokenization import SentenceTokenizer, check_vocab_size
from ..optimizers import build_optimizer
from .distribute import get_strategy, is_chief, started_together, worker
from .gradient_cache import GradientCacheModel
from .recipes import get_recipe
from .run_folder import check_run_folder, fingerprints, prepare_run_folder

logger = logging.getLogger(__name__)
SMALL_RANDOM_CONFIG = os.path.join(os.path.dirname(__file__), "configs", "bert-small-random.json")


@dataclasses.dataclass
class RunConfig:
    """Everything a training run depends on; ``None`` means the task's or loss's default.

    The fields are the command line's options (``--batch-size`` is ``batch_size``);
    :meth:`resolved` fills in the defaults, and ``config.json`` records the result.
    """

    task: str = "STS-B"
    kind: str = "feature"
    loss: str = "cosent"
    data_dir: str = "../shared/data"
    config: str = None
    checkpoint: str = None
    vocab: str = None
    architecture: str = "bert"
    pooling: str = None
    head_input: str = None
    maxlen: int = None
    batch_size: int = None
    epochs: int = None
    steps_per_epoch: int = None
    recipe: str = "blog"
    lr: float = None
    weight_decay: float = None
    warmup: float = None
    schedule: str = None
    scale: float = 20.0
    epsilon: float = 0.5
    seed: int = 42
    max_train_pairs: int = None
    max_eval_pairs: int = None
    train_from_valid: float = None
    eval_every: int = 0
    group_by_length: bool = True
    strict: bool = False
    backup_every: int = 0
    precision: str = "float32"
    strategy: str = "default"
    global_batch_loss: bool = True
    worker_timeout: float = 300.0
    micro_batch_size: int = None
    output_dir: str = None
    # A user's own files instead of a benchmark task (``task`` then names the run's task).
    train_file: str = None
    valid_file: str = None
    test_file: str = None
    file_format: str = None
    text_a_field: str = "sentence1"
    text_b_field: str = "sentence2"
    label_field: str = "label"
    valid_fraction: float = 0.1
    allow_single_label: bool = False

    def check(self) -> None:
        """Raise ConfigError naming the option if a number is not one, or out of its range
        (:data:`RANGES`); ``None`` (the default) passes."""
        for name, (low, low_included, high, high_included, what) in RANGES.items():
            value, option = getattr(self, name), f"--{name.replace('_', '-')} (RunConfig.{name})"
            if value is None:
                continue
            whole = isinstance(low, int) and (high is None or isinstance(high, int))
            if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
                raise ConfigError(f"{option} must be {'an integer' if whole else 'a number'}, not {value!r}")
            above = value >= low if low_included else value > low
            below = high is None or (value <= high if high_included else value < high)
            if not (math.isfinite(value) and above and below):
                bounds = f"{'at least' if low_included else 'above'} {low:g}"
                bounds += f" and {'at most' if high_included else 'below'} {high:g}" if high is not None else ""
                raise ConfigError(f"{option} is {value!r}: {what} must be {bounds}")

    def resolved(self) -> "RunConfig":
        """Fill in the defaults: what is not set comes from the recipe (:mod:`cosent_tf.training.recipes`),
        then the loss and task tables; and the config, vocab and output paths. The numbers are
        checked first (:meth:`check`)."""
        self.check()
        task = Task(self.task, data=FILES) if self.train_file else get_task(self.task)
        loss = get_loss(self.kind, self.loss)
        recipe = get_recipe(self.recipe)
        values = dataclasses.asdict(self)
        interaction = self.kind == "interaction"
        recipe_batch = recipe.nli_batch_size if task.data == CNSD else recipe.batch_size
        values["maxlen"] = self.maxlen or (task.interaction_maxlen if interaction else task.maxlen)
        values["batch_size"] = self.batch_size or recipe_batch or loss.batch_size or task.batch_size
        values["epochs"] = self.epochs or recipe.epochs or task.epochs
        values["steps_per_epoch"] = self.steps_per_epoch or task.steps_per_epoch
        for name in ("lr", "weight_decay", "warmup", "schedule"):
            values[name] = getattr(recipe, name) if getattr(self, name) is None else getattr(self, name)
        values["pooling"] = self.pooling or recipe.pooling
        values["head_input"] = self.head_input or "cls"
        if self.checkpoint:
            # A checkpoint folder, or a prefix inside one, brings its config and vocab along; a
            # Hugging Face folder also its pooling or head (see cosent_tf.inference.model_dir.hf_spec).
            config, _, vocab = checkpoint_files(self.checkpoint)
            values["config"] = self.config or config
            values["vocab"] = self.vocab or vocab
            if huggingface.is_hf_folder(self.checkpoint):
                spec = hf_spec(self.checkpoint)  # also refuses, now, a folder that cannot be built
                if huggingface.is_sentence_transformers_folder(self.checkpoint):
                    values["pooling"] = self.pooling or spec.pooling
                values["head_input"] = self.head_input or spec.head_input
        values["config"] = values["config"] or SMALL_RANDOM_CONFIG
        values["vocab"] = values["vocab"] or shared_vocab(self.data_dir, RunConfig.data_dir)
        prefix = "interact-" if interaction else ""
        values["output_dir"] = self.output_dir or os.path.join("runs", f"{prefix}{self.loss}-{self.task}")
        return RunConfig(**values)


# The numeric settings' ranges: name -> (low, low included, high or None, high included, what it is).
# An int bound makes the setting a whole number. The contrastive loss pushes a negative pair's
# cosine, which lies in [-1, 1], below epsilon: from 1 up it pushes nothing; below -1 it acts as -1.
RANGES = {
    "epsilon": (-1.0, True, 1.0, False, "the contrastive loss's cosine threshold"),
    "scale": (0.0, False, None, False, "CoSENT's scale (lambda)"),
    "lr": (0.0, False, None, False, "the learning rate"),
    "weight_decay": (0.0, True, None, False, "the weight decay"),
    "warmup": (0.0, True, 1.0, True, "the warm-up's fraction of all steps"),
    "valid_fraction": (0.0, False, 1.0, False, "the fraction of --train held out as valid"),
    "train_from_valid": (0.0, False, 1.0, False, "the fraction of valid trained on"),
    "worker_timeout": (0.0, False, None, False, "the wait for the other workers (seconds)"),
    "maxlen": (3, True, None, False, "the tokens per text"),
    "batch_size": (1, True, None, False, "the pairs per batch"),
    "epochs": (1, True, None, False, "the number of epochs"),
    "steps_per_epoch": (1, True, None, False, "the steps per epoch"),
    "max_train_pairs": (1, True, None, False, "the number of train pairs"),
    "max_eval_pairs": (1, True, None, False, "the number of valid and test pairs"),
    "eval_every": (0, True, None, False, "the steps between validations"),
    "backup_every": (0, True, None, False, "the steps between saves of the training state"),
    "micro_batch_size": (1, True, None, False, "the pairs per micro-batch"),
}


@dataclasses.dataclass
class RunData:
    """What a run trains and tests on: train pairs, (valid, test) per evaluated task and the
    :class:`~cosent_tf.data.tasks.Task` of each, the task train's labels belong to, notes
    for the user (recorded in metrics.json), and the data files read."""

    train: PairData
    evaluation: dict
    tasks: dict
    task: Task
    notes: list
    files: list = dataclasses.field(default_factory=list)  # every data file read


def check_inputs(cfg: RunConfig) -> None:
    """What a run reads that can be checked at once, before any data is read: the data folder
    (or the user's files), the config, the vocabulary and the checkpoint. Errors name the path
    (and, when it is relative, the folder it is relative to). Also that this process can train at
    all (:func:`cosent_tf.backend.check_weights_may_change`)."""
    check_weights_may_change()
    if cfg.train_file:
        for option, path in (("--train", cfg.train_file), ("--valid", cfg.valid_file), ("--test", cfg.test_file)):
            if path is not None and not os.path.exists(path):
                raise DataError(where(path), "file not found")
            if path is not None and not os.path.isfile(path):
                raise DataError(
                    where(path),
                    f"{option} is {_file_kind(path)}, not a regular file: a run reads its files again (to check, "
                    "before resuming, that they have not changed); save the data to a file and pass that",
                )
    elif not os.path.isdir(cfg.data_dir):
        raise DataError(
            where(cfg.data_dir),
            "data folder not found; pass --data-dir: the shared data root (with senteval_cn/, cnsd/ and vocab/) "
            "or a senteval_cn folder",
        )
    read_config(cfg.config)
    if not os.path.isfile(cfg.vocab):
        raise DataError(
            where(cfg.vocab),
            "vocabulary not found; pass --vocab (a checkpoint folder brings its own), or a --data-dir with vocab/",
        )
    check_vocab_size(cfg.config, cfg.vocab)
    check_maxlen(cfg.config, cfg.architecture, cfg.maxlen)
    if cfg.checkpoint and not os.path.exists(cfg.checkpoint) and not os.path.exists(cfg.checkpoint + ".index"):
        raise CheckpointError(f"{where(cfg.checkpoint)}: checkpoint not found")
    if cfg.checkpoint and not huggingface.is_hf_folder(cfg.checkpoint):
        open_checkpoint(cfg.checkpoint)  # a Google checkpoint's variable list: cheap, and it must be readable


def _file_kind(path):
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO), which can be read only once"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket or other special file"


def run_inputs(cfg: RunConfig, data: RunData) -> list:
    """Every file a run reads: its data files, the model config, the vocabulary and the
    checkpoint's weights (a Google checkpoint's ``.index`` and data files, or the weights file
    that a Hugging Face folder is read from)."""
    paths = [*data.files, cfg.config, cfg.vocab]
    if cfg.checkpoint and huggingface.is_hf_folder(cfg.checkpoint):
        folder = huggingface.transformer_folder(cfg.checkpoint)
        single, index, torch_file = (os.path.join(folder, name) for name in huggingface.WEIGHT_FILES)
        if os.path.isfile(single):
            paths.append(single)
        elif os.path.isfile(index):
            paths += [index, *sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))]
        else:
            paths.append(torch_file)
    elif cfg.checkpoint:
        prefix = checkpoint_files(cfg.checkpoint)[1]
        paths += sorted(p for p in glob.glob(glob.escape(prefix) + ".*") if os.path.isfile(p))
    return paths


def load_run_data(cfg: RunConfig) -> RunData:
    """The data of a configuration: a benchmark task's files, NLI, or the user's own files."""
    data = _load_files(cfg) if cfg.train_file else _load_benchmark(cfg)
    data.train = data.train.sample(cfg.max_train_pairs, cfg.seed)
    data.evaluation = {
        t: (v.sample(cfg.max_eval_pairs, cfg.seed), s.sample(cfg.max_eval_pairs, cfg.seed))
        for t, (v, s) in data.evaluation.items()
    }
    if data.task.data == FILES:
        if not cfg.allow_single_label:
            _require_two_labels(
                data.train,
                "there is nothing to rank, so CoSENT would learn nothing (pass --allow-single-label to train anyway)",
            )
    elif cfg.loss == "cosent":
        _require_two_labels(data.train, "CoSENT ranks pairs by their labels, so every step's loss would be 0")
    for valid, _ in data.evaluation.values():
        _require_two_labels(valid, "Spearman is undefined on them, so no epoch could be chosen as the best")
    return data


def _load_benchmark(cfg):
    folder, notes, task, files = senteval_dir(cfg.data_dir), [], get_task(cfg.task), []
    if task.data == CNSD:
        files = nli_files(cfg.data_dir)
        if not files:
            raise DataError(cfg.data_dir, "no cnsd-*/*.jsonl NLI files under this folder")
        train = PairData.concat([read_nli(p, cfg.strict) for p in files])
        tasks = MATCHING_TASKS
    else:
        tasks = (cfg.task,)
    evaluation = {
        t: (load_task(folder, t, "valid", cfg.strict), load_task(folder, t, "test", cfg.strict)) for t in tasks
    }
    files += [task_file(folder, t, split) for t in tasks for split in ("valid", "test")]
    if task.data != CNSD:
        train_path = task_file(folder, cfg.task, "train")
        if os.path.exists(train_path):
            train = load_task(folder, cfg.task, "train", cfg.strict)
            files.append(train_path)
        elif cfg.train_from_valid:
            valid, test = evaluation[cfg.task]
            train, valid = _hold_out(valid, cfg.train_from_valid, cfg.seed, "--train-from-valid", "trained on")
            evaluation[cfg.task] = (valid, test)
            notes.append(
                f"{train_path} does not exist: trained on a seeded {cfg.train_from_valid:.0%} "
                f"of valid ({len(train)} pairs) and validated on the rest; NOT comparable "
                "with published numbers"
            )
        else:
            raise DataError(
                train_path,
                f"the {cfg.task} train split is not here (file does not exist); "
                "pass --train-from-valid FRACTION to train on a seeded part of valid instead",
            )
    return RunData(train, evaluation, {t: get_task(t) for t in evaluation}, task, notes, files)


def _hold_out(pairs, fraction, seed, option, taken):
    """(a seeded ``fraction`` of ``pairs``, the rest), each in file order; a DataError naming the
    file if either part would be empty. ``option`` sets the fraction; ``taken``: what the fraction is."""
    order = np.random.default_rng(seed).permutation(len(pairs))
    cut = int(round(len(pairs) * fraction))
    if not 0 < cut < len(pairs):
        other = "validated on" if taken == "trained on" else "trained on"
        raise DataError(
            pairs.source,
            f"{len(pairs)} pair{'s' * (len(pairs) != 1)}: {option} {fraction:g} leaves {cut} to be {taken} and "
            f"{len(pairs) - cut} to be {other}, and a run needs both; use a larger file, another {option}"
            + (", or pass --valid FILE" if option == "--valid-fraction" else ""),
        )
    return pairs.subset(np.sort(order[:cut])), pairs.subset(np.sort(order[cut:]))


def _load_files(cfg):
    file_format = PairFileFormat(cfg.file_format, cfg.text_a_field, cfg.text_b_field, cfg.label_field)
    train = read_pair_file(cfg.train_file, file_format, cfg.strict)
    low, high = float(train.labels.min()), float(train.labels.max())
    task = Task.for_labels(cfg.task, train.label_kind, low, high)
    logger.info("%s: %d pairs, %s labels from %g to %g", cfg.train_file, len(train), train.label_kind, low, high)
    notes = []
    if cfg.valid_file:
        valid = read_pair_file(cfg.valid_file, file_format, cfg.strict)
    else:
        valid, train = _hold_out(train, cfg.valid_fraction, cfg.seed, "--valid-fraction", "held out as valid")
        notes.append(
            f"no --valid file: a seeded {cfg.valid_fraction:.0%} of {cfg.train_file} ({len(valid)} pairs) "
            f"is held out as valid; {len(train)} pairs are trained on"
        )
    if cfg.test_file:
        test = read_pair_file(cfg.test_file, file_format, cfg.strict)
    else:
        test = valid
        notes.append(
            "no --test file: the test metrics are the valid ones, measured on the data the best epoch "
            "(and the threshold) were chosen on, so they flatter the model"
        )
    for other in (valid, test):
        _require_same_kind(train, other)
    files = [path for path in (cfg.train_file, cfg.valid_file, cfg.test_file) if path]
    return RunData(train, {cfg.task: (valid, test)}, {cfg.task: task}, task, notes, files)


def _require_same_kind(train, other):
    kinds = (train.label_kind, other.label_kind)
    if train.label_words != other.label_words or (kinds[0] == "binary" and kinds[1] != "binary"):
        raise DataError(
            other.source,
            f"its labels are {kinds[1]} but those of the train file {train.source} are "
            f"{kinds[0]}: the files must label pairs the same way",
        )


def _require_two_labels(pairs, consequence):
    if not len(pairs):
        raise DataError(pairs.source, "holds no pairs")
    if len(np.unique(pairs.labels)) < 2:
        raise DataError(
            pairs.source,
            f"all {len(pairs)} pairs (after any sampling) have the label {pairs.labels[0]:g}: {consequence}",
        )


class Matcher:
    """A model being trained, with what scoring and batching it need.

    ``model`` is what gets saved and scored: a sentence encoder (feature kind, scored by
    the cosine of the two vectors) or a cross-encoder (interaction kind, scored by its
    head). The loss table entry says how it is trained.
    """

    def __init__(self, cfg: RunConfig, task: Task):
        self.cfg, self.task, self.loss = cfg, task, get_loss(cfg.kind, cfg.loss)
        if cfg.kind == "interaction" and self.task.data == CNSD:
            raise ValueError("interaction models are trained on one matching task, not on NLI")
        check_maxlen(cfg.config, cfg.architecture, cfg.maxlen)
        lower_case = huggingface.do_lower_case(cfg.checkpoint) if huggingface.is_hf_folder(cfg.checkpoint) else True
        self.tokenizer = SentenceTokenizer(
            cfg.vocab, cfg.maxlen, get_architecture(cfg.architecture).word_level, lower_case
        )
        settings = dict(maxlen=cfg.maxlen, word_level=self.tokenizer.word_level, do_lower_case=lower_case)
        if cfg.kind == "feature":
            self.model = build_encoder(cfg.config, cfg.checkpoint, cfg.architecture, cfg.pooling, vocab_path=cfg.vocab)
            self.spec = ModelSpec("feature", cfg.architecture, pooling=cfg.pooling, **settings)
        else:
            head = self.loss.interaction_head
            self.model = build_interaction_model(
                cfg.config, cfg.checkpoint, cfg.architecture, head, vocab_path=cfg.vocab, head_input=cfg.head_input
            )
            self.spec = ModelSpec(
                "interaction",
                cfg.architecture,
                pooling=None,
                head=head,
                head_input=cfg.head_input,
                pair_segments=cfg.head_input == "pooler",  # a Hugging Face style cross-encoder
                **settings,
            )
        self.sep_id = self.tokenizer.sep_id if self.spec.pair_segments else None

    def prepare(self, pairs: PairData):
        """Token ids of the pairs: (ids_a, ids_b) for an encoder, concatenated pairs otherwise."""
        if self.cfg.kind == "feature":
            return (
                self.tokenizer.encode_all(pairs.texts_a, f"{pairs.source}, first texts"),
                self.tokenizer.encode_all(pairs.texts_b, f"{pairs.source}, second texts"),
            )
        return self.tokenizer.encode_pairs(pairs.texts_a, pairs.texts_b, f"{pairs.source}, pairs")

    def scores(self, prepared):
        return pair_scores(self.model, self.cfg.kind, prepared, sep_id=self.sep_id)

    def retrieval(self, pairs: PairData, task: Task) -> dict:
        """Retrieval metrics of a feature model over the pairs (:func:`cosent_tf.evaluation.pair_retrieval`);
        empty when no pair is positive."""

        def vectors(texts):
            return l2_normalize(batched_outputs(self.model, self.tokenizer.encode_all(texts, "retrieval texts")))

        return pair_retrieval(vectors, pairs, task) or {}

    def training_model(self, labels):
        """(the Keras model to fit, its loss, the labels it is fitted on)."""
        cfg, task = self.cfg, self.task
        loss = self.loss.build(
            scale=cfg.scale,
            epsilon=cfg.epsilon,
            max_label=task.max_label,
            positive_above=task.positive_above,
            global_batch=cfg.global_batch_loss,
        )
        labels = task.classes(labels) if self.loss.on_classes else labels
        model = self.model
        if self.loss.training_head is not None:
            head = self.loss.training_head(int(labels.max()) + 1)
            model = keras.Model(model.inputs, head(model.output))
        if cfg.micro_batch_size:
            rows_per_pair = 2 if cfg.kind == "feature" else 1
            model = GradientCacheModel(model, cfg.micro_batch_size, rows_per_pair, seed=cfg.seed)
        return model, loss, labels

    def dataset(self, prepared, labels, start_step, replicas=1):
        cfg = self.cfg
        options = dict(
            group_by_length=cfg.group_by_length, seed=cfg.seed, start_step=start_step, repeat=True, replicas=replicas
        )
        if cfg.kind == "feature":
            return pair_dataset(*prepared, labels, cfg.batch_size, **options)
        return interaction_dataset(prepared, labels, cfg.batch_size, sep_id=self.sep_id, **options)


def train(cfg: RunConfig, overwrite: bool = False) -> dict:
    """Train, validate after every epoch, keep the best, test it; returns the metrics dict (on a
    multi-worker run's workers other than the chief, which write nothing: ``{"worker", "steps"}``).

    ``overwrite`` lets the run replace a finished (or differently set) run in its output
    folder; see :mod:`cosent_tf.training.run_folder`. The run seeds every generator and sets the
    Keras dtype policy of ``cfg.precision``; both are put back as they were on return.
    Under ``cfg.strategy`` (:mod:`cosent_tf.training.distribute`) the model, its optimizer and its
    loss are built in the strategy's scope and every batch is shared by its replicas.
    """
    cfg = cfg.resolved()
    strategy = get_strategy(cfg.strategy, cfg.worker_timeout)
    if cfg.batch_size % strategy.num_replicas_in_sync:
        raise ConfigError(
            f"--batch-size {cfg.batch_size} pairs cannot be shared equally by the {strategy.num_replicas_in_sync} "
            f"replicas of --strategy {cfg.strategy}: make it a multiple of that"
        )
    get_loss(cfg.kind, cfg.loss).check_batch(cfg.batch_size, strategy.num_replicas_in_sync, cfg.global_batch_loss)
    with random_seed(cfg.seed), dtype_policy(policy_name(cfg.precision)):
        return _train(cfg, overwrite, strategy)


# Said at the start of a run without --checkpoint, and recorded with its results.
RANDOM_WEIGHTS_NOTE = (
    "no --checkpoint: the model starts from random weights, which is fine for trying the engine but "
    "not for use: such a model gives unrelated sentences cosines near 1, and its figures are not "
    "comparable with a pretrained model's"
)
RANDOM_CHECKPOINT_NOTE = (
    "the --checkpoint model folder was itself trained from random weights, so this model is random at its root too"
)


def starts_from_random_weights(checkpoint) -> bool:
    """Whether a run from ``checkpoint`` starts from random weights: none given, or a model folder
    that was itself trained from random weights."""
    if not checkpoint:
        return True
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    if os.path.exists(os.path.join(folder, SPEC_FILE)):
        return bool(read_spec(folder).source.get("random_weights"))
    return False


def _train(cfg, overwrite, strategy):
    started = time.time()
    chief = is_chief(strategy)
    with contextlib.ExitStack() as run_folder_held:
        with started_together(strategy):
            check_inputs(cfg)
            random_weights = starts_from_random_weights(cfg.checkpoint)
            if random_weights:
                logger.warning("NOTE: %s", RANDOM_WEIGHTS_NOTE if not cfg.checkpoint else RANDOM_CHECKPOINT_NOTE)
            data = load_run_data(cfg)
            if chief:
                settings = dataclasses.asdict(cfg)
                paths = run_inputs(cfg, data)
                check_run_folder(cfg.output_dir, (*paths, cfg.checkpoint), settings)
                inputs = fingerprints(paths)
                run_folder_held.enter_context(folder_lock(cfg.output_dir, "training run"))
                start = prepare_run_folder(cfg.output_dir, settings, overwrite, inputs)
        train_pairs, evaluation, notes = data.train, data.evaluation, data.notes
        for note in notes:
            logger.warning("NOTE: %s", note)
        sizes = ", ".join(f"{t} {len(v)}/{len(s)}" for t, (v, s) in evaluation.items())
        logger.info("%s: %d train pairs; valid/test pairs: %s", cfg.task, len(train_pairs), sizes)

        with strategy.scope():
            matcher = Matcher(cfg, data.task)
        train_inputs = matcher.prepare(train_pairs)
        prepared = {t: (matcher.prepare(v), matcher.prepare(s)) for t, (v, s) in evaluation.items()}
        backup_dir = os.path.join(cfg.output_dir, "backup")
        if not chief:
            # The chief writes every output; this worker trains and validates in step with it and
            # resumes from the chief's backup (output_dir on a file system both can read).
            logger.info("%s: training in step with the chief, which writes %s", worker(strategy), cfg.output_dir)
            _, steps = _fit(cfg, matcher, train_pairs, train_inputs, prepared, evaluation, backup_dir, strategy, False)
            return {"worker": worker(strategy), "steps": steps}
        if start:
            logger.info("%s: %s", cfg.output_dir, start)
        write_json(os.path.join(cfg.output_dir, "config.json"), dataclasses.asdict(cfg))
        validation, steps = _fit(cfg, matcher, train_pairs, train_inputs, prepared, evaluation, backup_dir, strategy)
        logger.info("training done; scoring valid and test with the best weights")
        per_task = _test(cfg, matcher, prepared, evaluation, data.tasks)
        plot_valid_curve(
            validation.history, os.path.join(cfg.output_dir, "valid_curve.png"), f"{cfg.kind} {cfg.loss} on {cfg.task}"
        )
        metrics = {
            "task": cfg.task,
            "kind": cfg.kind,
            "loss": cfg.loss,
            "architecture": cfg.architecture,
            "best_epoch": validation.best_epoch,
            "steps": steps,
            "train_pairs": len(train_pairs),
            "replicas": strategy.num_replicas_in_sync,
            "comparable": not notes and data.task.data != FILES,
            "random_weights": random_weights,
            "notes": notes,
            "valid": mean_over_tasks({t: m["valid"] for t, m in per_task.items()}),
            "test": mean_over_tasks({t: m["test"] for t, m in per_task.items()}),
            "tasks": per_task,
            "wall_seconds": round(time.time() - started, 1),
        }
        matcher.spec.threshold = per_task[cfg.task]["test"].get("threshold") if cfg.task in per_task else None
        matcher.spec.source = {
            "task": cfg.task,
            "loss": cfg.loss,
            "checkpoint": cfg.checkpoint and os.path.abspath(cfg.checkpoint),
            "random_weights": random_weights,
            "run": os.path.abspath(cfg.output_dir),
            "best_epoch": validation.best_epoch,
            "test": metrics["test"],
        }
        save_model_dir(
            os.path.join(cfg.output_dir, "model"), matcher.model, matcher.spec, cfg.config, cfg.vocab, overwrite=True
        )
        write_json(os.path.join(cfg.output_dir, "metrics.json"), metrics)
        shutil.rmtree(backup_dir)  # last: until metrics.json exists, a rerun resumes from it
        return metrics


def _fit(cfg, matcher, train_pairs, train_inputs, prepared, evaluation, backup_dir, strategy, writes=True):
    """Train with validation, best-weight keeping and backups; (the validation callback, steps done).
    ``writes``: False on a worker other than the chief, which validates but writes nothing."""
    replicas = strategy.num_replicas_in_sync
    steps_per_epoch = cfg.steps_per_epoch or batches_per_epoch(len(train_pairs), cfg.batch_size, replicas)
    if replicas > 1:
        logger.info(
            "%d replicas (--strategy %s), %d pairs each a step; CoSENT ranks %s",
            replicas,
            cfg.strategy,
            cfg.batch_size // replicas,
            "the global batch" if cfg.global_batch_loss else "each replica's pairs alone (--per-replica-loss)",
        )
    if cfg.micro_batch_size:
        logger.info(
            "the gradient of each batch is computed %d pairs at a time (--micro-batch-size)", cfg.micro_batch_size
        )
    with strategy.scope():
        model, loss, labels = matcher.training_model(train_pairs.labels)
        total = steps_per_epoch * cfg.epochs
        scaled = cfg.precision == "fp16"
        optimizer = build_optimizer(cfg.lr, total, cfg.weight_decay, cfg.warmup, cfg.schedule, loss_scaling=scaled)
        model.compile(optimizer=optimizer, loss=loss)
        # The step counter is made on first use. Made now, it is made at the same moment on
        # every worker: under multi-worker each new variable is a collective broadcast, and
        # collectives must come in the same order everywhere.
        optimizer.iterations  # noqa: B018

    def evaluate_valid(_):
        return mean_over_tasks(
            {t: task_metrics(matcher.scores(prepared[t][0]), evaluation[t][0].labels) for t in evaluation}
        )

    progress_bar = os.isatty(1)
    validation = ValidationCheckpoint(
        evaluate_valid,
        os.path.join(cfg.output_dir, "best.weights.h5"),
        every_steps=cfg.eval_every,
        csv_path=os.path.join(cfg.output_dir, "valid_metrics.csv"),
        progress_bar=progress_bar,
        writes=writes,
    )
    backup = StepBackup(backup_dir, cfg.backup_every)
    guard = StopOnNonFiniteLoss(
        kept=[("the best weights so far", validation.weights_path), ("the last saved training state", backup_dir)],
        advice="Lower --lr (or use float32) and run the command again; it resumes from the saved state.",
    )
    start = StartStep()  # after the backup, which restores the step of a resumed run
    # the backup after validation: an epoch's state is saved after its validation
    callbacks = [guard, validation, backup, start]
    if progress_bar:  # first, so that the bar's line is finished before validation speaks
        callbacks.insert(0, keras.callbacks.ProgbarLogger(count_mode="steps"))
    try:
        model.fit(
            matcher.dataset(train_inputs, labels, start, replicas),
            epochs=cfg.epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=callbacks,
            verbose=1 if progress_bar else 2,
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


def _test(cfg, matcher, prepared, evaluation, tasks):
    """Valid and test metrics per task (accuracy at the valid-tuned threshold for binary tasks,
    and retrieval metrics of a feature model on a binary task's test pairs); the test scores
    and labels go to ``test_scores.npz``."""
    per_task, saved_scores = {}, {}
    for name, (valid_inputs, test_inputs) in prepared.items():
        valid_scores, test_scores = matcher.scores(valid_inputs), matcher.scores(test_inputs)
        valid, test = evaluation[name]
        binary = tasks[name].binary
        per_task[name] = {
            "valid": task_metrics(valid_scores, valid.labels, binary=binary),
            "test": task_metrics(test_scores, test.labels, valid_scores, valid.labels, binary=binary),
        }
        if binary and cfg.kind == "feature":
            per_task[name]["test"]["retrieval"] = matcher.retrieval(test, tasks[name])
        saved_scores[f"{name}.scores"], saved_scores[f"{name}.labels"] = test_scores, test.labels
    with atomic_path(os.path.join(cfg.output_dir, "test_scores.npz")) as tmp, open(tmp, "wb") as f:
        np.savez(f, **saved_scores)
    return per_task
