"""From files to labelled pairs: the tasks (tasks), pairs and the line reading every reader
shares (pairs), the benchmarks' files (benchmarks), a user's own files (files), the examples of
in-batch negatives (groups), retrieval tests (retrieval), the batch order (batching) and the
tf.data pipelines (pipeline)."""

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
    "PairData": ".pairs",
    "NLI_LABELS": ".pairs",
    "MAX_LINE_BYTES": ".pairs",
    "decoded_lines": ".pairs",
    "PLAIN_DECIMAL": ".pairs",
    "FLOAT32_MAX": ".pairs",
    "normalized_text": ".pairs",
    "NORMALIZATION": ".pairs",
    "SPLITS": ".benchmarks",
    "read_senteval": ".benchmarks",
    "read_nli": ".benchmarks",
    "task_file": ".benchmarks",
    "load_task": ".benchmarks",
    "senteval_dir": ".benchmarks",
    "SHARED_VOCAB": ".benchmarks",
    "shared_vocab": ".benchmarks",
    "nli_files": ".benchmarks",
    "FILE_FORMATS": ".files",
    "EXTENSION_FORMATS": ".files",
    "PairFileFormat": ".files",
    "read_pair_file": ".files",
    "read_lines": ".files",
    "read_pair_lines": ".files",
    "read_retrieval_files": ".retrieval",
    "GroupData": ".groups",
    "read_group_file": ".groups",
    "groups_from_pairs": ".groups",
    "LENGTH_POOL_BATCHES": ".batching",
    "pad_batch": ".batching",
    "batches_per_epoch": ".batching",
    "batch_indices": ".batching",
    "pair_dataset": ".pipeline",
    "group_dataset": ".pipeline",
    "text_keys": ".batching",
    "keep_duplicates_apart": ".batching",
    "duplicates_moved": ".batching",
    "pair_segment_ids": ".pipeline",
    "segment_ids": ".pipeline",
    "interaction_dataset": ".pipeline",
    "length_sorted_batches": ".pipeline",
    "restore_order": ".pipeline",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
