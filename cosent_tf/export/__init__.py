"""Trained models out for serving: TensorFlow SavedModels, Hugging Face folders and ONNX files."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api); the folder kinds and the export
# record live in cosent_tf.exports, free of TensorFlow.
_HOMES = {
    "LENGTH_BUCKETS": ".savedmodel",
    "in_length_buckets": ".savedmodel",
    "EXPORT_RECORD": "..exports",
    "EXPORT_FORMAT": ".savedmodel",
    "SAVED_MODEL": "..exports",
    "check_export_folder": ".savedmodel",
    "export_saved_model": ".savedmodel",
    "HF_FOLDER": "..exports",
    "HF_ARCHITECTURES": ".huggingface",
    "export_hf": ".huggingface",
    "ONNX_FOLDER": "..exports",
    "OnnxExport": ".onnx_export",
    "export_onnx": ".onnx_export",
    "MAX_WORD_CHARS": ".graph_tokenization",
    "character_table": ".graph_tokenization",
    "GraphTokenizer": ".graph_tokenization",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
