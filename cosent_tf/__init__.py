"""cosent-tf: CoSENT and its baselines for Chinese text matching on TensorFlow/Keras 2.

The names here are the package's user-level API; building blocks (loss functions,
metrics, pipeline primitives, checkpoint checks) stay in their submodules.
"""

import importlib
import importlib.util

from . import environment  # noqa: F401  (sets up Keras 2 before anything imports TensorFlow)

# Each name loads its module (and TensorFlow) on first use, so that the command line answers
# --help, and `import cosent_tf` returns, without importing TensorFlow.
_MODULES = {
    "save_checkpoint": ".checkpoints",
    "PairData": ".data",
    "load_task": ".data",
    "read_nli": ".data",
    "read_senteval": ".data",
    "CheckpointError": ".errors",
    "ConfigError": ".errors",
    "CosentError": ".errors",
    "DataError": ".errors",
    "NonFiniteLossError": ".errors",
    "TrainingInterrupted": ".errors",
    "WorkerLostError": ".errors",
    "export_hf": ".export",
    "export_saved_model": ".export",
    "Hit": ".inference",
    "PairScorer": ".inference",
    "SentenceEncoder": ".inference",
    "VectorIndex": ".inference",
    "PaddingMask": ".layers",
    "Pooling": ".layers",
    "CoSENTLoss": ".losses",
    "CosineMSELoss": ".losses",
    "InteractionCoSENTLoss": ".losses",
    "SentenceBertHead": ".losses",
    "SentenceBertSoftmaxLoss": ".losses",
    "ThresholdContrastiveLoss": ".losses",
    "ModelSpec": ".model_dir",
    "load_model_dir": ".model_dir",
    "save_model_dir": ".model_dir",
    "build_encoder": ".models",
    "build_interaction_model": ".models",
    "FusedAdam": ".optimizers",
    "interaction_dataset": ".pipeline",
    "pair_dataset": ".pipeline",
    "TASKS": ".tasks",
    "Task": ".tasks",
    "SentenceTokenizer": ".tokenization",
    "RunConfig": ".training",
    "train": ".training",
}


def __getattr__(name):
    if name in _MODULES:
        value = getattr(importlib.import_module(_MODULES[name], __name__), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule: cosent_tf.losses, ...
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'cosent_tf' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULES))


__version__ = "0.3.0"

__all__ = [
    # models and their parts
    "build_encoder",
    "build_interaction_model",
    "Pooling",
    "PaddingMask",
    "SentenceTokenizer",
    # losses and the optimizer
    "CoSENTLoss",
    "InteractionCoSENTLoss",
    "SentenceBertHead",
    "SentenceBertSoftmaxLoss",
    "CosineMSELoss",
    "ThresholdContrastiveLoss",
    "FusedAdam",
    # data
    "Task",
    "TASKS",
    "PairData",
    "read_senteval",
    "read_nli",
    "load_task",
    "pair_dataset",
    "interaction_dataset",
    # training
    "RunConfig",
    "train",
    # checkpoints and trained models
    "save_checkpoint",
    "ModelSpec",
    "save_model_dir",
    "load_model_dir",
    "export_saved_model",
    "export_hf",
    "SentenceEncoder",
    "PairScorer",
    "VectorIndex",
    "Hit",
    # errors
    "CosentError",
    "DataError",
    "ConfigError",
    "CheckpointError",
    "NonFiniteLossError",
    "TrainingInterrupted",
    "WorkerLostError",
]
