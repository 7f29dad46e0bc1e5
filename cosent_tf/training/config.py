"""A training run's settings: :class:`RunConfig`, each of whose fields is also a command-line option.

Each field declares its option once, in ``dataclasses.field(metadata=...)``: its help, its
flags, its choices (read from the tables that define them: kinds, losses, recipes, strategies,
architectures, pooling modes, precisions, schedules, file formats) and, for a number, its range
(:data:`RANGES`).
:func:`add_run_options` builds the argparse options from them, for the training scripts
(:mod:`cosent_tf.experiments.scripts`) and for ``cosent-tf train`` alike; :func:`run_config`
turns the parsed options back into a :class:`RunConfig`.

Neither importing this module nor building or running its parser imports TensorFlow: those
tables are plain data (:mod:`cosent_tf.choices`, :mod:`cosent_tf.models.kinds`,
:mod:`cosent_tf.models.families`, :mod:`cosent_tf.losses.registry`), so that ``cosent-tf train
--help`` answers at once; TensorFlow comes with the model source (:meth:`RunConfig.model_source`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import numbers
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..choices import BEST_METRICS, CPU_DEVICES_VARIABLE, POOLING_MODES, PRECISIONS, SCHEDULES, STRATEGIES
from ..data.benchmarks import shared_vocab
from ..data.files import FILE_FORMATS
from ..data.tasks import CNSD, FILES, Task, get_task
from ..environment import keras3_process
from ..errors import ConfigError
from ..losses.registry import (
    FEATURE,
    GROUPS,
    LOSSES,
    MIX_WEIGHTS,
    LossEntry,
    best_metric_defaults,
    get_loss,
    group_losses,
    in_batch_losses,
    loss_names,
    mix_losses,
)
from ..models.families import ARCHITECTURES
from ..models.kinds import HEAD_INPUTS, KINDS, ModelKind, get_kind
from .recipes import RECIPES, get_recipe

# The Kerases a run may train on (--keras).
KERAS_VERSIONS = [2, 3]

if TYPE_CHECKING:  # it imports TensorFlow, which a parser of these options does not need
    from ..models.sources import ModelSource
    from ..models.spec import FolderSetting

logger = logging.getLogger(__name__)

# The groups of options (each field's metadata "group"): which parser offers which.
TASK_DATA = "task data"  # a benchmark task's data: the training scripts only
OWN_FILES = "own files"  # a user's pair files: cosent-tf train only
FILE_FORMAT = "file format"  # how a pair file is read: cosent-tf train and evaluate
MODEL_KIND = "model kind"  # the kind and loss: set by a training script, options of cosent-tf train
ENGINE = "engine"  # model, batching, optimisation, output: every way of training

# The settings of a user's own files are those of a task with no settings of its own.
_OWN_FILES_TASK = Task("own", data=FILES)


def _task_default(name: str, before: str = "") -> str:
    return (
        f"default: {before}the task's, as in the original scripts (cosent_tf.data.tasks); for your own files "
        f"{getattr(_OWN_FILES_TASK, name)}"
    )


def _option(default: Any, group: Optional[str], help: Any = None, **settings: Any) -> Any:
    """A RunConfig field with its command-line option (see :func:`add_run_options` for the keys)."""
    return dataclasses.field(default=default, metadata={"group": group, "help": help, **settings})


def _losses_by_kind() -> str:
    return "; ".join(f"{kind}: {', '.join(loss_names(kind))}" for kind in KINDS) + " (default cosent)"


def _reading(option: str) -> tuple[str, ...]:
    """The feature losses whose ``make`` reads ``option`` (:attr:`~cosent_tf.losses.registry.LossEntry.reads`)."""
    return tuple(name for (kind, name), entry in LOSSES.items() if kind == FEATURE and option in entry.reads)


def _for_losses(names: tuple[str, ...]) -> str:
    return "--loss " + (f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0])


def widths(text: str) -> list[int]:
    """An argparse type: comma-separated vector widths, each a positive integer, none twice
    (``--matryoshka-dims 312,128,64``).

    Example:
        >>> widths("312,128,64")
        [312, 128, 64]
    """
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} in {text!r} is not an integer") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"each width must be at least 1, got {value} in {text!r}")
        values.append(value)
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} names a width twice")
    return values


def weight_list(text: str) -> list[float]:
    """An argparse type: comma-separated finite weights of at least 0 (``--matryoshka-weights 1,1,0.5``).

    Example:
        >>> weight_list("1,0.5")
        [1.0, 0.5]
    """
    values = []
    for part in text.split(","):
        value = finite_number(part)
        if value < 0:
            raise argparse.ArgumentTypeError(f"each weight must be at least 0, got {part} in {text!r}")
        values.append(value)
    return values


def _recipe_help() -> str:
    described = "; ".join(f"{recipe.name}: {recipe.title}" for recipe in RECIPES.values())
    return described.replace("%", "%%") + ". Each of its settings is overridden by its own option"


def finite_number(text: str) -> float:
    """An argparse type: a finite float (``nan`` and ``inf`` parse as floats, but mean nothing here).

    Args:
        text: the option's value as typed.

    Returns:
        The number.

    Raises:
        argparse.ArgumentTypeError: ``text`` is no number, or not a finite one.

    Example:
        >>> finite_number("0.5")
        0.5
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def number_in_range(
    number_type: type, low: float, high: Optional[float] = None, low_included: bool = True
) -> Callable[[str], Any]:
    """An argparse type: ``number_type`` (int or float) in [low, high] (or (low, high]).

    Args:
        number_type: ``int`` or ``float``.
        low: the smallest value, or the bound every value lies above.
        high: the largest value; None for no upper bound.
        low_included: whether ``low`` itself is allowed.

    Returns:
        The parsing function; its errors say which bound was crossed.

    Example:
        >>> number_in_range(int, 1)("3")
        3
    """

    def parse(text: str) -> Any:
        try:
            value = number_type(text)
        except ValueError:
            what = "an integer" if number_type is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        above = value >= low if low_included else value > low
        if not (above and (high is None or value <= high) and math.isfinite(value)):
            limit = f"{'at least' if low_included else 'above'} {low:g}" + (
                f" and at most {high:g}" if high is not None else ""
            )
            raise argparse.ArgumentTypeError(f"must be {limit}, got {text}")
        return value

    return parse


@dataclasses.dataclass
class RunConfig:
    """Everything a training run depends on; ``None`` means the task's, recipe's or loss's default.

    The fields are the command line's options (``--batch-size`` is ``batch_size``), each declared
    once here with its help and choices (:func:`add_run_options`). :meth:`resolved` fills in the
    defaults, and the run's ``config.json`` records the result.

    Attributes:
        task: a benchmark task (``STS-B``, ``NLI``, ...) or, with ``train_file``, the run's name.
        kind: ``feature`` (a sentence encoder) or ``interaction`` (a cross-encoder).
        loss: a loss of that kind (:data:`cosent_tf.losses.LOSSES`).
        output_dir: the run folder (default ``runs/[interact-]LOSS-TASK``).

    Example:
        >>> config = RunConfig(task="BQ", loss="cosent", epochs=1, output_dir="runs/bq").resolved()
        >>> config.batch_size
        32
    """

    task: str = _option("STS-B", None)
    kind: str = _option(
        "feature", MODEL_KIND, "a sentence encoder scored by cosine, or a cross-encoder", choices=list(KINDS)
    )
    loss: str = _option("cosent", MODEL_KIND, _losses_by_kind())
    data_dir: str = _option(
        "../shared/data", TASK_DATA, "shared data root (with senteval_cn/, cnsd/, vocab/) or a senteval_cn folder"
    )
    config: Optional[str] = _option(
        None, ENGINE, "BERT config json (default: the checkpoint's, else a small random L4/H312 BERT)"
    )
    checkpoint: Optional[str] = _option(
        None,
        ENGINE,
        "a Google-format checkpoint folder or prefix, a Hugging Face model folder (model.safetensors or "
        "pytorch_model.bin), or a sentence-transformers folder, whose pooling is then the default",
    )
    vocab: Optional[str] = _option(None, ENGINE, "vocab.txt (default: the checkpoint folder's, else the shared one)")
    architecture: str = _option(
        "bert",
        ENGINE,
        "the transformer family (--model is its old name)",
        flags=("--architecture", "--model"),
        choices=sorted(ARCHITECTURES),
    )
    keras: Optional[int] = _option(
        None,
        ENGINE,
        "2: tf-keras with bert4keras backbones (the default); 3: Keras 3 with keras-hub backbones, on the backend "
        "KERAS_BACKEND names (tensorflow or jax): the same engine, run folder and model folder, for the "
        "architectures keras-hub has a backbone for; an option it cannot honour is refused by name",
        choices=KERAS_VERSIONS,
        type=int,
    )
    pooling: Optional[str] = _option(
        None,
        ENGINE,
        "feature models (default: a sentence-transformers checkpoint's, else the recipe's: cls, paper last-avg)",
        choices=list(POOLING_MODES),
    )
    head_input: Optional[str] = _option(
        None,
        ENGINE,
        "what an interaction model's head reads: cls, the [CLS] hidden state (the original experiments), or "
        "pooler, BERT's pooler (dense + tanh on [CLS]) as Hugging Face's BertForSequenceClassification, which "
        "`cosent-tf export --format hf` needs (default: pooler for such a checkpoint, else cls)",
        flags=("--head",),
        choices=HEAD_INPUTS,
    )
    maxlen: Optional[int] = _option(
        None,
        ENGINE,
        "tokens per text (interaction: per pair), [CLS] and [SEP] included; longer ones are cut, and the "
        "run reports how many and the longest; time and memory grow with it (attention with its square); "
        + _task_default("maxlen", "a sentence-transformers checkpoint's max_seq_length (feature models), else ")
        + f" (interaction: {_OWN_FILES_TASK.interaction_maxlen})",
    )
    batch_size: Optional[int] = _option(
        None, ENGINE, f"pairs per batch ({_for_losses(group_losses())}: examples); " + _task_default("batch_size")
    )
    epochs: Optional[int] = _option(None, ENGINE, _task_default("epochs"))
    steps_per_epoch: Optional[int] = _option(None, ENGINE, "default: one pass over train (NLI 5000)")
    recipe: str = _option("blog", ENGINE, _recipe_help(), choices=list(RECIPES))
    lr: Optional[float] = _option(
        None,
        ENGINE,
        "peak learning rate (default: the recipe's: "
        + ", ".join(f"{recipe.name} {recipe.lr:g}" for recipe in RECIPES.values())
        + ")",
    )
    weight_decay: Optional[float] = _option(
        None,
        ENGINE,
        "decoupled (AdamW-style) weight decay of every kernel; embeddings, layer norms and biases are "
        "not decayed (default: 0, paper recipe 0.01)",
    )
    warmup: Optional[float] = _option(
        None,
        ENGINE,
        "linear learning-rate warm-up over this fraction of all steps (default: 0, paper recipe 0.1)",
        metavar="FRACTION",
    )
    schedule: Optional[str] = _option(
        None,
        ENGINE,
        "after the warm-up: a constant learning rate, or linear decay to 0 at the last step "
        "(default: constant, paper recipe linear)",
        choices=SCHEDULES,
    )
    scale: float = _option(
        20.0, ENGINE, f"the scale (lambda) of the cosines of {_for_losses(_reading('scale'))} (feature models)"
    )
    # Parsed as any finite number, so that a value out of RANGES is RunConfig.check's error.
    epsilon: float = _option(
        0.5, ENGINE, f"{_for_losses(_reading('epsilon'))}: its cosine threshold", type=finite_number
    )
    group_size: Optional[int] = _option(
        None,
        ENGINE,
        f"{_for_losses(group_losses())}: texts per example, an anchor, its positive and N - 2 hard negatives (an "
        "example with more gets a fresh draw of them every epoch; one with fewer is refused); default: 2 + the "
        "fewest negatives any example has",
        metavar="N",
    )
    hard_negatives_from_labels: Optional[bool] = _option(
        None,
        ENGINE,
        f"{_for_losses(group_losses())} on labelled pairs: the texts an anchor's pairs label as no match become "
        "its hard negatives (an anchor with none gets a random text of the data); default: on for NLI "
        "(premise, entailment, contradiction), off elsewhere (in-batch negatives only)",
        action=argparse.BooleanOptionalAction,
    )
    symmetric: bool = _option(
        False,
        ENGINE,
        f"{_for_losses(in_batch_losses())}: each positive must also pick its own anchor among the batch's anchors "
        "(sentence-transformers' doc_to_query direction)",
    )
    cosine_weight: Optional[float] = _option(
        None, ENGINE, f"{_for_losses(mix_losses())}: the weight of CoSENT (default {MIX_WEIGHTS[0]:g})"
    )
    ibn_weight: Optional[float] = _option(
        None, ENGINE, f"{_for_losses(mix_losses())}: the weight of the in-batch negatives (default {MIX_WEIGHTS[1]:g})"
    )
    angle_weight: Optional[float] = _option(
        None, ENGINE, f"{_for_losses(mix_losses())}: the weight of the angle ranking (default {MIX_WEIGHTS[2]:g})"
    )
    matryoshka_dims: Optional[list[int]] = _option(
        None,
        ENGINE,
        "feature models: also train the first D dimensions of the vectors for each D of the list (Matryoshka), "
        "so that `--dim D` vectors cut from the model work nearly as well as vectors trained at width D; the loss "
        "is the weighted sum of the loss at each width; include the full width to keep training it (the model "
        "folder records the widths)",
        type=widths,
        metavar="D1,D2,...",
    )
    matryoshka_weights: Optional[list[float]] = _option(
        None,
        ENGINE,
        "--matryoshka-dims: the weight of each width (default 1 each)",
        type=weight_list,
        metavar="W1,W2,...",
    )
    keep_duplicates_apart: bool = _option(
        True,
        ENGINE,
        f"{_for_losses(in_batch_losses())} keep examples that share a text out of one batch, where the text "
        "would be a false negative (the run says how many it moved); this lets the shuffle put them together",
        flags=("--allow-duplicates-in-batch",),
    )
    seed: int = _option(42, ENGINE, type=int)
    max_train_pairs: Optional[int] = _option(None, ENGINE, "train on a seeded subsample")
    max_eval_pairs: Optional[int] = _option(None, ENGINE, "validate and test on seeded subsamples")
    train_from_valid: Optional[float] = _option(
        None,
        TASK_DATA,
        "when the task has no train split, train on this seeded part of valid "
        "(results are then not comparable with published numbers)",
        metavar="FRACTION",
    )
    eval_every: int = _option(0, ENGINE, "also validate every STEPS steps (for convergence curves)", metavar="STEPS")
    best_metric: Optional[str] = _option(
        None,
        ENGINE,
        "the valid figure whose highest value picks the best epoch, whose weights the model keeps: spearman or "
        "pearson of the valid pairs' scores, or a retrieval figure of the valid pairs made a search (a feature "
        "model's; spearman when valid has no positive pair, which the run says); default: what the loss trains "
        f"for, {best_metric_defaults()}",
        choices=list(BEST_METRICS),
    )
    group_by_length: bool = _option(True, ENGINE, flags=("--no-group-by-length",))
    strict: bool = _option(
        False,
        ENGINE,
        "any line the readers would skip or flag (wrong field count, empty text, repeated "
        "pair, NLI label '-') is an error naming file and line, instead of a warning",
    )
    backup_every: int = _option(
        0,
        ENGINE,
        "also save the training state every STEPS steps (it is always saved at epoch ends and on SIGTERM/SIGINT)",
        metavar="STEPS",
    )
    precision: str = _option(
        "float32",
        ENGINE,
        "bf16: mixed bfloat16 (fast on CPUs with AVX512-BF16 or AMX, and on recent GPUs); fp16: mixed "
        "float16 with dynamic loss scaling, for GPUs without bfloat16 (T4, V100; slow on a CPU)",
        choices=list(PRECISIONS),
    )
    strategy: str = _option(
        "default",
        ENGINE,
        "train on one device (default), on every device of this machine (mirrored), or across machines "
        "(multi-worker, the cluster in TF_CONFIG); --batch-size stays the global number of pairs. Without "
        f"accelerators, mirrored has one device unless the environment variable {CPU_DEVICES_VARIABLE}=N splits "
        "the CPU into N logical devices, N replicas (to try the strategies; no faster than one device)",
        choices=STRATEGIES,
    )
    global_batch_loss: bool = _option(
        True,
        ENGINE,
        "under a strategy with several replicas (mirrored or multi-worker), CoSENT ranks each replica's slice of "
        "the batch alone instead of the global batch (for comparison)",
        flags=("--per-replica-loss",),
    )
    worker_timeout: float = _option(
        300.0,
        ENGINE,
        "--strategy multi-worker: how long a worker waits for the others to start before it stops with an "
        "error naming them (default: %(default)g)",
        metavar="SECONDS",
    )
    micro_batch_size: Optional[int] = _option(
        None,
        ENGINE,
        "compute each batch's gradient PAIRS pairs at a time (gradient cache): the exact gradient of the "
        f"whole --batch-size batch in the memory of PAIRS pairs, for about one more forward pass "
        f"({_for_losses(group_losses())}: examples, each its anchor, positive and hard negatives)",
        metavar="PAIRS",
    )
    output_dir: Optional[str] = _option(
        None,
        ENGINE,
        "a new or empty folder, or this run's own folder to resume it; default: runs/LOSS-TASK (runs/cosent-pairs "
        "for --train pairs.tsv; interaction models: runs/interact-LOSS-TASK)",
    )
    # A user's own files instead of a benchmark task (``task`` then names the run's task).
    train_file: Optional[str] = _option(None, OWN_FILES, flags=("--train",), metavar="FILE", required=True)
    valid_file: Optional[str] = _option(
        None,
        OWN_FILES,
        "default: a seeded --valid-fraction of --train, held out (the run says so)",
        flags=("--valid",),
        metavar="FILE",
    )
    test_file: Optional[str] = _option(
        None,
        OWN_FILES,
        "default: none, and the final metrics are the valid ones (the run says so)",
        flags=("--test",),
        metavar="FILE",
    )
    file_format: Optional[str] = _option(
        None,
        FILE_FORMAT,
        "default: from the extension (.tsv .txt .data: TSV; .csv: CSV; .jsonl .json: JSONL)",
        flags=("--format",),
        choices=FILE_FORMATS,
    )
    text_a_field: str = _option("sentence1", FILE_FORMAT, "CSV column / JSON field of the first text")
    text_b_field: str = _option("sentence2", FILE_FORMAT, "CSV column / JSON field of the second text")
    label_field: str = _option("label", FILE_FORMAT, "CSV column / JSON field of the label (gold_label for CNSD)")
    valid_fraction: float = _option(0.1, OWN_FILES, metavar="FRACTION")
    allow_single_label: bool = _option(
        False, OWN_FILES, "train even if every train pair has the same label (nothing to rank)"
    )

    def check(self) -> None:
        """Check every number against its range (:data:`RANGES`); ``None`` (the default) passes.

        Raises:
            ConfigError: naming the option, if a number is not one or lies out of its range.

        Example:
            >>> RunConfig(epochs=0).check()
            Traceback (most recent call last):
            cosent_tf.errors.ConfigError: --epochs (RunConfig.epochs) is 0: the number of epochs must be at least 1
        """
        if self.keras is not None and (isinstance(self.keras, bool) or self.keras not in KERAS_VERSIONS):
            raise ConfigError(
                f"--keras (RunConfig.keras) is {self.keras!r}: choose {' or '.join(map(str, KERAS_VERSIONS))}"
            )
        for name, (low, low_included, high, high_included, what) in RANGES.items():
            value: Any = getattr(self, name)
            option = f"--{name.replace('_', '-')} (RunConfig.{name})"
            if value is None:
                continue
            whole = _whole(name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
                raise ConfigError(f"{option} must be {'an integer' if whole else 'a number'}, not {value!r}")
            above = value >= low if low_included else value > low
            below = high is None or (value <= high if high_included else value < high)
            if not (math.isfinite(value) and above and below):
                bounds = f"{'at least' if low_included else 'above'} {low:g}"
                bounds += f" and {'at most' if high_included else 'below'} {high:g}" if high is not None else ""
                raise ConfigError(f"{option} is {value!r}: {what} must be {bounds}")

    def resolved(self, source: Optional[ModelSource] = None) -> RunConfig:
        """The configuration with its defaults filled in.

        What is not set comes from the model source (a sentence-transformers folder's length and
        pooling, :func:`folder_defaults`; a Hugging Face classifier's head input), the recipe
        (:mod:`cosent_tf.training.recipes`), the loss and task tables; and the config, vocab and
        output paths. The numbers are checked first (:meth:`check`).

        Args:
            source: the run's model source when the caller has opened it (:meth:`model_source`);
                None opens it here.

        Returns:
            A new RunConfig with no default left unresolved.

        Raises:
            ConfigError: a number out of range, an unknown task, loss or recipe, or a model config
                that is unreadable or wrong.
            CheckpointError: a hub name given as the checkpoint (nothing is downloaded).

        Example:
            >>> RunConfig(task="BQ").resolved().output_dir
            'runs/cosent-BQ'
        """
        return self.resolve(source)[0]

    def resolve(self, source: Optional[ModelSource] = None) -> tuple[RunConfig, ModelSource]:
        """:meth:`resolved`, and the model source it was resolved with, for a caller that goes on
        to build the model: the source has read the model config, and reads the vocabulary and the
        checkpoint on first use, once for the whole run.

        Args:
            source: as :meth:`resolved`'s.

        Returns:
            ``(the resolved configuration, its model source)``.

        Raises:
            ConfigError: as :meth:`resolved`.
            CheckpointError: as :meth:`resolved`.

        Example:
            >>> cfg, source = RunConfig(task="BQ").resolve()  # doctest: +SKIP
            >>> cfg.config == source.config_path  # doctest: +SKIP
            True
        """
        self.check()
        if not keras3_process():
            if self.keras == 3:  # the process holds Keras 2: the run would train on it all the same
                raise ConfigError(
                    "--keras 3: this process holds the Keras 2 engine; train it with `cosent-tf train --keras 3` "
                    "or cosent_tf.keras3.train, in a process that has not imported cosent_tf's Keras 2 modules"
                )
            return self.filled_in(source)
        if self.keras == 2:
            raise ConfigError(
                "--keras 2: this process holds Keras 3 (cosent_tf.keras3 was imported); train it with `cosent-tf "
                "train` or cosent_tf.train in a process of its own"
            )
        from ..keras3.runtime import accelerated, backend_name, keras_hub_backbone
        from .keras_support import unsupported_options

        keras_hub_backbone(self.architecture)  # ConfigError for NEZHA, RoFormer, WoBERT
        problems = unsupported_options(self, backend_name(), accelerated())
        if problems:
            raise ConfigError("--keras 3 cannot run this: " + "; ".join(problems))
        resolved, source = self.filled_in(source)
        return dataclasses.replace(resolved, keras=3), source

    def filled_in(self, source: Optional[ModelSource] = None) -> tuple[RunConfig, ModelSource]:
        """The defaults of :meth:`resolve`, which both Kerases' trainers fill in alike, and the model
        source they come from; neither the numbers nor the Keras are checked (the caller has done so:
        :meth:`resolve`).

        Args:
            source: as :meth:`resolved`'s.

        Returns:
            ``(the configuration with its defaults filled in, its model source)``.

        Raises:
            ConfigError: as :meth:`resolved`.
            CheckpointError: as :meth:`resolved`.

        Example:
            >>> RunConfig(task="BQ", keras=3).filled_in()[0].batch_size  # doctest: +SKIP
            64
        """
        task = Task(self.task, data=FILES) if self.train_file else get_task(self.task)
        loss = get_loss(self.kind, self.loss)
        kind = get_kind(self.kind)
        recipe = get_recipe(self.recipe)
        self._refuse_unread(loss, kind)  # before the model source is opened, as anything is read
        if source is None:
            source = self.model_source()
        values = dataclasses.asdict(self)
        folder = folder_defaults(self, source.settings)
        recipe_batch = recipe.nli_batch_size if task.data == CNSD else recipe.batch_size
        values["maxlen"] = self.maxlen or folder.get("maxlen") or kind.maxlen(task)
        values["batch_size"] = self.batch_size or recipe_batch or loss.batch_size or task.batch_size
        values["epochs"] = self.epochs or recipe.epochs or task.epochs
        values["steps_per_epoch"] = self.steps_per_epoch or task.steps_per_epoch
        for name in ("lr", "weight_decay", "warmup", "schedule"):
            values[name] = getattr(recipe, name) if getattr(self, name) is None else getattr(self, name)
        # A checkpoint brings its config and vocab along; a Hugging Face folder also its length and
        # pooling (a sentence-transformers folder's) or its head input (a classifier's pooler).
        # Only the setting the kind reads is recorded (the other stays None), so that a resolved
        # configuration resolves again.
        reads = KIND_SETTINGS[kind.spec_field]
        values["pooling"] = self.pooling or folder.get("pooling") or recipe.pooling if reads == "pooling" else None
        values["head_input"] = self.head_input or source.head_input or "cls" if reads == "head_input" else None
        values["config"] = source.config_path
        values["vocab"] = source.vocab_path
        values["output_dir"] = self.output_dir or os.path.join("runs", f"{kind.output_prefix}{self.loss}-{self.task}")
        values.update(self._loss_options(task))
        return RunConfig(**values), source

    def _given(self, name: str) -> bool:
        """Whether the field ``name`` is given: set to another value than its default."""
        return bool(getattr(self, name) != _FIELDS[name].default)

    def _flags(self, *names: str) -> list[str]:
        """The options of the fields ``names`` that are given, each as the command line gives it."""
        return [
            "--no-hard-negatives-from-labels" if getattr(self, name) is False and name in _NEGATED else flag
            for name, flag in zip(names, option_names(_FIELDS[name] for name in names))
            if self._given(name)
        ]

    def _refuse_unread(self, loss: LossEntry, kind: ModelKind) -> None:
        """A ConfigError naming the options given where the run would not read them, so that none is
        silently ignored: another loss's (the loss table says which it reads), the other model
        kind's, a strategy's with another strategy, and one's own files' options without them or
        where those files do not use them."""
        unread = [name for name, reads in LOSS_OPTIONS.items() if not reads(loss) and self._given(name)]
        if unread:
            named = f"--kind {self.kind} --loss {self.loss}" if self.kind != RunConfig.kind else f"--loss {self.loss}"
            readers: dict[str, list[str]] = {}  # who reads them: the losses -> the options they read
            for name in unread:
                readers.setdefault(_loss_option_readers(name), []).extend(self._flags(name))
            raise ConfigError(
                f"{', '.join(self._flags(*unread))}: not an option of {named}, which would ignore "
                f"{'them' if len(unread) > 1 else 'it'}; "
                + "; ".join(
                    f"{_and(flags)} {'are options' if len(flags) > 1 else 'is an option'} of {losses}"
                    for losses, flags in readers.items()
                )
            )
        for name, why in KIND_OPTIONS.items():
            if KIND_SETTINGS[kind.spec_field] != name and self._given(name):
                raise ConfigError(f"{self._flags(name)[0]}: {why}")
        if self.strategy != "multi-worker" and self._given("worker_timeout"):
            raise ConfigError(
                f"--worker-timeout: an option of --strategy multi-worker, how long a worker waits for the others to "
                f"start; --strategy {self.strategy} starts no other worker"
            )
        if self.strategy == "default" and self._given("global_batch_loss"):
            raise ConfigError(
                "--per-replica-loss: --strategy default trains on one replica, whose share of each batch is the whole "
                "batch, so the loss would be the same; it is an option of --strategy mirrored or multi-worker"
            )
        self._refuse_unread_file_options(loss)

    def _refuse_unread_file_options(self, loss: LossEntry) -> None:
        """:meth:`_refuse_unread` for the options of one's own files."""
        if not self.train_file:
            unread = self._flags(*OWN_FILE_OPTIONS)
            if unread:
                raise ConfigError(
                    f"{', '.join(unread)}: {'options' if len(unread) > 1 else 'an option'} of your own files "
                    f"(--train FILE); the task {self.task}'s run reads the benchmark's own files"
                )
            return
        if self._given("train_from_valid"):
            raise ConfigError(
                "--train-from-valid: an option of a benchmark task without a train split; with --train FILE, "
                "--valid-fraction holds a part of it out as valid (or --valid FILE gives valid)"
            )
        if self.valid_file and self._given("valid_fraction"):
            raise ConfigError(
                "--valid-fraction: the part of --train held out as valid when no --valid file is given; here "
                "--valid FILE gives valid"
            )
        if loss.examples == GROUPS and self._given("allow_single_label"):
            raise ConfigError(
                f"--allow-single-label: not an option of --loss {self.loss}, which trains on an anchor, its positive "
                "and its negatives, and ranks no labels"
            )

    def _loss_options(self, task: Task) -> dict[str, Any]:
        """The loss's own options resolved (:meth:`_refuse_unread` has refused those it does not read)."""
        loss = get_loss(self.kind, self.loss)
        weights = (self.cosine_weight, self.ibn_weight, self.angle_weight)
        self._check_matryoshka()
        resolved: dict[str, Any] = {}
        if loss.examples == GROUPS and self.hard_negatives_from_labels is None:
            resolved["hard_negatives_from_labels"] = task.hard_negatives_from_labels
        if loss.mix_weights is not None:
            mix = [default if given is None else given for given, default in zip(weights, loss.mix_weights)]
            if not any(mix):
                raise ConfigError(
                    f"--loss {self.loss}: every weight of the mix is 0, so its loss is 0: give one a weight"
                )
            resolved.update(zip(("cosine_weight", "ibn_weight", "angle_weight"), mix))
        return resolved

    def _check_matryoshka(self) -> None:
        """A ConfigError for Matryoshka options that cannot be used as given (the widths against the
        model's own width are checked when it is built)."""
        if self.matryoshka_dims is None:
            if self.matryoshka_weights is not None:
                raise ConfigError("--matryoshka-weights weighs the widths of --matryoshka-dims: give those too")
            return
        problem = get_loss(self.kind, self.loss).matryoshka_problem
        if problem:
            raise ConfigError(f"--matryoshka-dims with --kind {self.kind} --loss {self.loss}: {problem}")
        from ..losses.matryoshka import check_dims  # imports TensorFlow, which the parser does not need

        try:
            check_dims(self.matryoshka_dims, self.matryoshka_weights)
        except ValueError as e:
            raise ConfigError(f"--{e}".replace("matryoshka ", "matryoshka-", 1)) from None

    def model_source(self) -> ModelSource:
        """The model this run starts from, resolved once (:func:`cosent_tf.models.sources.open_source`):
        the checkpoint (or none), the config that replaces its own, and the vocabulary, which is
        otherwise the checkpoint's, else the shared one of the data folder.

        Returns:
            The :class:`~cosent_tf.models.sources.ModelSource`; its config is read and checked.

        Raises:
            ConfigError: the config is unreadable or wrong, or a Hugging Face folder cannot be used.
            CheckpointError: a hub name given as the checkpoint.

        Example:
            >>> RunConfig(task="BQ").model_source().format  # doctest: +SKIP
            'config'
        """
        from ..models.sources import open_source

        vocab = self.vocab or (None if self.checkpoint else shared_vocab(self.data_dir, RunConfig.data_dir))
        source = open_source(self.checkpoint, self.config, vocab)
        if source.vocab_path is None:  # a checkpoint that brings no vocabulary
            source = dataclasses.replace(source, vocab_path=shared_vocab(self.data_dir, RunConfig.data_dir))
        return source


# What a starting folder's setting (:class:`~cosent_tf.models.spec.FolderSetting`) does to the
# model trained from it, said when an option overrides it: the trained model and its exports keep
# the option's value.
FOLDER_SETTING_EFFECTS = {"maxlen": "cut texts at {} tokens", "pooling": "pool with {}"}


def folder_defaults(given: RunConfig, settings: Iterable[FolderSetting]) -> dict[str, Any]:
    """The settings of the folder a run starts from that become the defaults of their options.

    A sentence-transformers folder's length and pooling are a sentence encoder's: a run that
    trains one (a feature model) takes each whose option ``given`` leaves unset, and says so on
    the log; an option given with another value overrides it, and a NOTE says what the trained
    model (and every export of it) does instead. A cross-encoder takes none: it cuts pairs to a
    length of its own, and pools nothing.

    Args:
        given: the run's configuration as given (None: an option left unset).
        settings: the starting folder's (:attr:`~cosent_tf.models.sources.ModelSource.settings`).

    Returns:
        {field name: the folder's value} for each option taken from the folder.

    Example:
        >>> from cosent_tf.models.spec import FolderSetting
        >>> folder_defaults(RunConfig(), [FolderSetting("maxlen", 256, "max_seq_length 256")])
        {'maxlen': 256}
    """
    if get_kind(given.kind).concatenated_pairs:
        return {}
    taken = {}
    for setting in settings:
        flag = option_names(run_options(setting.name))[0]
        value = getattr(given, setting.name)
        if value is None:
            taken[setting.name] = setting.value
            logger.info("%s %s: the --checkpoint folder's %s", flag, setting.value, setting.origin)
        elif value != setting.value:
            effect = FOLDER_SETTING_EFFECTS[setting.name].format(value)
            logger.warning(
                "NOTE: %s %s overrides the --checkpoint folder's %s: the trained model and its exports will %s",
                flag,
                value,
                setting.origin,
                effect,
            )
    return taken


# The numeric settings' ranges: name -> (low, low included, high or None, high included, what it is).
# An int bound makes the setting a whole number. The contrastive loss pushes a negative pair's
# cosine, which lies in [-1, 1], below epsilon: from 1 up it pushes nothing; below -1 it acts as -1.
RANGES: dict[str, tuple[Any, bool, Any, bool, str]] = {
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
    "group_size": (2, True, None, False, "the texts per example (anchor, positive, hard negatives)"),
    "cosine_weight": (0.0, True, None, False, "the weight of CoSENT in the mix"),
    "ibn_weight": (0.0, True, None, False, "the weight of the in-batch negatives in the mix"),
    "angle_weight": (0.0, True, None, False, "the weight of the angle ranking in the mix"),
}

OVERWRITE_HELP = "train over a finished run (or one with other settings) in --output-dir, removing its outputs first"
PRINT_CONFIG_HELP = (
    "print the run's settings with every default filled in (from the task, the recipe and the checkpoint) as "
    "JSON on stdout, and exit without reading data, training or writing anything"
)


def _whole(name: str) -> bool:
    low, _, high, _, _ = RANGES[name]
    return isinstance(low, int) and (high is None or isinstance(high, int))


def _argument_type(name: str, metadata: dict) -> Any:
    """The argparse type of a field: its own, else a number in its range (the parser's upper bound
    is inclusive, so that a fraction of 1 reaches :meth:`RunConfig.check`, which names the setting)."""
    if "type" in metadata:
        return metadata["type"]
    if name in RANGES:
        low, low_included, high, _, _ = RANGES[name]
        return number_in_range(int if _whole(name) else float, low, high, low_included)
    return None


def run_options(*selected: str) -> list:
    """The RunConfig fields in ``selected`` option groups (e.g. :data:`ENGINE`) or named there, in field order."""
    return [
        field
        for field in dataclasses.fields(RunConfig)
        if field.metadata.get("group") in selected or field.name in selected
    ]


def add_run_options(
    parser: argparse.ArgumentParser, *selected: str, overrides: Optional[dict] = None, overwrite: bool = False
) -> None:
    """Add the command-line options of RunConfig's fields in ``selected`` to ``parser``.

    Each option comes from its field: flags ``--field-name`` unless the metadata names others,
    the field's default, its help, its choices (from their table), and for a number the
    range of :data:`RANGES`. A boolean field is a switch that sets the opposite of its default.

    Args:
        parser: the parser (or sub-command parser) to extend.
        *selected: option groups (:data:`TASK_DATA`, :data:`OWN_FILES`, :data:`FILE_FORMAT`,
            :data:`MODEL_KIND`, :data:`ENGINE`) or single fields' names, added in field order.
        overrides: field name -> argparse settings that replace the field's own (a training
            script's ``--loss`` default and choices).
        overwrite: the parser starts a run: also add ``--overwrite``, the
            :func:`~cosent_tf.training.engine.train` argument, and ``--print-config``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_run_options(parser, FILE_FORMAT)
        >>> parser.parse_args(["--format", "csv"]).file_format
        'csv'
    """
    overrides = overrides or {}
    for field in run_options(*selected):
        metadata = field.metadata
        flags = metadata.get("flags", (f"--{field.name.replace('_', '-')}",))
        settings: dict = {"dest": field.name, "help": metadata.get("help")}
        if isinstance(field.default, bool):
            settings["action"] = "store_false" if field.default else "store_true"
        else:
            settings["default"] = field.default
            for key in ("metavar", "required", "action"):
                if key in metadata:
                    settings[key] = metadata[key]
            if "choices" in metadata:
                settings["choices"] = metadata["choices"]
            argument_type = _argument_type(field.name, metadata)
            if argument_type is not None:
                settings["type"] = argument_type
        settings.update(overrides.get(field.name, {}))
        parser.add_argument(*flags, **{key: value for key, value in settings.items() if value is not None})
    if overwrite:
        parser.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
        parser.add_argument("--print-config", action="store_true", help=PRINT_CONFIG_HELP)


def run_config(args: argparse.Namespace, **fixed: Any) -> RunConfig:
    """The RunConfig of parsed options: the namespace's values of RunConfig's fields, the rest
    (``--overwrite``, ``--verbose``, a sub-command's handler) left out, and ``fixed`` on top.

    Args:
        args: what :func:`add_run_options`' parser parsed.
        **fixed: settings that no option gives (a training script's kind and task).

    Returns:
        The (unresolved) configuration.

    Example:
        >>> run_config(argparse.Namespace(epochs=2, verbose=False), task="BQ").epochs
        2
    """
    names = {field.name for field in dataclasses.fields(RunConfig)}
    values = {name: value for name, value in vars(args).items() if name in names}
    return RunConfig(**{**values, **fixed})


def option_names(fields: Iterable[dataclasses.Field]) -> list:
    """The first flag of each field's option (for messages and the CLI reference)."""
    return [field.metadata.get("flags", (f"--{field.name.replace('_', '-')}",))[0] for field in fields]


_FIELDS = {field.name: field for field in dataclasses.fields(RunConfig)}
# The switches whose False is given as --no-FLAG (argparse.BooleanOptionalAction).
_NEGATED = {name for name, field in _FIELDS.items() if field.metadata.get("action") is argparse.BooleanOptionalAction}

# The loss options: field -> whether a loss (its LossEntry) reads it. Most are what its ``make`` takes.
LOSS_OPTIONS: dict[str, Callable[[LossEntry], bool]] = {
    "scale": lambda loss: "scale" in loss.reads,
    "epsilon": lambda loss: "epsilon" in loss.reads,
    "group_size": lambda loss: "group_size" in loss.reads,
    # how the groups are drawn from labelled pairs
    "hard_negatives_from_labels": lambda loss: loss.examples == GROUPS,
    "symmetric": lambda loss: "symmetric" in loss.reads,
    "cosine_weight": lambda loss: "weights" in loss.reads,
    "ibn_weight": lambda loss: "weights" in loss.reads,
    "angle_weight": lambda loss: "weights" in loss.reads,
    # how the batches are drawn: duplicates are false negatives where a text is the others' negative
    "keep_duplicates_apart": lambda loss: loss.in_batch,
    "global_batch_loss": lambda loss: "global_batch" in loss.reads,
}


def _and(items: list[str]) -> str:
    return f"{', '.join(items[:-1])} and {items[-1]}" if len(items) > 1 else items[0]


def _loss_option_readers(name: str) -> str:
    """``--loss ... of feature models`` (and of interaction models): the losses that read the option ``name``."""
    readers: dict[str, list[str]] = {}
    for (kind, loss_name), entry in LOSSES.items():
        if LOSS_OPTIONS[name](entry):
            readers.setdefault(kind, []).append(loss_name)
    return " and ".join(f"{_for_losses(tuple(names))} of {kind} models" for kind, names in readers.items())


# How each kind is told how to score (ModelKind.spec_field) by the run's options: the field it reads.
KIND_SETTINGS = {"pooling": "pooling", "head": "head_input"}
# Each such field, and why the other kind ignores it.
KIND_OPTIONS = {
    "pooling": "an option of feature models (--kind feature), which pool a text's token vectors into its vector; an "
    "interaction model pools nothing: its head reads the [CLS] hidden state or BERT's pooler (--head)",
    "head_input": "an option of interaction models (--kind interaction), what their head reads; a feature model has "
    "no head: it pools its vectors (--pooling)",
}

# The options of one's own files (cosent-tf train --train FILE), which a benchmark task's run does not read.
OWN_FILE_OPTIONS = tuple(field.name for field in run_options(OWN_FILES, FILE_FORMAT) if field.name != "train_file")
