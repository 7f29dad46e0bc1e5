"""Running an ONNX export (:mod:`cosent_tf.export.onnx_export`) with ONNX Runtime instead of
TensorFlow: :class:`OnnxModel` is called as the engine's Keras model is in
:func:`~cosent_tf.inference.runtime.batched_outputs`, so the matchers, evaluation and search run
on it unchanged (``SentenceEncoder.load(folder, runtime="onnx")``).

onnxruntime is the ``[onnx]`` extra, not a dependency of the package: it is imported when an
ONNX model is loaded, with the install command in the error when it is missing.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any

import numpy as np

from ..choices import ONNX_FILES
from ..errors import ConfigError
from ..exports import EXPORT_RECORD
from ..huggingface import VOCAB_FILE
from ..io import file_digest, read_json
from ..models.kinds import FEATURE
from ..models.spec import ModelSpec
from ..models.tokenization import SentenceTokenizer

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
INSTALL_HINT = 'pip install "cosent-tf[onnx]"'


def require(module: str) -> Any:
    """The module ``module`` of the ``[onnx]`` extra, or a ConfigError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ConfigError(
            f"ONNX export and --runtime onnx need {module.split('.')[0]}, which is not installed ({error}); "
            f"install it with: {INSTALL_HINT}"
        ) from None


class OnnxModel:
    """An exported ONNX file in an ONNX Runtime session, called with (token ids, segment ids) for the
    outputs of the engine's model: a feature model's vectors (B, H), an interaction model's scores
    (B, 1) or, for a softmax head, its two probabilities (B, 2)."""

    def __init__(self, session: Any, spec: ModelSpec, path: str) -> None:
        self.session, self.spec, self.path = session, spec, path
        self.output_name = "sentence_embedding" if spec.kind == FEATURE.name else "logits"
        outputs = {output.name: output for output in session.get_outputs()}
        if self.output_name not in outputs or [i.name for i in session.get_inputs()] != list(INPUT_NAMES):
            raise ConfigError(
                f"{path}: is not a cosent-tf ONNX export of a {spec.kind} model (it needs inputs "
                f"{', '.join(INPUT_NAMES)} and the output {self.output_name})"
            )
        width = outputs[self.output_name].shape[-1]
        self.output_shape = (None, width if isinstance(width, int) else None)

    @classmethod
    def from_file(cls, path: str, spec: ModelSpec, threads: int = 0) -> OnnxModel:
        """The ONNX file ``path`` of a model described by ``spec``; ``threads``: ONNX Runtime's
        intra-op threads (0: one per core)."""
        onnxruntime = require("onnxruntime")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        try:
            session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception types, one per cause
            raise ConfigError(f"{path}: ONNX Runtime cannot load it: {error}") from None
        return cls(session, spec, path)

    def __call__(self, token_ids: Any, segment_ids: Any) -> np.ndarray:
        ids = np.asarray(token_ids, dtype=np.int64)
        feed = {
            "input_ids": ids,
            "attention_mask": (ids != 0).astype(np.int64),
            "token_type_ids": np.asarray(segment_ids, dtype=np.int64),
        }
        (outputs,) = self.session.run([self.output_name], feed)
        if self.spec.head == "softmax":  # the engine's softmax head gives probabilities
            shifted = np.exp(outputs - outputs.max(axis=1, keepdims=True))
            outputs = shifted / shifted.sum(axis=1, keepdims=True)
        return outputs.astype(np.float32, copy=False)


def read_onnx_record(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The export record of the ONNX export ``folder``.

    Raises:
        ConfigError: ``folder`` holds no ONNX export (no record, or one that lists no ONNX files).
    """
    folder = os.fspath(folder)
    path = os.path.join(folder, EXPORT_RECORD)
    if not os.path.isfile(path):
        raise ConfigError(
            f"{folder}: --runtime onnx needs an ONNX export of a model, and this folder has no {EXPORT_RECORD}; "
            "write one with: cosent-tf export MODEL_DIR OUTPUT_DIR --format onnx"
        )
    record = read_json(path, "a cosent-tf export record")
    if not isinstance(record.get("onnx"), dict) or not isinstance(record.get("model_spec"), dict):
        raise ConfigError(
            f"{path}: this export ({record.get('export')}) holds no ONNX files; write one with: "
            "cosent-tf export MODEL_DIR OUTPUT_DIR --format onnx"
        )
    return record


def read_onnx_spec(folder: str | os.PathLike[str], record: dict[str, Any] | None = None) -> ModelSpec:
    """The description of the model an ONNX export holds (its record keeps it), read without the model.

    Raises:
        ConfigError: ``folder`` holds no ONNX export (:func:`read_onnx_record`), or its description
            is malformed.
    """
    record = read_onnx_record(folder) if record is None else record
    fields = {field.name for field in dataclasses.fields(ModelSpec)}
    spec = ModelSpec(**{key: value for key, value in record["model_spec"].items() if key in fields})
    spec.check(os.path.join(os.fspath(folder), EXPORT_RECORD))
    return spec


def load_onnx_dir(folder: str | os.PathLike[str], precision: str = "float32") -> tuple:
    """(spec, :class:`OnnxModel`, SentenceTokenizer) of an ONNX export, like
    :func:`~cosent_tf.inference.model_dir.load_model_dir` of a model folder.

    Args:
        folder: a folder written by ``cosent-tf export --format onnx``.
        precision: ``float32`` (``onnx/model.onnx``) or ``int8`` (``onnx/model_qint8.onnx``, written
            with ``--quantize int8``).

    Raises:
        ConfigError: no ONNX export; no file of that precision; a file that is not the one the export
            wrote (another model's, or damaged: its sha256 is not the record's); onnxruntime missing.
    """
    folder = os.fspath(folder)
    if precision not in ONNX_FILES:
        raise ConfigError(f"--runtime onnx runs precision {' or '.join(ONNX_FILES)}, not {precision!r}")
    record = read_onnx_record(folder)
    relative = ONNX_FILES[precision]
    entry = record["onnx"].get(relative)
    if entry is None:
        again = "export it again with --quantize int8" if precision == "int8" else "export the model again"
        raise ConfigError(f"{folder}: this export has no {precision} file ({relative}); {again}")
    path = os.path.join(folder, relative)
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: is missing; export the model again")
    if file_digest(path) != entry.get("sha256"):
        raise ConfigError(
            f"{path}: is not the file this export wrote (its sha256 is not the one {EXPORT_RECORD} records): "
            "another model's file, or a damaged one; export the model again"
        )
    spec = read_onnx_spec(folder, record)
    vocab = os.path.join(folder, VOCAB_FILE)
    tokenizer = SentenceTokenizer(vocab, spec.maxlen, spec.word_level, spec.do_lower_case)
    return spec, OnnxModel.from_file(path, spec), tokenizer
