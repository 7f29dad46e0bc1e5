"""What this tool's export folders hold: the file that marks one as this tool's, and the kind of
each export format (:class:`cosent_tf.io.FolderKind`: its marker and the entries it may replace).

Plain data, free of TensorFlow, in the package's lowest layer: loading an export
(:mod:`cosent_tf.inference`), writing one (:mod:`cosent_tf.export`) and checking that an output
does not land in one (:func:`cosent_tf.experiments.scripts.output_kinds`, which ``scripts/report.py``
calls before it writes) read the same names.
"""

from __future__ import annotations

import os

from . import huggingface
from .calibration import DECISION_FILE
from .choices import ONNX_FILES
from .huggingface.folders import ST_MODULE_FOLDERS
from .io import FolderKind

# The file that marks a folder as this tool's export (both Kerases' exports write it), and its format.
EXPORT_RECORD = "cosent_tf_export.json"
EXPORT_FORMAT = "cosent-tf-export"
# The folder of an ONNX export's model files.
ONNX_DIR = os.path.dirname(ONNX_FILES["float32"])

SAVED_MODEL = FolderKind(
    "a SavedModel export",
    EXPORT_RECORD,
    (EXPORT_RECORD, "saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra"),
)
HF_FOLDER = FolderKind(
    "a Hugging Face export",
    EXPORT_RECORD,
    (
        huggingface.CONFIG_FILE,
        huggingface.SAFETENSORS_FILE,
        huggingface.VOCAB_FILE,
        huggingface.TOKENIZER_CONFIG,
        "special_tokens_map.json",
        huggingface.MODULES_FILE,
        huggingface.SENTENCE_CONFIG,
        *ST_MODULE_FOLDERS,
        "README.md",
        DECISION_FILE,
        EXPORT_RECORD,
    ),
)
ONNX_FOLDER = FolderKind("an ONNX export", EXPORT_RECORD, HF_FOLDER.entries + (ONNX_DIR,))
