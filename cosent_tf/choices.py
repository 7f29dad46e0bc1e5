"""The names of the settings whose code needs TensorFlow, as plain data.

Each table is defined here once, and the module that implements its settings imports it from
here (:mod:`cosent_tf.layers` the pooling modes, :mod:`cosent_tf.backend` the precisions,
:mod:`cosent_tf.optimizers` the schedules, :mod:`cosent_tf.training.distribute` the
strategies and the variable that splits the CPU for them, :mod:`cosent_tf.export.savedmodel`
what an export's signatures take), so that the run options' parser
(:mod:`cosent_tf.training.config`) lists the choices without importing TensorFlow, and
``cosent-tf train --help`` answers at once. Like
:mod:`cosent_tf.errors`, this module imports nothing of the package: every layer may read it.
"""

from __future__ import annotations

# --pooling: each mode (see cosent_tf.layers.Pooling) and what the journal paper's pooling
# comparison (and the report) calls it.
POOLING_MODES = {
    "cls": "CLS",
    "last-avg": "mean",
    "first-last-avg": "first-last average",
    "max": "max",
    "pooler": "pooler",
}

# --precision: its Keras dtype policy. fp16 is for GPUs without bfloat16 (T4, V100); it trains
# with dynamic loss scaling (cosent_tf.optimizers.build_optimizer) and is slow on a CPU.
PRECISIONS = {"float32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}

# --schedule: the learning rate after the warm-up (cosent_tf.optimizers.WarmupSchedule).
SCHEDULES = ("constant", "linear")

# --strategy: the tf.distribute strategies a run may use (cosent_tf.training.distribute).
STRATEGIES = ("default", "mirrored", "multi-worker")
# The environment variable that splits the CPU into N logical devices, which the mirrored
# strategy then uses as N replicas (read by cosent_tf.backend when TensorFlow starts).
CPU_DEVICES_VARIABLE = "COSENT_TF_CPU_DEVICES"

# cosent-tf export --inputs: what the SavedModel's signatures take, and what that asks of the server.
EXPORT_INPUTS = {
    "strings": "raw UTF-8 strings, tokenised in the graph (the server needs tensorflow-text's ops)",
    "ids": "token ids, tokenised by the client (the graph holds TensorFlow's own ops only)",
}

# --runtime: what runs a model for inference: the engine's Keras model on TensorFlow, or the ONNX
# file of an export on ONNX Runtime (cosent_tf.inference.onnx_model).
RUNTIMES = ("tensorflow", "onnx")

# --quantize of an ONNX export (cosent_tf.export.onnx_export), and the points (of 100) of Spearman
# or accuracy the quantised file may lose against float32 on --check before the export warns.
ONNX_QUANTIZATIONS = ("int8",)
INT8_LOSS_WARNING = 0.5
# The ONNX file of each precision, by its path in an export (sentence-transformers' names: it loads
# onnx/model.onnx, and another file of onnx/ by model_kwargs={"file_name": ...}).
ONNX_FILES = {"float32": "onnx/model.onnx", "int8": "onnx/model_qint8.onnx"}

# --vector-precision: how sentence vectors are stored and searched (cosent_tf.inference.vectors):
# float32; int8, each dimension scaled into 256 steps between the calibration vectors' minimum and
# maximum; binary, one bit a dimension (the sign), packed eight to a byte.
VECTOR_PRECISIONS = ("float32", "int8", "binary")
# --index of search build: exact search over every vector, or an approximate index
# (cosent_tf.inference.ann): HNSW graphs, or IVF inverted lists over k-means cells.
INDEX_KINDS = ("exact", "hnsw", "ivf")
# --rescore-multiplier's default: a search over int8 or binary vectors takes this many times top-k
# candidates and re-scores them with the float32 vectors kept on disk.
RESCORE_MULTIPLIER = 4

# --best-metric: the valid figures that may pick a run's best epoch (higher is better), each with what
# it is computed over: the valid pairs' scores (every run has them), or the valid pairs made a search
# (each first text with a positive pair a query, the second texts the corpus: a feature model's, and
# only where valid has positive pairs). A loss's default is its row's best_metric (cosent_tf.losses.LOSSES).
PAIR_FIGURE, RETRIEVAL_FIGURE = "pairs", "retrieval"
BEST_METRICS = {
    "spearman": PAIR_FIGURE,
    "pearson": PAIR_FIGURE,
    "mrr@10": RETRIEVAL_FIGURE,
    "ndcg@10": RETRIEVAL_FIGURE,
    "recall@10": RETRIEVAL_FIGURE,
}
# What picks the best epoch when the metric asked for cannot be computed on a run's valid pairs.
FALLBACK_BEST_METRIC = "spearman"
