"""From files to labelled pairs: the tasks, the readers of each file format, and the tf.data pipelines."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "SENTEVAL": ".tasks",
    "CNSD": ".tasks",
    "FILES": ".tasks",
    "Task": ".tasks",
    "TASKS": ".tasks",
    "MATCHING_TASKS": ".tasks",
    "BINARY_TASKS": ".tasks",
    "get_task": ".tasks",
    "SPLITS": ".files",
    "NLI_LABELS": ".files",
    "PairData": ".files",
    "MAX_LINE_BYTES": ".files",
    "PLAIN_DECIMAL": ".files",
    "read_senteval": ".files",
    "FLOAT32_MAX": ".files",
    "read_nli": ".files",
    "task_file": ".files",
    "load_task": ".files",
    "read_lines": ".files",
    "read_pair_lines": ".files",
    "senteval_dir": ".files",
    "SHARED_VOCAB": ".files",
    "shared_vocab": ".files",
    "nli_files": ".files",
    "FILE_FORMATS": ".files",
    "EXTENSION_FORMATS": ".files",
    "PairFileFormat": ".files",
    "read_pair_file": ".files",
    "read_retrieval_files": ".files",
    "LENGTH_POOL_BATCHES": ".pipeline",
    "pad_batch": ".pipeline",
    "batches_per_epoch": ".pipeline",
    "batch_indices": ".pipeline",
    "pair_dataset": ".pipeline",
    "pair_segment_ids": ".pipeline",
    "segment_ids": ".pipeline",
    "interaction_dataset": ".pipeline",
    "length_sorted_batches": ".pipeline",
    "restore_order": ".pipeline",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
