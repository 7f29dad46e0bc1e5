"""The training engine: one function trains, validates and tests every kind of matcher.

Per-dataset scripts are a few lines over :func:`main`. A run writes to its output folder:

* ``config.json``       the full, resolved configuration;
* ``best.weights.h5``   weights of the epoch with the best valid Spearman;
* ``valid_metrics.csv`` every validation (each epoch end, and every ``--eval-every`` steps);
* ``valid_curve.png``   valid Spearman against training steps;
* ``test_scores.npz``   test scores and labels per task (for similarity-distribution plots);
* ``model/``            the best model as a model folder (see :mod:`cosent_tf.model_dir`),
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
vocabulary and checkpoint have been read and checked. A folder holding a finished run
(``metrics.json``) is trained over only with ``--overwrite``, which first removes that
run's outputs; an unfinished run is resumed only with the settings it was started with
(``--epochs`` may grow; evaluation and backup frequencies may change).
"""
import argparse
import dataclasses
import fnmatch
import json
import math
import os
import shutil
import signal
import sys
import time

import numpy as np

from . import backend
from .backend import keras
from .checkpoints import checkpoint_files
from .data import BINARY_TASKS, TASKS, PairData, binarised, load_task, read_nli, task_file
from .errors import ConfigError, CosentError, DataError, NonFiniteLossError, TrainingInterrupted
from .evaluation import (ValidationCheckpoint, accuracy_at, best_threshold, correlation_metrics,
                         interaction_scores, pair_cosines)
from .io import FolderKind, atomic_path, folder_lock, is_inside, write_json
from .losses import (CoSENTLoss, CosineMSELoss, InteractionCoSENTLoss, SentenceBertHead,
                     SentenceBertSoftmaxLoss, ThresholdContrastiveLoss)
from .model_dir import ModelSpec, save_model_dir
from .models import build_encoder, build_interaction_model
from .optimizers import FusedAdam
from .pipeline import interaction_dataset, pair_dataset
from .report import plot_valid_curve
from .tokenization import SentenceTokenizer

SMALL_RANDOM_CONFIG = os.path.join(os.path.dirname(__file__), "configs", "bert-small-random.json")
NLI = "NLI"
LOSSES = {"feature": ("cosent", "sbert", "mse", "contrastive"), "interaction": ("ce", "cosent")}
# Label ranges: STS-B scores 0-5 and NLI ranks 0-2 (others 0/1).
LABEL_MAX = {"STS-B": 5.0, NLI: 2.0}
# What a run writes into its output folder (see the module docstring), and the folder itself.
RUN_OUTPUTS = ("config.json", "best.weights.h5", "valid_metrics.csv", "valid_curve.png", "test_scores.npz",
               "model", "metrics.json", "backup")
RUN_FOLDER = FolderKind("a cosent-tf training run", "config.json", RUN_OUTPUTS + (".lock", ".tmp-*", ".old-*"))
# Settings a resumed run may change, since they do not change what training computes.
RESUMABLE_CHANGES = ("epochs", "eval_every", "backup_every", "strict", "output_dir")
PATH_SETTINGS = ("data_dir", "config", "checkpoint", "vocab")


@dataclasses.dataclass
class RunConfig:
    task: str = "STS-B"
    kind: str = "feature"
    loss: str = "cosent"
    data_dir: str = "../shared/data"
    config: str = None
    checkpoint: str = None
    vocab: str = None
    model: str = "bert"
    pooling: str = "cls"
    maxlen: int = None
    batch_size: int = None
    epochs: int = None
    steps_per_epoch: int = None
    lr: float = 2e-5
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
    output_dir: str = None

    def resolved(self):
        """Fill in the original experiments' defaults, and config/vocab/output paths."""
        values = dataclasses.asdict(self)
        long_texts = self.task == "PAWSX"
        if self.kind == "interaction":
            values["maxlen"] = self.maxlen or (256 if long_texts else 128)
            values["batch_size"] = self.batch_size or (64 if self.loss == "cosent" else 32)
        else:
            values["maxlen"] = self.maxlen or (128 if long_texts else 64)
            values["batch_size"] = self.batch_size or (64 if self.task == NLI else 32)
        values["epochs"] = self.epochs or (10 if self.task == NLI else 5)
        if self.task == NLI and self.steps_per_epoch is None:
            values["steps_per_epoch"] = 5000
        if self.checkpoint:
            # A checkpoint folder, or a prefix inside one, brings its config and vocab along.
            folder = self.checkpoint if os.path.isdir(self.checkpoint) else os.path.dirname(self.checkpoint)
            config, _, vocab = checkpoint_files(folder)
            values["config"] = self.config or config
            values["vocab"] = self.vocab or vocab
        values["config"] = values["config"] or SMALL_RANDOM_CONFIG
        values["vocab"] = values["vocab"] or os.path.join(self.data_dir, "vocab", "bert-base-chinese-vocab.txt")
        prefix = "interact-" if self.kind == "interaction" else ""
        values["output_dir"] = self.output_dir or os.path.join("runs", f"{prefix}{self.loss}-{self.task}")
        return RunConfig(**values)


def senteval_dir(data_dir):
    """Accept either the shared data root (holding senteval_cn/) or the senteval_cn folder."""
    nested = os.path.join(data_dir, "senteval_cn")
    return nested if os.path.isdir(nested) else data_dir


def nli_files(data_dir):
    """Every ``cnsd-*/*.jsonl`` below ``data_dir``, each real folder read once.

    Links to folders are followed, but a folder reached twice (a link back up the tree,
    ``x -> .``) is not read again: that would repeat the training data, or never end.
    """
    paths, seen = [], set()
    for folder, subfolders, files in os.walk(data_dir, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        subfolders.sort()
        if fnmatch.fnmatchcase(os.path.basename(folder), "cnsd-*"):
            paths.extend(os.path.join(folder, name) for name in files if name.endswith(".jsonl"))
    return sorted(paths)


def load_run_data(cfg):
    """(train pairs, {task: (valid, test)}, notes) for a configuration."""
    folder, notes = senteval_dir(cfg.data_dir), []
    if cfg.task == NLI:
        paths = nli_files(cfg.data_dir)
        if not paths:
            raise DataError(cfg.data_dir, "no cnsd-*/*.jsonl NLI files under this folder")
        train = PairData.concat([read_nli(p, cfg.strict) for p in paths])
        tasks = TASKS
    else:
        tasks = (cfg.task,)
    evaluation = {t: (load_task(folder, t, "valid", cfg.strict), load_task(folder, t, "test", cfg.strict))
                  for t in tasks}
    if cfg.task != NLI:
        train_path = task_file(folder, cfg.task, "train")
        if os.path.exists(train_path):
            train = load_task(folder, cfg.task, "train", cfg.strict)
        elif cfg.train_from_valid:
            valid, test = evaluation[cfg.task]
            order = np.random.default_rng(cfg.seed).permutation(len(valid))
            cut = int(round(len(valid) * cfg.train_from_valid))
            train, valid = valid.subset(np.sort(order[:cut])), valid.subset(np.sort(order[cut:]))
            evaluation[cfg.task] = (valid, test)
            notes.append(f"{train_path} does not exist: trained on a seeded {cfg.train_from_valid:.0%} "
                         f"of valid ({len(train)} pairs) and validated on the rest; NOT comparable "
                         "with published numbers")
        else:
            raise DataError(train_path, f"the {cfg.task} train split is not here (file does not exist); "
                            "pass --train-from-valid FRACTION to train on a seeded part of valid instead")
    train = train.sample(cfg.max_train_pairs, cfg.seed)
    evaluation = {t: (v.sample(cfg.max_eval_pairs, cfg.seed), s.sample(cfg.max_eval_pairs, cfg.seed))
                  for t, (v, s) in evaluation.items()}
    if cfg.loss == "cosent":
        _require_two_labels(train, "CoSENT ranks pairs by their labels, so every step's loss would be 0")
    for valid, _ in evaluation.values():
        _require_two_labels(valid, "Spearman is undefined on them, so no epoch could be chosen as the best")
    return train, evaluation, notes


def _require_two_labels(pairs, consequence):
    if len(np.unique(pairs.labels)) < 2:
        raise DataError(pairs.source, f"all {len(pairs)} pairs (after any sampling) have the label "
                                      f"{pairs.labels[0]:g}: {consequence}")


def run_tokenizer(cfg):
    """The run's tokenizer, once maxlen is known to fit the model's position embeddings."""
    backend.check_maxlen(cfg.config, cfg.model, cfg.maxlen)
    return SentenceTokenizer(cfg.vocab, cfg.maxlen, word_level=backend.is_word_level(cfg.model))


class FeatureMatcher:
    """A siamese encoder scored by cosine; ``model`` is the encoder."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.tokenizer = run_tokenizer(cfg)
        self.model = build_encoder(cfg.config, cfg.checkpoint, cfg.model, cfg.pooling, vocab_path=cfg.vocab)
        self.spec = ModelSpec("feature", cfg.model, pooling=cfg.pooling, maxlen=cfg.maxlen,
                              word_level=self.tokenizer.word_level)

    def prepare(self, pairs):
        return self.tokenizer.encode_all(pairs.texts_a), self.tokenizer.encode_all(pairs.texts_b)

    def scores(self, prepared):
        return pair_cosines(self.model, *prepared)

    def training_model(self, labels):
        cfg, label_max = self.cfg, LABEL_MAX.get(self.cfg.task, 1.0)
        if cfg.loss == "cosent":
            return self.model, CoSENTLoss(cfg.scale), labels
        if cfg.loss == "mse":
            return self.model, CosineMSELoss(max_label=label_max), labels
        if cfg.loss == "contrastive":
            return self.model, ThresholdContrastiveLoss(cfg.epsilon, positive_above=label_max / 2), labels
        if cfg.loss == "sbert":
            classes = binarised(labels, cfg.task)
            head = SentenceBertHead(int(classes.max()) + 1, name="SentenceBert-Head")
            return keras.Model(self.model.inputs, head(self.model.output)), SentenceBertSoftmaxLoss(), classes
        raise ValueError(f"unknown feature loss {cfg.loss!r}; choose one of {', '.join(LOSSES['feature'])}")

    def dataset(self, prepared, labels, start_step):
        return pair_dataset(*prepared, labels, self.cfg.batch_size, group_by_length=self.cfg.group_by_length,
                            seed=self.cfg.seed, start_step=start_step, repeat=True)


class InteractionMatcher:
    """A cross-encoder over the concatenated pair: a score (CoSENT) or P(similar) (cross-entropy)."""

    def __init__(self, cfg):
        if cfg.task == NLI:
            raise ValueError("interaction models are trained on one matching task, not on NLI")
        if cfg.loss not in LOSSES["interaction"]:
            raise ValueError(f"unknown interaction loss {cfg.loss!r}; choose one of {', '.join(LOSSES['interaction'])}")
        self.cfg = cfg
        self.tokenizer = run_tokenizer(cfg)
        head = "score" if cfg.loss == "cosent" else "softmax"
        self.model = build_interaction_model(cfg.config, cfg.checkpoint, cfg.model, head, vocab_path=cfg.vocab)
        self.spec = ModelSpec("interaction", cfg.model, pooling=None, head=head, maxlen=cfg.maxlen,
                              word_level=self.tokenizer.word_level)

    def prepare(self, pairs):
        return self.tokenizer.encode_pairs(pairs.texts_a, pairs.texts_b)

    def scores(self, prepared):
        return interaction_scores(self.model, prepared)

    def training_model(self, labels):
        if self.cfg.loss == "cosent":
            return self.model, InteractionCoSENTLoss(), labels
        return self.model, keras.losses.SparseCategoricalCrossentropy(), binarised(labels, self.cfg.task)

    def dataset(self, prepared, labels, start_step):
        return interaction_dataset(prepared, labels, self.cfg.batch_size, group_by_length=self.cfg.group_by_length,
                                   seed=self.cfg.seed, start_step=start_step, repeat=True)


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raise NonFiniteLossError, naming the step, as soon as the loss is NaN or infinite.

    Raising (rather than Keras's TerminateOnNaN, which ends ``fit`` normally) aborts
    ``fit`` before BackupAndRestore's end-of-training clean-up, so the state of the last
    completed epoch and the best weights so far stay on disk.
    """

    def __init__(self, kept=(), advice=""):
        super().__init__()
        self.kept = kept  # (what, path) pairs worth pointing the user at, if they exist by then
        self.advice = advice

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            step = int(self.model.optimizer.iterations.numpy())
            kept = [f"{what} is in {path}" for what, path in self.kept if os.path.exists(path)]
            raise NonFiniteLossError(
                f"the training loss became {loss} at step {step} (batch {batch + 1} of the epoch); "
                "training stopped. " + ("; ".join(kept) + "." if kept else "Nothing was saved yet.")
                + (" " + self.advice if self.advice else ""))


def _comparable(settings):
    """Settings as config.json holds them, with paths resolved so that spellings compare equal."""
    settings = json.loads(json.dumps(settings))
    return {key: os.path.realpath(value) if key in PATH_SETTINGS and value else value
            for key, value in settings.items()}


def _remove_run_outputs(folder):
    for name in RUN_OUTPUTS:
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def check_run_folder(cfg):
    """Raise ConfigError, writing nothing, if ``cfg.output_dir`` may not hold this run.

    Refused: a folder holding one of the run's inputs, or anything but a cosent-tf run.
    Called before the folder is locked, so that a refused folder gets no lock file.
    """
    folder = cfg.output_dir
    for source in (cfg.config, cfg.checkpoint, cfg.vocab):
        if source and is_inside(source, folder):
            raise ConfigError(f"{folder}: holds the run's input {source}; nothing was written: "
                              "choose another --output-dir")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if names not in ([], [".lock"]) and not RUN_FOLDER.holds_only_its_own(names):
        shown = ", ".join(n for n in names if n != ".lock")
        raise ConfigError(f"{folder}: already exists and is not a cosent-tf training run (it holds {shown}); "
                          "nothing was written: choose a new or empty --output-dir")


def prepare_output_dir(cfg, overwrite=False):
    """Say how this run starts in ``cfg.output_dir``, checked and locked by the caller.

    Returns a note for the user, or None for a new run in a new or empty folder. Raises
    ConfigError, having written nothing, for a finished run without ``overwrite`` and for
    an unfinished run whose settings differ from this one's in what training computes.
    """
    folder = cfg.output_dir
    names = sorted(os.listdir(folder))
    if names in ([], [".lock"]):
        return None
    if overwrite:
        _remove_run_outputs(folder)
        return "--overwrite: the earlier run's outputs in this folder were removed; training from scratch"
    if "metrics.json" in names:
        raise ConfigError(f"{folder}: holds a finished run (metrics.json); nothing was written: pass --overwrite "
                          "to train it again from scratch, or choose another --output-dir")
    backup = os.path.join(folder, "backup")
    if not (os.path.isdir(backup) and os.listdir(backup)):
        _remove_run_outputs(folder)
        return ("an unfinished run here left no training state to resume; its outputs were removed, "
                "training from scratch")
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        saved = _comparable(json.load(f))
    current = _comparable(dataclasses.asdict(cfg))
    differences = [f"{key} {saved.get(key)!r} there, {current.get(key)!r} now"
                   for key in sorted(set(saved) | set(current))
                   if saved.get(key) != current.get(key) and key not in RESUMABLE_CHANGES]
    if (current["epochs"] or 0) < (saved.get("epochs") or 0):
        differences.append(f"epochs {saved.get('epochs')} there, {current['epochs']} now (may only grow)")
    if differences:
        raise ConfigError(f"{folder}: holds an unfinished run with other settings ({'; '.join(differences)}); "
                          "nothing was written: resume it with its own settings, or pass --overwrite to start again")
    changed = [f"{key} {saved.get(key)!r} -> {current.get(key)!r}" for key in RESUMABLE_CHANGES
               if key != "output_dir" and saved.get(key) != current.get(key)]
    return "resuming the unfinished run in this folder" + (f" with {', '.join(changed)}" if changed else "")


def task_metrics(scores, labels, valid_scores=None, valid_labels=None, task=None):
    """Spearman and Pearson; for binary tasks also accuracy at the threshold tuned on valid."""
    metrics = correlation_metrics(scores, labels)
    if task in BINARY_TASKS and valid_scores is not None:
        threshold, _ = best_threshold(valid_scores, valid_labels)
        metrics.update(accuracy=accuracy_at(scores, labels, threshold), threshold=threshold)
    return metrics


def _with_mean(per_task):
    """Flatten per-task metrics; with several tasks the headline is their mean Spearman."""
    if len(per_task) == 1:
        return dict(next(iter(per_task.values())))
    flat = {"spearman": float(np.mean([m["spearman"] for m in per_task.values()]))}
    for task, metrics in per_task.items():
        flat.update({f"{task}.{k}": v for k, v in metrics.items()})
    return flat


def train(cfg, overwrite=False):
    """Train, validate after every epoch, keep the best, test it; returns the metrics dict.

    ``overwrite`` lets the run replace a finished (or differently set) run in its output
    folder; see the module docstring for the rules of the output folder.
    """
    cfg = cfg.resolved()
    started = time.time()
    keras.utils.set_random_seed(cfg.seed)
    backend.set_precision("mixed_bfloat16" if cfg.precision == "bf16" else "float32")

    train_pairs, evaluation, notes = load_run_data(cfg)
    for note in notes:
        print("NOTE: " + note, flush=True)
    sizes = ", ".join(f"{t} {len(v)}/{len(s)}" for t, (v, s) in evaluation.items())
    print(f"{cfg.task}: {len(train_pairs)} train pairs; valid/test pairs: {sizes}", flush=True)

    matcher = (InteractionMatcher if cfg.kind == "interaction" else FeatureMatcher)(cfg)
    train_inputs = matcher.prepare(train_pairs)
    prepared = {t: (matcher.prepare(v), matcher.prepare(s)) for t, (v, s) in evaluation.items()}
    check_run_folder(cfg)
    with folder_lock(cfg.output_dir, "training run"):
        start = prepare_output_dir(cfg, overwrite)
        if start:
            print(f"{cfg.output_dir}: {start}", flush=True)
        write_json(os.path.join(cfg.output_dir, "config.json"), dataclasses.asdict(cfg))
        model, loss, labels = matcher.training_model(train_pairs.labels)
        model.compile(optimizer=FusedAdam(cfg.lr), loss=loss)

        def optimizer_step():
            return int(model.optimizer.iterations.numpy())

        def evaluate_valid(_):
            return _with_mean({t: task_metrics(matcher.scores(prepared[t][0]), evaluation[t][0].labels)
                               for t in evaluation})

        batches_per_pass = -(-len(train_pairs) // cfg.batch_size)
        steps_per_epoch = cfg.steps_per_epoch or batches_per_pass
        validation = ValidationCheckpoint(
            evaluate_valid, os.path.join(cfg.output_dir, "best.weights.h5"), every_steps=cfg.eval_every,
            csv_path=os.path.join(cfg.output_dir, "valid_metrics.csv"))
        backup_dir = os.path.join(cfg.output_dir, "backup")
        backup = backend.StepBackup(backup_dir, cfg.backup_every)
        guard = StopOnNonFiniteLoss(
            kept=[("the best weights so far", validation.weights_path),
                  ("the last saved training state", backup_dir)],
            advice="Lower --lr (or use float32) and run the command again; it resumes from the saved state.")
        try:  # the backup goes last: an epoch's state is saved after its validation
            model.fit(matcher.dataset(train_inputs, labels, optimizer_step), epochs=cfg.epochs,
                      steps_per_epoch=steps_per_epoch, callbacks=[guard, validation, backup],
                      verbose=1 if os.isatty(1) else 2)
        finally:
            backup.restore_signal_handlers()
        print("training done; scoring valid and test with the best weights", flush=True)

        per_task, saved_scores = {}, {}
        for task, (valid_inputs, test_inputs) in prepared.items():
            valid_scores, test_scores = matcher.scores(valid_inputs), matcher.scores(test_inputs)
            valid, test = evaluation[task]
            per_task[task] = {"valid": task_metrics(valid_scores, valid.labels, task=task),
                              "test": task_metrics(test_scores, test.labels, valid_scores, valid.labels, task)}
            saved_scores[f"{task}.scores"], saved_scores[f"{task}.labels"] = test_scores, test.labels
        with atomic_path(os.path.join(cfg.output_dir, "test_scores.npz")) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **saved_scores)
        plot_valid_curve(validation.history, os.path.join(cfg.output_dir, "valid_curve.png"),
                         f"{cfg.kind} {cfg.loss} on {cfg.task}")
        metrics = {
            "task": cfg.task, "kind": cfg.kind, "loss": cfg.loss, "model": cfg.model,
            "best_epoch": validation.best_epoch, "steps": optimizer_step(),
            "train_pairs": len(train_pairs), "comparable": not notes, "notes": notes,
            "valid": _with_mean({t: m["valid"] for t, m in per_task.items()}),
            "test": _with_mean({t: m["test"] for t, m in per_task.items()}),
            "tasks": per_task, "wall_seconds": round(time.time() - started, 1),
        }
        tuned = per_task[cfg.task]["test"].get("threshold") if cfg.task in per_task else None
        matcher.spec.threshold = tuned
        matcher.spec.source = {"task": cfg.task, "loss": cfg.loss, "run": os.path.abspath(cfg.output_dir),
                               "best_epoch": validation.best_epoch, "test": metrics["test"]}
        save_model_dir(os.path.join(cfg.output_dir, "model"), matcher.model, matcher.spec, cfg.config, cfg.vocab,
                       overwrite=True)
        write_json(os.path.join(cfg.output_dir, "metrics.json"), metrics)
        shutil.rmtree(backup_dir)  # last: until metrics.json exists, a rerun resumes from it
        return metrics


def _number(kind, low, high=None, low_included=True):
    """An argparse type: ``kind`` (int or float) in [low, high] (or (low, high]); errors say which."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        above = value >= low if low_included else value > low
        if not (above and (high is None or value <= high) and math.isfinite(value)):
            limit = f"{'at least' if low_included else 'above'} {low}" + (
                f" and at most {high}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"must be {limit}, got {text}")
        return value
    return parse


def argument_parser(kind="feature", loss="cosent", task=None):
    parser = argparse.ArgumentParser(
        description=f"Train a {kind} matcher ({loss}) and report Spearman on valid and test.")
    if task is None:
        parser.add_argument("task", choices=TASKS)
    parser.add_argument("--loss", default=loss, choices=LOSSES[kind])
    parser.add_argument("--data-dir", default=RunConfig.data_dir,
                        help="shared data root (with senteval_cn/, cnsd/, vocab/) or a senteval_cn folder")
    parser.add_argument("--config", help="BERT config json (default: the checkpoint's, else a small random L4/H312 BERT)")
    parser.add_argument("--checkpoint", help="Google-format checkpoint folder or prefix")
    parser.add_argument("--vocab", help="vocab.txt (default: the checkpoint folder's, else the shared one)")
    parser.add_argument("--model", default="bert", choices=sorted(backend.TRANSFORMERS))
    parser.add_argument("--pooling", default="cls", choices=["cls", "last-avg", "first-last-avg", "max", "pooler"])
    parser.add_argument("--maxlen", type=_number(int, 3), help="default 64 (PAWSX 128); interaction 128 (PAWSX 256)")
    parser.add_argument("--batch-size", type=_number(int, 1), help="pairs per batch (default as the original script)")
    parser.add_argument("--epochs", type=_number(int, 1), help="default 5 (NLI 10)")
    parser.add_argument("--steps-per-epoch", type=_number(int, 1), help="default one pass over train (NLI 5000)")
    parser.add_argument("--lr", type=_number(float, 0, low_included=False), default=RunConfig.lr)
    parser.add_argument("--scale", type=_number(float, 0, low_included=False), default=RunConfig.scale,
                        help="CoSENT's lambda")
    parser.add_argument("--epsilon", type=float, default=RunConfig.epsilon, help="contrastive threshold")
    parser.add_argument("--seed", type=int, default=RunConfig.seed)
    parser.add_argument("--max-train-pairs", type=_number(int, 1), help="train on a seeded subsample")
    parser.add_argument("--max-eval-pairs", type=_number(int, 1), help="validate and test on seeded subsamples")
    parser.add_argument("--train-from-valid", type=_number(float, 0, 1, low_included=False), metavar="FRACTION",
                        help="when the task has no train split, train on this seeded part of valid "
                             "(results are then not comparable with published numbers)")
    parser.add_argument("--eval-every", type=_number(int, 0), default=0, metavar="STEPS",
                        help="also validate every STEPS steps (for convergence curves)")
    parser.add_argument("--no-group-by-length", dest="group_by_length", action="store_false")
    parser.add_argument("--backup-every", type=_number(int, 0), default=0, metavar="STEPS",
                        help="also save the training state every STEPS steps (it is always saved at epoch ends "
                             "and on SIGTERM/SIGINT)")
    parser.add_argument("--strict", action="store_true",
                        help="any line the readers would skip or flag (wrong field count, empty text, repeated "
                             "pair, NLI label '-') is an error naming file and line, instead of a warning")
    parser.add_argument("--precision", default="float32", choices=["float32", "bf16"])
    parser.add_argument("--output-dir", help="a new or empty folder, or this run's own folder to resume it")
    parser.add_argument("--overwrite", action="store_true",
                        help="train over a finished run (or one with other settings) in --output-dir, "
                             "removing its outputs first")
    return parser


def main(argv=None, kind="feature", loss="cosent", task=None):
    args = vars(argument_parser(kind, loss, task).parse_args(argv))
    if task is not None:
        args["task"] = task
    overwrite = args.pop("overwrite")
    try:
        metrics = train(RunConfig(kind=kind, **args), overwrite)
    except TrainingInterrupted as stopped:
        print(f"stopped: {stopped}", file=sys.stderr, flush=True)
        raise SystemExit(128 + stopped.signal_number) from None
    except CosentError as error:  # bad input or a diverged run: the message says it all
        raise SystemExit(f"error: {error}") from None
    except KeyboardInterrupt:  # outside fit (reading data, testing): what is on disk is complete
        print("stopped: SIGINT received; run the same command again to carry on", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGINT) from None
    print(json.dumps({k: metrics[k] for k in ("valid", "test", "best_epoch", "wall_seconds")}))
    return metrics
