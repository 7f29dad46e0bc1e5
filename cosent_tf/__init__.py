"""cosent-tf: CoSENT and its baselines for Chinese text matching on TensorFlow/Keras 2."""
from . import backend  # noqa: F401  (sets up Keras 2 before anything imports TensorFlow)
from .checkpoints import checkpoint_files, save_checkpoint
from .data import (BINARY_TASKS, NLI_LABELS, TASKS, PairData, binarised, load_task, read_nli,
                   read_senteval, task_file)
from .errors import CheckpointError, ConfigError, CosentError, DataError, NonFiniteLossError
from .evaluation import (ValidationCheckpoint, accuracy_at, best_threshold, encode,
                         interaction_scores, pair_cosines, pearson, spearman)
from .inference import Hit, PairScorer, SentenceEncoder, VectorIndex, top_k_cosine
from .layers import POOLING_MODES, PaddingMask, Pooling
from .losses import (CoSENTLoss, CosineMSELoss, InteractionCoSENTLoss, SentenceBertHead,
                     SentenceBertSoftmaxLoss, ThresholdContrastiveLoss, cosent_loss,
                     cosine_mse_loss, interaction_cosent_loss, sentence_bert_softmax_loss,
                     threshold_contrastive_loss)
from .model_dir import ModelSpec, load_model_dir, read_spec, save_model_dir
from .models import build_encoder, build_interaction_model
from .optimizers import FusedAdam
from .pipeline import interaction_dataset, length_sorted_batches, pair_dataset
from .tokenization import SentenceTokenizer, check_vocab_size, load_vocab

__version__ = "0.1.0"
