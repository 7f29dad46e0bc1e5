"""The training engine: one function trains and evaluates a feature-based matcher.

Per-dataset scripts are thin wrappers over :func:`train_feature_model` and :func:`main`.
"""
import argparse
import dataclasses
import json
import os
import time

import numpy as np

from . import backend
from .backend import keras
from .checkpoints import checkpoint_files
from .data import TASKS, load_task
from .evaluation import ValidationCheckpoint, correlation_metrics, pair_cosines
from .io import write_json
from .losses import (CoSENTLoss, CosineMSELoss, SentenceBertHead, SentenceBertSoftmaxLoss,
                     ThresholdContrastiveLoss)
from .models import build_encoder
from .pipeline import pair_dataset
from .tokenization import SentenceTokenizer

SMALL_RANDOM_CONFIG = os.path.join(os.path.dirname(__file__), "configs", "bert-small-random.json")
FEATURE_LOSSES = ("cosent", "sbert", "mse", "contrastive")
# STS-B scores run 0-5; the original binarises them at 2.5 where a loss needs classes.
SCORE_TASK_MAX = {"STS-B": 5.0}


@dataclasses.dataclass
class RunConfig:
    task: str = "STS-B"
    loss: str = "cosent"
    data_dir: str = "../shared/data"
    config: str = None
    checkpoint: str = None
    vocab: str = None
    model: str = "bert"
    pooling: str = "cls"
    maxlen: int = 64
    batch_size: int = 32
    epochs: int = 5
    lr: float = 2e-5
    scale: float = 20.0
    epsilon: float = 0.5
    seed: int = 42
    max_train_pairs: int = None
    group_by_length: bool = True
    precision: str = "float32"
    output_dir: str = None

    def resolved(self):
        """Fill in config/vocab from a checkpoint folder or the shared data, and the output dir."""
        values = dataclasses.asdict(self)
        if self.checkpoint:
            # A checkpoint folder, or a prefix inside one, brings its config and vocab along.
            folder = self.checkpoint if os.path.isdir(self.checkpoint) else os.path.dirname(self.checkpoint)
            config, _, vocab = checkpoint_files(folder)
            values["config"] = self.config or config
            values["vocab"] = self.vocab or vocab
        values["config"] = values["config"] or SMALL_RANDOM_CONFIG
        values["vocab"] = values["vocab"] or os.path.join(self.data_dir, "vocab", "bert-base-chinese-vocab.txt")
        values["output_dir"] = self.output_dir or os.path.join("runs", f"{self.loss}-{self.task}")
        return RunConfig(**values)


def senteval_dir(data_dir):
    """Accept either the shared data root (holding senteval_cn/) or the senteval_cn folder."""
    nested = os.path.join(data_dir, "senteval_cn")
    return nested if os.path.isdir(nested) else data_dir


def _training_setup(cfg, encoder, train_labels):
    """The Keras model to fit, its loss, and the labels it trains on."""
    score_max = SCORE_TASK_MAX.get(cfg.task, 1.0)
    if cfg.loss == "cosent":
        return encoder, CoSENTLoss(cfg.scale), train_labels
    if cfg.loss == "mse":
        return encoder, CosineMSELoss(max_label=score_max), train_labels
    if cfg.loss == "contrastive":
        return encoder, ThresholdContrastiveLoss(cfg.epsilon, positive_above=score_max / 2), train_labels
    if cfg.loss == "sbert":
        classes = (train_labels > score_max / 2).astype(np.float32) if cfg.task in SCORE_TASK_MAX else train_labels
        head = SentenceBertHead(int(classes.max()) + 1, name="SentenceBert-Head")
        return keras.Model(encoder.inputs, head(encoder.output)), SentenceBertSoftmaxLoss(), classes
    raise ValueError(f"unknown loss {cfg.loss!r}; choose one of {', '.join(FEATURE_LOSSES)}")


def train_feature_model(cfg):
    """Train an encoder on ``cfg.task``, keep the best epoch on valid, evaluate it on test.

    Writes ``config.json``, ``best.weights.h5``, ``history.json`` and ``metrics.json`` to
    ``cfg.output_dir`` and returns the metrics dict.
    """
    cfg = cfg.resolved()
    started = time.time()
    keras.utils.set_random_seed(cfg.seed)
    backend.set_precision("mixed_bfloat16" if cfg.precision == "bf16" else "float32")
    os.makedirs(cfg.output_dir, exist_ok=True)
    write_json(os.path.join(cfg.output_dir, "config.json"), dataclasses.asdict(cfg))

    tokenizer = SentenceTokenizer(cfg.vocab, cfg.maxlen, word_level=backend.is_word_level(cfg.model))
    folder = senteval_dir(cfg.data_dir)
    train = load_task(folder, cfg.task, "train").sample(cfg.max_train_pairs, cfg.seed)
    valid, test = load_task(folder, cfg.task, "valid"), load_task(folder, cfg.task, "test")
    print(f"{cfg.task}: {len(train)} train, {len(valid)} valid, {len(test)} test pairs", flush=True)
    train_a, train_b = tokenizer.encode_all(train.texts_a), tokenizer.encode_all(train.texts_b)
    valid_ids = tokenizer.encode_all(valid.texts_a), tokenizer.encode_all(valid.texts_b)
    test_ids = tokenizer.encode_all(test.texts_a), tokenizer.encode_all(test.texts_b)

    encoder = build_encoder(cfg.config, cfg.checkpoint, cfg.model, cfg.pooling, vocab_path=cfg.vocab)
    model, loss, train_labels = _training_setup(cfg, encoder, train.labels)
    model.compile(optimizer=keras.optimizers.Adam(cfg.lr), loss=loss)
    dataset = pair_dataset(train_a, train_b, train_labels, cfg.batch_size,
                           group_by_length=cfg.group_by_length, seed=cfg.seed)

    def evaluate_valid(_):
        return correlation_metrics(pair_cosines(encoder, *valid_ids), valid.labels)

    validation = ValidationCheckpoint(evaluate_valid, os.path.join(cfg.output_dir, "best.weights.h5"))
    model.fit(dataset, epochs=cfg.epochs, callbacks=[validation], verbose=2)

    test_metrics = correlation_metrics(pair_cosines(encoder, *test_ids), test.labels)
    metrics = {
        "task": cfg.task, "loss": cfg.loss, "best_epoch": validation.best_epoch,
        "valid": dict(validation.history[validation.best_epoch - 1]),
        "test": test_metrics, "train_pairs": len(train),
        "wall_seconds": round(time.time() - started, 1),
    }
    metrics["valid"].pop("epoch")
    write_json(os.path.join(cfg.output_dir, "history.json"), validation.history)
    write_json(os.path.join(cfg.output_dir, "metrics.json"), metrics)
    return metrics


def argument_parser(loss="cosent"):
    defaults = RunConfig()
    parser = argparse.ArgumentParser(description="Train a feature-based matcher and report Spearman.")
    parser.add_argument("task", choices=TASKS)
    parser.add_argument("--loss", default=loss, choices=FEATURE_LOSSES)
    parser.add_argument("--data-dir", default=defaults.data_dir,
                        help="shared data root (with senteval_cn/ and vocab/) or a senteval_cn folder")
    parser.add_argument("--config", help="BERT config json (default: a small random L4/H312 BERT)")
    parser.add_argument("--checkpoint", help="Google-format checkpoint prefix or folder")
    parser.add_argument("--vocab", help="vocab.txt (default: the checkpoint folder's, else the shared one)")
    parser.add_argument("--model", default=defaults.model, choices=sorted(backend.TRANSFORMERS))
    parser.add_argument("--pooling", default=defaults.pooling,
                        choices=["cls", "last-avg", "first-last-avg", "max", "pooler"])
    parser.add_argument("--maxlen", type=int, default=defaults.maxlen)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="pairs per batch")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--scale", type=float, default=defaults.scale, help="CoSENT's lambda")
    parser.add_argument("--epsilon", type=float, default=defaults.epsilon, help="contrastive threshold")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--max-train-pairs", type=int, help="train on a seeded subsample")
    parser.add_argument("--no-group-by-length", dest="group_by_length", action="store_false")
    parser.add_argument("--precision", default=defaults.precision, choices=["float32", "bf16"])
    parser.add_argument("--output-dir")
    return parser


def main(argv=None, loss="cosent"):
    args = argument_parser(loss).parse_args(argv)
    metrics = train_feature_model(RunConfig(**vars(args)))
    print(json.dumps({"valid": metrics["valid"], "test": metrics["test"],
                      "best_epoch": metrics["best_epoch"], "wall_seconds": metrics["wall_seconds"]}))
    return metrics
