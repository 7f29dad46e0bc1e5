"""cosent-tf: CoSENT and its baselines for Chinese text matching on TensorFlow/Keras 2.

The names here are the package's user-level API; the Keras building blocks are the namespaces
``cosent_tf.layers``, ``cosent_tf.losses``, ``cosent_tf.callbacks`` and ``cosent_tf.optimizers``,
and the pipeline's stages are the packages ``models``, ``huggingface``, ``data``, ``training``,
``inference``, ``export`` and ``experiments`` (docs/architecture.md).
"""

from __future__ import annotations

from . import environment  # noqa: F401  (sets up Keras 2 before anything imports TensorFlow)
from .api import lazy_names
from .compat import install_moved_modules
from .losses import CLASSES as _LOSS_CLASSES

__version__ = "0.6.0"

install_moved_modules()

# Each name loads its module (and TensorFlow) on first use, so that the command line answers
# --help, and `import cosent_tf` returns, without importing TensorFlow.
_HOMES = {
    # models and their parts
    "build_encoder": ".models.builders",
    "build_interaction_model": ".models.builders",
    "Pooling": ".layers",
    "PaddingMask": ".layers",
    "SentenceTokenizer": ".models.tokenization",
    # losses and the optimizer
    **dict.fromkeys(_LOSS_CLASSES, ".losses"),
    "FusedAdam": ".optimizers",
    # data
    "Task": ".data.tasks",
    "TASKS": ".data.tasks",
    "PairData": ".data.pairs",
    "read_senteval": ".data.benchmarks",
    "read_nli": ".data.benchmarks",
    "load_task": ".data.benchmarks",
    "read_pair_file": ".data.files",
    "PairFileFormat": ".data.files",
    "pair_dataset": ".data.pipeline",
    "interaction_dataset": ".data.pipeline",
    # training
    "RunConfig": ".training.config",
    "train": ".training.engine",
    # checkpoints and trained models
    "save_checkpoint": ".models.checkpoints",
    "ModelSpec": ".inference.model_dir",
    "save_model_dir": ".inference.model_dir",
    "load_model_dir": ".inference.model_dir",
    "export_saved_model": ".export.savedmodel",
    "export_hf": ".export.huggingface",
    "export_onnx": ".export.onnx_export",
    "SentenceEncoder": ".inference.matchers",
    "PairScorer": ".inference.matchers",
    "load_matcher": ".inference.matchers",
    "VectorIndex": ".inference.index",
    "Hit": ".inference.index",
    "RerankedHit": ".inference.index",
    "rerank": ".inference.matchers",
    # the match decision shipped with a model
    "MatchDecision": ".calibration",
    "fit_decision": ".calibration",
    "read_decision": ".calibration",
    "Decisions": ".inference.matchers",
    # hard negatives mined from one's own files
    "mine_hard_negatives": ".mining",
    "MinedNegatives": ".mining",
    # errors
    "CosentError": ".errors",
    "DataError": ".errors",
    "ConfigError": ".errors",
    "CheckpointError": ".errors",
    "NonFiniteLossError": ".errors",
    "TrainingInterrupted": ".errors",
    "WorkerLostError": ".errors",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)

__all__ = list(_HOMES)
