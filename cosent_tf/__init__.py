"""cosent-tf: CoSENT and its baselines for Chinese text matching on TensorFlow/Keras 2.

The names here are the package's user-level API; building blocks (loss functions,
metrics, pipeline primitives, checkpoint checks) stay in their submodules.
"""

from . import backend  # noqa: F401  (sets up Keras 2 before anything imports TensorFlow)
from .checkpoints import save_checkpoint
from .data import PairData, load_task, read_nli, read_senteval
from .errors import CheckpointError, ConfigError, CosentError, DataError, NonFiniteLossError, TrainingInterrupted
from .export import export_hf, export_saved_model
from .inference import Hit, PairScorer, SentenceEncoder, VectorIndex
from .layers import PaddingMask, Pooling
from .losses import (
    CoSENTLoss,
    CosineMSELoss,
    InteractionCoSENTLoss,
    SentenceBertHead,
    SentenceBertSoftmaxLoss,
    ThresholdContrastiveLoss,
)
from .model_dir import ModelSpec, load_model_dir, save_model_dir
from .models import build_encoder, build_interaction_model
from .optimizers import FusedAdam
from .pipeline import interaction_dataset, pair_dataset
from .tasks import TASKS, Task
from .tokenization import SentenceTokenizer
from .training import RunConfig, train

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
]
