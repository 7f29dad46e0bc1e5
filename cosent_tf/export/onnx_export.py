"""Export a model folder for ONNX Runtime: the engine's own Keras graph converted by tf2onnx,
float32 and (optionally) dynamically quantised to int8, in the sentence-transformers layout where
the model has one.

Where the model can be written as a Hugging Face folder (:func:`.huggingface.hf_problem`), the
export is that folder (``--format hf``'s) with ``onnx/model.onnx`` and ``onnx/model_qint8.onnx``
in it, so that ``SentenceTransformer(folder, backend="onnx")`` and
``CrossEncoder(folder, backend="onnx")`` load it. Otherwise (first-last-avg or pooler pooling, a
cross-encoder whose head reads [CLS] directly, another architecture) it is the ONNX files with the
tokenizer, the match decision and the export record, for ONNX Runtime and ``--runtime onnx``
alone; the export says why.

The graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64, any batch and
length). It masks padding by id, as the engine does: ``attention_mask`` zeroes the ids it masks
(id 0 is [PAD]). A feature model's graph gives ``sentence_embedding`` (the engine's pooled vector,
not normalised) and, in the sentence-transformers layout, ``last_hidden_state`` first (which
sentence-transformers pools and normalises itself); an interaction model's gives ``logits``
(the score head's score, or the softmax head's two logits).

An export at a width (``dim``) cuts ``sentence_embedding`` to its first ``dim`` dimensions and
renormalises it to unit length in the graph (what ``SentenceEncoder.encode(texts, dim=dim)`` gives);
``last_hidden_state`` stays whole, and the sentence-transformers folder around it cuts its pooled
vector with a Dense slice (:mod:`.huggingface`). It carries no match decision.

Why tf2onnx: it converts the graph the engine runs, so the export computes what the engine
computes for every architecture it can express (BERT, RoBERTa, ALBERT, NEZHA, RoFormer); an export
through the Hugging Face folder and torch would exist only for models that folder holds. Three of
its quirks are mended here (two operations, :func:`_converter_handlers`; one optimizer,
:func:`_optimizers`), and every export is checked against the engine before it is written.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Optional

import numpy as np

from .. import huggingface
from ..calibration import MatchDecision, accuracy_at, are_binary, best_threshold, write_decision
from ..choices import INT8_LOSS_WARNING, ONNX_QUANTIZATIONS
from ..data.files import PairFileFormat, read_pair_file
from ..errors import ConfigError
from ..evaluation import pair_scores, spearman
from ..exports import ONNX_DIR, ONNX_FOLDER
from ..inference.onnx_model import INPUT_NAMES, ONNX_FILES, OnnxModel, require
from ..inference.runtime import batched_outputs, l2_normalize
from ..inference.vectors import truncate
from ..io import atomic_directory, file_digest
from ..models.kinds import FEATURE, head_layer_name
from ..models.spec import ModelSpec, read_model_decision, read_spec
from ..process_keras import KERAS_MAJOR, keras, tf
from .engine_model import load_engine_model, require_tensorflow_graph
from .huggingface import HF_FORMATS, hf_problem, write_hf_files
from .savedmodel import check_export_folder, decision_at_width, export_width, write_export_record

logger = logging.getLogger(__name__)

# The ONNX opset: 17 has LayerNormalization and is read by every onnxruntime since 1.13.
OPSET = 17
# The largest difference from the engine an export may show on the probe texts: unit vectors'
# components, or scores (float32 arithmetic in another order differs by about 1e-7).
PARITY_TOLERANCE = 1e-5
# The least cosine of an int8 file's vector to the float32 file's on the probe texts.
INT8_LEAST_COSINE = 0.99
# What the export checks itself on: texts of different lengths (padded batches), an empty one and
# one past any maxlen.
PROBE_TEXTS = (
    "花呗如何还钱",
    "借呗的额度怎么提高，我想多借一些钱",
    "",
    "为什么我的花呗不能用了？" * 30,
    "Café au LAIT 123",
)


@dataclasses.dataclass(frozen=True)
class OnnxExport:
    """What :func:`export_onnx` wrote.

    Attributes:
        layout: ``sentence-transformers`` or ``sequence-classification`` (a Hugging Face folder with
            the ONNX files in ``onnx/``), or ``onnx`` (the ONNX files alone, with the tokenizer).
        files: each ONNX file's path in the export, with its precision.
        check: with ``check_file``, the float32 and int8 files' Spearman and accuracy on it
            (:func:`quality_check`); else None.
        reason: for the ``onnx`` layout, why the model has no Hugging Face folder; else None.
        dim: the width ``sentence_embedding`` is cut to; None for the full vectors.
    """

    layout: str
    files: dict[str, str]
    check: Optional[dict[str, Any]] = None
    reason: Optional[str] = None
    dim: Optional[int] = None


def export_onnx(
    model_dir: str,
    out_dir: str,
    overwrite: bool = False,
    quantize: Optional[str] = None,
    check_file: Optional[str] = None,
    file_format: Optional[PairFileFormat] = None,
    check_pairs: Any = None,
    dim: Optional[int] = None,
) -> OnnxExport:
    """Write ``out_dir`` (atomically) as an ONNX export of the model folder ``model_dir``.

    Args:
        model_dir: a model folder written by training (or ``save_model_dir``).
        out_dir: the folder to write; an existing one must be empty, or this tool's export and
            ``overwrite`` true.
        overwrite: replace an earlier export in ``out_dir``.
        quantize: ``int8`` also writes ``onnx/model_qint8.onnx``, quantised by onnxruntime's
            dynamic quantisation (int8 weights, activations quantised per batch).
        check_file: labelled pairs on which the float32 and int8 files' Spearman and accuracy are
            measured (:func:`quality_check`), recorded in the export record; a warning when int8
            loses more than :data:`INT8_LOSS_WARNING` points.
        file_format: how ``check_file`` is read (default: by its extension).
        check_pairs: ``check_file``'s labelled pairs, already read (the command line reads them as
            ``evaluate`` does); None reads them here.
        dim: a feature model's ``sentence_embedding`` cut to its first ``dim`` dimensions and
            renormalised in the graph, and the sentence-transformers folder's vectors cut alike
            (checked by :func:`~.savedmodel.export_width`); the export then carries no match
            decision. None (or the model's width): the full vectors.

    Returns:
        What was written (:class:`OnnxExport`).

    Raises:
        ConfigError: tf2onnx or onnxruntime is missing; the converter cannot express the model (the
            operations it lacks are named), or the converted graph differs from the engine's outputs;
            the model's decision.json cannot be used; ``check_file`` is unreadable or unlabelled;
            ``dim`` is above the model's width or given for an interaction model; ``out_dir`` may
            not be written. Nothing is written then.

    Example:
        >>> export_onnx("runs/bq-cosent/model", "exports/bq-cosent-onnx", quantize="int8").files
        {'onnx/model.onnx': 'float32', 'onnx/model_qint8.onnx': 'int8'}
    """
    if quantize is not None and quantize not in ONNX_QUANTIZATIONS:
        raise ConfigError(f"unknown quantisation {quantize!r}; choose {', '.join(ONNX_QUANTIZATIONS)}")
    for module in ("tf2onnx", "onnxruntime"):
        require(module)
    require_tensorflow_graph("an ONNX export (converted by tf2onnx)")
    check_export_folder(out_dir, ONNX_FOLDER, overwrite, model_dir)
    if check_file is not None and check_pairs is None:  # bad pairs are said before the conversion's minute
        check_pairs = read_pair_file(check_file, file_format or PairFileFormat())
        if check_pairs.labels is None:
            raise ConfigError(f"{check_file}: --check needs labelled pairs (a label column), and this file has none")
    described = read_spec(model_dir)
    if described.word_level:
        raise ConfigError(
            f"{model_dir}: an ONNX export carries BERT's WordPiece tokenizer files, and this model cuts texts into "
            "words with jieba first (a word-level vocabulary); export it as a SavedModel"
        )
    decision = read_model_decision(model_dir, described.kind, described.threshold)
    spec, model, tokenizer = load_engine_model(model_dir)
    dim = export_width(spec, model, dim, model_dir)
    decision = decision_at_width(decision, dim, model_dir)
    reason = hf_problem(spec)
    layout = "onnx" if reason is not None else HF_FORMATS[spec.kind].written
    files = {ONNX_FILES["float32"]: "float32"}
    if quantize is not None:
        files[ONNX_FILES[quantize]] = quantize
    with atomic_directory(out_dir, ONNX_FOLDER, overwrite, inputs=[model_dir]) as tmp:
        os.makedirs(os.path.join(tmp, ONNX_DIR))
        float_path = os.path.join(tmp, ONNX_FILES["float32"])
        with_sequence = layout == HF_FORMATS[FEATURE.name].written  # what sentence-transformers pools
        convert(serving_graph(model, spec, with_sequence, dim), float_path, model_dir)
        check_parity(float_path, spec, model, tokenizer, model_dir, dim)
        if quantize is not None:
            quantize_int8(float_path, os.path.join(tmp, ONNX_FILES[quantize]))
            check_quantized(float_path, os.path.join(tmp, ONNX_FILES[quantize]), spec, tokenizer, model_dir)
        check = None
        if check_pairs is not None and check_file is not None:
            check = quality_check(tmp, files, spec, tokenizer, check_pairs, check_file, decision, out_dir)
        card = onnx_card_section(spec, layout, reason, files, check, dim)
        if reason is None:
            write_hf_files(tmp, model_dir, spec, model, tokenizer, decision, card_sections=(card,), dim=dim)
        else:
            huggingface.write_tokenizer(tmp, list(tokenizer.token_dict), spec.do_lower_case, spec.maxlen)
            if decision is not None:
                write_decision(tmp, decision)  # after the ONNX files: stamped with onnx/model.onnx's digest
            with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
                f.write(f"# ONNX model exported by cosent-tf\n\nExported from `{os.path.abspath(model_dir)}`.\n\n")
                f.write(card)
        onnx_record = {
            path: {"precision": precision, "sha256": file_digest(os.path.join(tmp, path))}
            for path, precision in files.items()
        }
        write_export_record(
            tmp,
            layout,
            model_dir,
            spec,
            onnx=onnx_record,
            # an old folder's threshold was fitted on full-width cosines: none rides along at a width
            model_spec=dataclasses.asdict(spec if dim is None else dataclasses.replace(spec, threshold=None)),
            check=check,
            reason=reason,
            dim=dim,
        )
    return OnnxExport(layout, files, check, reason, dim)


# --- the graph ---------------------------------------------------------------------------------


def serving_graph(model: Any, spec: ModelSpec, with_sequence: bool = False, dim: Optional[int] = None) -> Any:
    """What the ONNX file is converted from, with the inputs and outputs of :mod:`this module
    <cosent_tf.export.onnx_export>`: on Keras 2 the Keras model :func:`serving_model` (bert4keras's
    graph, which tf2onnx converts as a Keras model), on Keras 3 the ``tf.function``
    :func:`serving_function` of the keras-hub model."""
    if KERAS_MAJOR == 3:
        return serving_function(model, spec, with_sequence, dim)
    return serving_model(model, spec, with_sequence, dim)


def serving_function(model: Any, spec: ModelSpec, with_sequence: bool = False, dim: Optional[int] = None) -> Any:
    """The ``tf.function`` an ONNX file of a Keras 3 model (:func:`cosent_tf.keras3.models.build_from_spec`,
    TensorFlow backend) is converted from: :func:`serving_model`'s inputs and outputs, computed by
    the keras-hub model. ``with_sequence``: a feature model also gives ``last_hidden_state``, what its
    pooling reads (the last block's output: the sentence-transformers layout pools only cls, mean and
    max, which read it). An interaction model gives its head's logits (before its sigmoid or
    softmax), as the Keras 2 graph's ``logits``."""
    if spec.kind == FEATURE.name:
        named = {"sentence_embedding": model.output}
        if with_sequence:
            # the hidden states the pooling layer is called on (its inputs: them, then the padding mask)
            named = {"last_hidden_state": model.get_layer("pooling").input[0], **named}
        inner = keras.Model(model.inputs, list(named.values()), name="engine")
    else:
        assert spec.head is not None  # an interaction model's spec names its head
        head = model.get_layer(head_layer_name(spec.head))
        named = {"logits": head.input}
        inner = keras.Model(model.inputs, head.input, name="engine")
    signature = [tf.TensorSpec((None, None), tf.int64, name=name) for name in INPUT_NAMES]

    @tf.function(input_signature=signature)
    def serve(input_ids: Any, attention_mask: Any, token_type_ids: Any) -> dict:
        token_ids = tf.cast(input_ids * attention_mask, tf.int32)  # masked by id, as the engine masks
        values = inner([token_ids, tf.cast(token_type_ids, tf.int32)], training=False)
        values = values if isinstance(values, (list, tuple)) else [values]
        if spec.kind != FEATURE.name:
            values = [tf.matmul(tf.cast(values[0], tf.float32), head.kernel) + head.bias]
        return {name: _output_function(name, dim)(value) for name, value in zip(named, values)}

    return serve


def serving_model(
    model: keras.Model, spec: ModelSpec, with_sequence: bool = False, dim: Optional[int] = None
) -> keras.Model:
    """The Keras model the ONNX file is converted from: the engine's ``model`` behind the inputs and
    outputs of :mod:`this module <cosent_tf.export.onnx_export>`. ``with_sequence``: a feature model
    also gives ``last_hidden_state``, the last block's output (the sentence-transformers layout).
    ``dim``: ``sentence_embedding`` is the first ``dim`` dimensions, renormalised."""
    input_ids, attention_mask, token_type_ids = (
        keras.Input(shape=(None,), dtype="int64", name=name) for name in INPUT_NAMES
    )
    token_ids = keras.layers.Lambda(lambda t: tf.cast(t[0] * t[1], tf.int32), name="masked_ids")(
        [input_ids, attention_mask]
    )
    segment_ids = keras.layers.Lambda(lambda t: tf.cast(t, tf.int32), name="segment_ids")(token_type_ids)
    inputs = [input_ids, attention_mask, token_type_ids]
    if spec.kind == FEATURE.name:
        named = {"sentence_embedding": model.output}
        if with_sequence:
            # the last block's first application: the whole sequence ([CLS] pooling applies it again to one token)
            last = model.get_layer(f"Transformer-{_depth(model) - 1}-FeedForward-Norm").get_output_at(0)
            named = {"last_hidden_state": last, **named}
    else:
        assert spec.head is not None  # an interaction model's spec names its head
        head = model.get_layer(head_layer_name(spec.head))
        named = {"logits": keras.layers.Dense(head.units, name="logits_dense")(head.input)}
    inner = keras.Model(model.inputs, list(named.values()), name="engine")
    if spec.kind != FEATURE.name:
        inner.get_layer("logits_dense").set_weights(head.get_weights())
    values = inner([token_ids, segment_ids])
    values = values if isinstance(values, list) else [values]
    outputs = [keras.layers.Lambda(_output_function(name, dim), name=name)(value) for name, value in zip(named, values)]
    return keras.Model(inputs, outputs, name="onnx_serving")


def _output_function(name: str, dim: Optional[int]) -> Any:
    """What the graph does to the engine's output ``name`` last: float32, and at a width ``dim``
    (``sentence_embedding`` only) its first ``dim`` dimensions at unit length."""
    if name != "sentence_embedding" or dim is None:
        return lambda t: tf.cast(t, tf.float32)
    # the cut before the norm, as SentenceEncoder.encode(dim=) takes it; epsilon: its 1e-12 floor, squared
    return lambda t: tf.math.l2_normalize(tf.cast(t, tf.float32)[:, :dim], axis=1, epsilon=1e-24)


def _depth(model: keras.Model) -> int:
    return 1 + max(
        int(layer.name.split("-")[1])
        for layer in model.layers
        if layer.name.startswith("Transformer-") and layer.name.endswith("-FeedForward-Norm")
    )


def convert(serving: Any, path: str, model_dir: str) -> None:
    """Convert ``serving`` (:func:`serving_graph`: a Keras 2 model or a ``tf.function``) into the ONNX file ``path``.

    Raises:
        ConfigError: the graph holds operations tf2onnx cannot convert (named), or the result is no
            valid ONNX model.
    """
    onnx = require("onnx")
    signature = [tf.TensorSpec((None, None), tf.int64, name=name) for name in INPUT_NAMES]
    unsupported: list[str] = []
    handler = _UnsupportedOps(unsupported)
    converter_logger = logging.getLogger("tf2onnx")
    converter_logger.addHandler(handler)
    try:
        proto, _ = _from_keras(
            serving,
            input_signature=signature,
            opset=OPSET,
            custom_op_handlers=_converter_handlers(),
            optimizers=_optimizers(),
        )
        _name_dynamic_dimensions(proto)
        onnx.save(proto, path)
    except Exception as error:  # tf2onnx re-raises whatever a conversion step raised
        raise ConfigError(
            f"{model_dir}: tf2onnx could not convert this model ({type(error).__name__}: {error}); "
            "export it as a SavedModel"
        ) from error
    finally:
        converter_logger.removeHandler(handler)
    if unsupported:
        raise ConfigError(
            f"{model_dir}: tf2onnx cannot express this model in ONNX: it has no conversion for "
            f"{', '.join(sorted(set(unsupported)))}; export it as a SavedModel"
        )
    try:
        onnx.checker.check_model(path)
    except onnx.checker.ValidationError as error:
        raise ConfigError(
            f"{model_dir}: the converted ONNX graph is invalid ({error}); export it as a SavedModel"
        ) from None


# tf2onnx reads it for whether each of its graph optimizers works on a copy of the graph (TRUE,
# its default, so that an optimizer that raises can be skipped) or on the graph itself (FALSE).
_CATCH_ERRORS_VARIABLE = "TF2ONNX_CATCH_ERRORS"


def _from_keras(serving: Any, **options: Any) -> Any:
    """tf2onnx's ``from_keras`` (a Keras 2 model) or ``from_function`` (a ``tf.function``), its graph
    optimizers working on the graph itself: copying the graph for each of them took most of their
    time. Where one raises, the conversion is done again tf2onnx's default way, which skips it; a
    TF2ONNX_CATCH_ERRORS the user set is followed."""
    tf2onnx = require("tf2onnx")
    if isinstance(serving, keras.Model):
        convert = tf2onnx.convert.from_keras
    else:  # from_function takes no optimizers: the reshape optimizer is left out for bert4keras's graph alone
        convert = tf2onnx.convert.from_function
        options.pop("optimizers", None)
    if _CATCH_ERRORS_VARIABLE in os.environ:
        return convert(serving, **options)
    os.environ[_CATCH_ERRORS_VARIABLE] = "FALSE"
    try:
        return convert(serving, **options)
    except Exception as error:  # an optimizer may have left the graph half-rewritten: start again
        logger.debug("tf2onnx failed with its optimizers on the graph itself (%s); converting again", error)
    finally:
        del os.environ[_CATCH_ERRORS_VARIABLE]
    return convert(serving, **options)


def _name_dynamic_dimensions(proto: Any) -> None:
    """Name the inputs' and outputs' batch and length dimensions ``batch_size`` and ``sequence_length``
    (tf2onnx names each ``unk__N``): optimum sizes its outputs from these names when it binds them to
    the device (its default on CUDA), and fails on names that are no input's."""
    for value in [*proto.graph.input, *proto.graph.output]:
        dims = value.type.tensor_type.shape.dim
        # every input and last_hidden_state are (batch, length, ...); sentence_embedding and logits (batch, width)
        per_token = value.name in INPUT_NAMES or value.name == "last_hidden_state"
        for dim, name in zip(dims, ("batch_size", "sequence_length") if per_token else ("batch_size",)):
            dim.dim_param = name  # replaces a dim_value too: the two share a oneof


class _UnsupportedOps(logging.Handler):
    """Collects the TensorFlow operations tf2onnx logs it cannot convert (it goes on without them)."""

    def __init__(self, found: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.found = found

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "is not supported" in message and message.startswith("Tensorflow op ["):
            self.found.append(message[len("Tensorflow op [") :].split("]")[0].split(": ")[-1])


# --- converter quirks (tf2onnx 1.17) ------------------------------------------------------------


def _broadcast_args(ctx: Any, node: Any, name: str, args: Any) -> None:
    """TensorFlow's BroadcastArgs (the shape two shapes broadcast to), which tf2onnx lacks; bert4keras's
    attention masking (``tf.where`` on a mask and a scalar) needs it. Both shapes are padded on the left
    with ones to one rank; each dimension is the second's where the first's is 1, else the first's."""
    from onnx import TensorProto, numpy_helper
    from tf2onnx import utils

    out_dtype = ctx.get_dtype(node.output[0])
    shapes = [ctx.make_node("Cast", [i], attr={"to": TensorProto.INT64}).output[0] for i in node.input]
    ranks = [ctx.make_node("Shape", [shape]).output[0] for shape in shapes]
    rank = ctx.make_node("Max", ranks).output[0]
    one = numpy_helper.from_array(np.array([1], np.int64))
    padded = []
    for shape, shape_rank in zip(shapes, ranks):
        missing = ctx.make_node("Sub", [rank, shape_rank]).output[0]
        ones = ctx.make_node("ConstantOfShape", [missing], attr={"value": one}).output[0]
        padded.append(ctx.make_node("Concat", [ones, shape], attr={"axis": 0}).output[0])
    is_one = ctx.make_node(
        "Equal", [padded[0], ctx.make_const(utils.make_name("one"), np.array(1, np.int64)).output[0]]
    ).output[0]
    chosen = ctx.make_node("Where", [is_one, padded[1], padded[0]]).output[0]
    outputs, output_shapes = node.output, node.output_shapes
    ctx.remove_node(node.name)
    ctx.make_node(
        "Cast", [chosen], attr={"to": out_dtype}, name=name, outputs=outputs, shapes=output_shapes, dtypes=[out_dtype]
    )


def _select_as_where(ctx: Any, node: Any, name: str, args: Any) -> None:
    """TensorFlow's SelectV2 as ONNX's Where. tf2onnx writes it as ``cond * x + (1 - cond) * y`` unless it
    sees an infinity among constant inputs, and bert4keras masks attention with -inf broadcast from a
    constant: -inf * 0 is NaN, so every vector would be NaN."""
    node.type = "Where"


def _erfc(ctx: Any, node: Any, name: str, args: Any) -> None:
    """TensorFlow's Erfc (1 - erf), which tf2onnx lacks; Keras 3's exact GELU (keras-hub's BERT) computes
    with it. Written as ``1 - Erf(x)``, ONNX's Erf: what tf2onnx writes for the GELU of bert4keras."""
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    erf = ctx.make_node("Erf", [node.input[0]]).output[0]
    one = ctx.make_const(utils.make_name("one"), np.array(1, dtype)).output[0]
    outputs, output_shapes, output_dtypes = node.output, node.output_shapes, node.output_dtypes
    ctx.remove_node(node.name)
    ctx.make_node("Sub", [one, erf], name=name, outputs=outputs, shapes=output_shapes, dtypes=output_dtypes)


def _converter_handlers() -> dict[str, tuple[Any, list[Any]]]:
    return {"BroadcastArgs": (_broadcast_args, []), "SelectV2": (_select_as_where, []), "Erfc": (_erfc, [])}


def _optimizers() -> dict[str, Any]:
    """tf2onnx's graph optimizers but its reshape optimizer, which rewires the shape of bert4keras's
    head split onto TokenDense's 2-D matmul (ONNX Runtime then refuses to reshape [B*T, H] to
    [B*T, H, heads, size])."""
    from tf2onnx import optimizer

    return {name: factory for name, factory in optimizer._get_optimizers().items() if name != "reshape_optimizer"}


# --- checks ------------------------------------------------------------------------------------


def _probe_inputs(spec: ModelSpec, tokenizer: Any) -> tuple[list, Optional[int]]:
    """The token ids the export checks itself on (:data:`PROBE_TEXTS`, as texts or as pairs of them) and
    the [SEP] id that marks a pair's second text, for a model with pair segments. Their truncation and
    unknown tokens are not reported: they are the export's own texts, cut on purpose, not the user's."""
    if spec.kind == FEATURE.name:
        return tokenizer.encode_all(list(PROBE_TEXTS), "the export's probe texts", report=False), None
    ids = tokenizer.encode_pairs(
        list(PROBE_TEXTS), list(reversed(PROBE_TEXTS)), "the export's probe pairs", report=False
    )
    return ids, tokenizer.sep_id if spec.pair_segments else None


def check_parity(
    path: str, spec: ModelSpec, model: keras.Model, tokenizer: Any, model_dir: str, dim: Optional[int] = None
) -> None:
    """Refuse an ONNX file whose outputs on :data:`PROBE_TEXTS` differ from the engine's by more than
    :data:`PARITY_TOLERANCE` (unit vectors for a feature model, cut to ``dim`` if given; scores for an
    interaction model)."""
    onnx_model = OnnxModel.from_file(path, spec)
    ids, sep_id = _probe_inputs(spec, tokenizer)
    expected = batched_outputs(model, ids, batch_size=len(ids), sep_id=sep_id)
    got = batched_outputs(onnx_model, ids, batch_size=len(ids), sep_id=sep_id)
    if spec.kind == FEATURE.name:
        expected = l2_normalize(expected) if dim is None else truncate(expected, dim)
        got = l2_normalize(got)
    difference = _largest_difference(expected, got)
    if "last_hidden_state" in [output.name for output in onnx_model.session.get_outputs()]:
        # what sentence-transformers pools: checked pooled as it pools it, with the attention mask
        pooled = _pooled_sequence(onnx_model, ids, spec.pooling, dim)
        difference = max(difference, _largest_difference(expected, pooled))
    if not difference <= PARITY_TOLERANCE:
        raise ConfigError(
            f"{model_dir}: the converted ONNX graph's outputs differ from the model's by {difference:.3g} on probe "
            f"texts (at most {PARITY_TOLERANCE:g} is allowed); nothing was written. Export it as a SavedModel, and "
            "report this with the model's cosent_model.json"
        )


def _largest_difference(expected: np.ndarray, got: np.ndarray) -> float:
    return float(np.max(np.abs(expected - got))) if np.all(np.isfinite(got)) else float("inf")


def _pooled_sequence(onnx_model: OnnxModel, ids: list, pooling: Optional[str], dim: Optional[int] = None) -> np.ndarray:
    """Unit vectors of ``last_hidden_state`` pooled as sentence-transformers pools it (cls, mean or max
    over the tokens its attention mask keeps), cut to their first ``dim`` dimensions if given (as the
    folder's Dense slice cuts them)."""
    length = max(len(row) for row in ids)
    token_ids = np.zeros((len(ids), length), np.int64)
    for row, sequence in zip(token_ids, ids):
        row[: len(sequence)] = sequence
    mask = (token_ids != 0).astype(np.int64)
    feed = {"input_ids": token_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(token_ids)}
    (hidden,) = onnx_model.session.run(["last_hidden_state"], feed)
    kept = mask[:, :, None].astype(bool)
    if pooling == "cls":
        pooled = hidden[:, 0]
    elif pooling == "max":
        pooled = np.where(kept, hidden, -np.inf).max(axis=1)
    else:
        pooled = (hidden * kept).sum(axis=1) / kept.sum(axis=1)
    return l2_normalize(pooled) if dim is None else truncate(pooled, dim)


def check_quantized(float_path: str, int8_path: str, spec: ModelSpec, tokenizer: Any, model_dir: str) -> None:
    """Refuse an int8 file whose outputs on :data:`PROBE_TEXTS` are not finite, or (a feature model) whose
    vectors' cosine to the float32 file's falls below :data:`INT8_LEAST_COSINE`."""
    ids, sep_id = _probe_inputs(spec, tokenizer)
    outputs = [
        batched_outputs(OnnxModel.from_file(path, spec), ids, batch_size=len(ids), sep_id=sep_id)
        for path in (float_path, int8_path)
    ]
    least = 1.0
    if spec.kind == FEATURE.name and np.all(np.isfinite(outputs[1])):
        least = float(np.min(np.sum(l2_normalize(outputs[0]) * l2_normalize(outputs[1]), axis=1)))
    if not (np.all(np.isfinite(outputs[1])) and least >= INT8_LEAST_COSINE):
        raise ConfigError(
            f"{model_dir}: the int8 file's outputs on probe texts are not finite or too far from float32's (least "
            f"cosine {least:.4f}, at least {INT8_LEAST_COSINE} needed); nothing was written. Export without "
            "--quantize"
        )


def quantize_int8(float_path: str, int8_path: str) -> None:
    """onnxruntime's dynamic quantisation: int8 weights of the matmuls and embeddings (signed, per
    tensor, as sentence-transformers' avx512_vnni configuration), activations quantised per batch."""
    quantization = require("onnxruntime.quantization")
    # onnxruntime advises its pre-processing on the root logger at every call; measured on these graphs
    # it neither speeds the int8 file up nor changes its vectors (docs/serving.md), so it is not said
    advice = _MessageFilter("pre-processing before quantization")
    root = logging.getLogger()
    root.addFilter(advice)
    # logging.warning() configures a root logger that has no handler (basicConfig): given one for the
    # call, it leaves the process's logging as it was
    placeholder = logging.NullHandler() if not root.handlers else None
    if placeholder is not None:
        root.addHandler(placeholder)
    try:
        quantization.quantize_dynamic(
            float_path,
            int8_path,
            weight_type=quantization.QuantType.QInt8,
            per_channel=False,
            reduce_range=False,
            extra_options={"MatMulConstBOnly": True},
        )
    finally:
        root.removeFilter(advice)
        if placeholder is not None:
            root.removeHandler(placeholder)


class _MessageFilter(logging.Filter):
    """Drops the records whose message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def quality_check(
    folder: str,
    files: dict[str, str],
    spec: ModelSpec,
    tokenizer: Any,
    pairs: Any,
    check_file: str,
    decision: Optional[MatchDecision] = None,
    where: Optional[str] = None,
) -> dict[str, Any]:
    """Spearman and, for 0/1 labels, accuracy at the file's own best threshold (``accuracy``) and at
    the shipped decision's threshold (``accuracy_shipped``, when ``decision`` has one: what serving
    decides by) of each ONNX file in ``folder`` on the labelled ``pairs`` of ``check_file`` (×100),
    and what int8 loses against float32; a warning naming ``where`` (default ``folder``) is logged
    when it loses more than :data:`INT8_LOSS_WARNING` points of any of them, or a figure is no number."""
    texts_a, texts_b, labels = pairs.texts_a, pairs.texts_b, np.asarray(pairs.labels, dtype=np.float64)
    if spec.kind == FEATURE.name:
        inputs: Any = (
            tokenizer.encode_all(texts_a, f"{check_file}, first texts"),
            tokenizer.encode_all(texts_b, f"{check_file}, second texts"),
        )
    else:
        inputs = tokenizer.encode_pairs(texts_a, texts_b, f"{check_file}, pairs")
    sep_id = tokenizer.sep_id if spec.pair_segments else None
    binary = are_binary(labels)
    measured: dict[str, Any] = {"file": os.path.abspath(check_file), "pairs": len(labels)}
    for path, precision in files.items():
        scores = pair_scores(OnnxModel.from_file(os.path.join(folder, path), spec), spec.kind, inputs, sep_id=sep_id)
        figures = {"spearman": 100 * spearman(scores, labels)}
        if binary:
            threshold, _ = best_threshold(scores, labels)
            figures["accuracy"] = 100 * accuracy_at(scores, labels, threshold)
            if decision is not None and decision.binary:
                figures["accuracy_shipped"] = 100 * accuracy_at(scores, labels, decision.threshold())
        measured[precision] = figures
    if "int8" in measured:
        loss = {name: measured["float32"][name] - measured["int8"][name] for name in measured["float32"]}
        measured["int8_loss"] = loss
        measured["warning"] = any(not value <= INT8_LOSS_WARNING for value in loss.values())  # NaN warns too
        if measured["warning"]:
            logger.warning(
                "%s: the int8 file loses %s against float32 on %s (%d pairs; more than %g points): serve the "
                "float32 file",
                where or folder,
                ", ".join(f"{value:.2f} points of {name}" for name, value in loss.items()),
                check_file,
                len(labels),
                INT8_LOSS_WARNING,
            )
    return measured


def onnx_card_section(
    spec: ModelSpec,
    layout: str,
    reason: Optional[str],
    files: dict[str, str],
    check: Optional[dict[str, Any]],
    dim: Optional[int] = None,
) -> str:
    """The model card's "ONNX" section: the files, the graph's inputs and outputs (``dim``: the width
    ``sentence_embedding`` is cut to), how to load them, and the int8 check."""
    feature = spec.kind == FEATURE.name
    lines = ["## ONNX", ""]
    lines += [f"- `{path}`: {precision}" for path, precision in files.items()]
    if feature and dim is not None:
        outputs = (
            f"`sentence_embedding` [batch, {dim}], the sentence vector's first {dim} dimensions, renormalised to "
            "unit length (a dot product is their cosine). No match decision comes with this export: one fitted on "
            "the full vectors' cosines does not hold for the cut ones"
        )
    elif feature:
        outputs = (
            "`sentence_embedding` [batch, hidden], the sentence vector (not normalised: normalise it for a cosine)"
        )
        if layout == HF_FORMATS[FEATURE.name].written:
            outputs = "`last_hidden_state` [batch, length, hidden] (what sentence-transformers pools) and " + outputs
    elif spec.head == "softmax":
        outputs = "`logits` [batch, 2], before the softmax: P(match) = softmax(logits)[:, 1]"
    else:
        outputs = "`logits` [batch, 1], the score itself"
    lines += [
        "",
        f"Inputs: {', '.join(f'`{name}`' for name in INPUT_NAMES)} (int64, [batch, length]; [PAD] is id 0, and the "
        f"graph masks by id: `attention_mask` zeroes the ids it masks). Outputs: {outputs}.",
    ]
    if layout == "onnx":
        lines += ["", f"sentence-transformers cannot load this folder: {reason}."]
    else:
        load = "SentenceTransformer" if feature else "CrossEncoder"
        lines += [
            "",
            f"sentence-transformers (5.x with its onnx extra): `{load}('THIS_FOLDER', backend='onnx')`; the int8 "
            f"file with `model_kwargs={{'file_name': '{ONNX_FILES['int8']}'}}`.",
        ]
    matcher, command = ("SentenceEncoder", "encode") if feature else ("PairScorer", "similarity")
    lines += [
        "",
        f"cosent-tf: `{matcher}.load('THIS_FOLDER', runtime='onnx')`, or `cosent-tf {command} THIS_FOLDER ... "
        "--runtime onnx [--precision int8]`.",
    ]
    if check is not None:
        lines += ["", f"Checked on `{check['file']}` ({check['pairs']} pairs, figures x100):", ""]
        for precision in files.values():
            figures = ", ".join(f"{name} {value:.2f}" for name, value in check[precision].items())
            lines.append(f"- {precision}: {figures}")
    return "\n".join(lines) + "\n"
