"""Export a model folder as a TensorFlow SavedModel that takes raw UTF-8 strings, or token ids;
the export record that marks every folder this tool exports (a Hugging Face folder too,
:mod:`.huggingface`).

A string export (``inputs="strings"``, the default) tokenises inside the graph with
tensorflow-text's WordPiece op, so serving needs TensorFlow and tensorflow-text's ops:
``import tensorflow_text`` before ``tf.saved_model.load`` (without it, loading fails with "Op
type not registered 'WordpieceTokenizeWithOffsets'"); the stock TensorFlow Serving model server
links them in. Signatures (:data:`SIGNATURES`):

* feature model: ``serving_default(sentences: string[batch]) -> {"embeddings": float32[batch, dim],
  "truncated": bool[batch]}`` (L2-normalised; ``truncated``: the text was longer than the model's
  maxlen and was cut), and ``encode_ids(token_ids, segment_ids)`` for pre-tokenised input;
* interaction model: ``serving_default(first: string[batch], second: string[batch])
  -> {"scores": float32[batch], "truncated": bool[batch]}``, and ``score_ids(token_ids, segment_ids)``.

When the model folder ships a match decision (``decision.json``, :mod:`cosent_tf.calibration`; a
folder from before decisions existed: the accuracy threshold its description kept), the export adds
``decide(first: string[batch], second: string[batch])`` for either kind of model, and
``decide_ids`` of token ids (a feature model's: ``token_ids_a, segment_ids_a, token_ids_b,
segment_ids_b``, one text of each pair per row; an interaction model's: ``token_ids, segment_ids``
of the pairs). They return ``scores`` (float32: the cosine of the two L2-normalised vectors, or the
head's score, as above), ``matches`` (bool: score above the threshold of the decision's rule) when the
decision says match or no match, ``probabilities`` (float64: the calibration map of the score) when
it has one, ``expected_labels`` (float64: the score on a graded label's scale) when it was fitted on
graded labels, and ``decide`` also ``truncated`` (either text of the pair was cut). A string export
holds both; an ids export only ``decide_ids``. The maps are
computed in float64 on the float32 score, as :class:`cosent_tf.calibration.ScoreMap` computes them
in NumPy, so the export decides as ``SentenceEncoder.decide`` / ``PairScorer.decide`` do. The decision
itself is ``assets.extra/decision.json``. A model folder without a decision exports without
``decide``; a ``decision.json`` fitted for other weights, or edited to be malformed, is refused
(:func:`cosent_tf.calibration.read_decision`) and nothing is written.

An export at a width (``dim``, ``--dim D``) serves a feature model's vectors cut to their first D
dimensions and renormalised to unit length, in the graph (``embeddings``: float32[batch, D]), as
``SentenceEncoder.encode(texts, dim=D)`` gives them. A match decision was fitted on the cosines of the
full vectors, so such an export carries none (no ``decide`` signatures; a warning says so):
``cosent-tf evaluate MODEL_DIR PAIRS --dim D`` measures the cut vectors' own threshold.
``assets.extra/cosent_model.json`` and the export record say the width (``dim``; null at full width).

An ids export (``inputs="ids"``) holds only the ids functions, as ``serving_default`` and under
their names above: a graph of TensorFlow's own ops, which any TensorFlow runtime loads. The client
tokenises: int32 ``token_ids`` [batch, width], [CLS] ... [SEP] (a pair: [CLS] a [SEP] b [SEP]),
padded with 0 (the model masks id 0), with ``assets.extra/vocab.txt`` and the ``maxlen``,
``do_lower_case`` and ``word_level`` of ``assets.extra/cosent_model.json``
(:class:`cosent_tf.SentenceTokenizer` does this); ``segment_ids`` are 0, except for an interaction
model whose ``pair_segments`` is true: 1 on the second text and its [SEP]
(:func:`cosent_tf.data.pipeline.pair_segment_ids` with ``sep_id``).

A string input of another rank (one string, a matrix of them) is an InvalidArgumentError that
says it must be a 1-D batch of strings.

Each request's rows are computed in groups of similar length (:func:`in_length_buckets`), as
requests come unsorted: padding a whole request to its longest row would compute mostly padding
(see docs/performance.md, 'Length buckets').
Word-level (jieba) models cannot tokenise inside a graph: their string export is refused, their
ids export is not.

Every export holds :data:`EXPORT_RECORD`, a file only this tool writes: ``overwrite`` replaces
a folder holding it, and no other (a downloaded checkpoint has the same file names).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any, Callable, Optional

from .. import __version__, huggingface
from ..calibration import DECISION_FILE, MatchDecision, ScoreMap
from ..choices import EXPORT_INPUTS
from ..data.pipeline import pair_segment_ids
from ..errors import ConfigError, lookup
from ..exports import EXPORT_FORMAT, EXPORT_RECORD, SAVED_MODEL
from ..inference.vectors import check_dim
from ..io import FolderKind, atomic_directory, check_output_folder, is_inside, json_field, read_json, write_json
from ..models.kinds import FEATURE, INTERACTION, get_kind
from ..models.spec import ModelSpec, read_model_decision, read_spec
from ..process_keras import KERAS_MAJOR, keras, tf
from .engine_model import load_engine_model, model_width, require_tensorflow_graph, tracing_precision
from .graph_tokenization import GraphTokenizer

logger = logging.getLogger(__name__)

# No declared shape: a SavedModel signature does not enforce one (a [2, 2] request was served as
# 4 sentences), so the served functions check the rank themselves (:func:`_batch_of_strings`).
_TEXTS = tf.TensorSpec(shape=None, dtype=tf.string)
_IDS = tf.TensorSpec(shape=[None, None], dtype=tf.int32)

# Widths (in tokens) at which a request's rows are split between model calls, 1.5x apart:
# requests come in no order, and one padded to its longest row is mostly padding.
LENGTH_BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384)


def in_length_buckets(
    compute: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    token_ids: tf.Tensor,
    segment_ids: tf.Tensor,
    buckets: Sequence[int] = LENGTH_BUCKETS,
) -> tf.Tensor:
    """``compute(token_ids, segment_ids)`` (float32 rows) over a padded batch, one call per
    bucket of rows whose lengths fall between the same two ``buckets`` bounds, each call cut
    to its longest row; the rows come back in input order.

    A row's length is its last non-padding (non-zero) token's position plus one, so the cut
    never drops a token the model would have seen: the results are the padded batch's, as
    the model masks padding. Used inside a ``tf.function``.

    Args:
        compute: the model's float32 rows of a (token ids, segment ids) batch.
        token_ids: int32 (batch, width), padded with 0.
        segment_ids: int32 (batch, width).
        buckets: the length bounds between which rows share a call.

    Returns:
        ``compute``'s rows for the whole batch, in input order.

    Example:
        >>> vectors = in_length_buckets(lambda ids, segments: model([ids, segments]), token_ids, segment_ids)
    """
    positions = tf.range(1, tf.shape(token_ids)[1] + 1)
    lengths = tf.reduce_max(tf.where(token_ids != 0, positions[tf.newaxis], 0), axis=1)
    order = tf.argsort(lengths, stable=True)
    sorted_lengths = tf.gather(lengths, order)
    ends = tf.concat(
        [tf.searchsorted(sorted_lengths, tf.constant(buckets, tf.int32), side="right"), [tf.size(order)]], 0
    )
    starts = tf.concat([[0], ends[:-1]], 0)
    filled = ends > starts
    starts, ends = tf.boolean_mask(starts, filled), tf.boolean_mask(ends, filled)
    # An empty request fills no bucket; it makes one call on its zero rows, at width 1 (the
    # tokenizer pads it to width 0, which no model takes): one call site, so the model is traced once.
    calls = tf.maximum(tf.size(starts), 1)
    starts, ends = tf.pad(starts, [[0, calls - tf.size(starts)]]), tf.pad(ends, [[0, calls - tf.size(ends)]])
    narrowest = [[0, 0], [0, tf.maximum(1 - tf.shape(token_ids)[1], 0)]]
    token_ids, segment_ids = tf.pad(token_ids, narrowest), tf.pad(segment_ids, narrowest)
    grouped = tf.TensorArray(tf.float32, size=calls, infer_shape=False)
    for i in tf.range(calls):
        rows = order[starts[i] : ends[i]]
        width = tf.maximum(tf.reduce_max(sorted_lengths[starts[i] : ends[i]]), 1)
        grouped = grouped.write(
            i, compute(tf.gather(token_ids, rows)[:, :width], tf.gather(segment_ids, rows)[:, :width])
        )
    return tf.gather(grouped.concat(), tf.math.invert_permutation(order))


def _batch_of_strings(texts: tf.Tensor, name: str) -> tf.Tensor:
    """``texts`` once checked to be a 1-D batch, with that static shape for the ops after it."""
    shape = tf.shape(texts)
    is_batch = tf.debugging.Assert(
        tf.equal(tf.rank(texts), 1), [f"{name} must be a 1-D batch of strings (a list), not a tensor of shape", shape]
    )
    with tf.control_dependencies([is_batch]):
        texts = tf.identity(texts)
    texts.set_shape([None])
    return texts


def _same_count(first: tf.Tensor, second: tf.Tensor, message: str) -> tf.Tensor:
    """``first`` once checked to have as many rows as ``second`` (the pairs align); else an
    InvalidArgumentError that says ``message`` and the two counts."""
    same_count = tf.debugging.Assert(
        tf.equal(tf.shape(first)[0], tf.shape(second)[0]),
        [f"{message} (pairs align), not", tf.shape(first)[0], tf.shape(second)[0]],
    )
    with tf.control_dependencies([same_count]):
        return tf.identity(first)


def score_map_in_graph(score_map: ScoreMap, scores: tf.Tensor) -> tf.Tensor:
    """``score_map`` of float64 ``scores`` in a TensorFlow graph, as :class:`ScoreMap` computes it in
    NumPy: a Platt map's sigmoid, or an isotonic map's ``np.interp`` over its knots (linear between
    them, flat beyond the first and the last, NaN for a NaN score).

    Args:
        score_map: a checked map (:meth:`ScoreMap.check`): knots rising, or a Platt slope and intercept.
        scores: float64 scores, any shape.

    Returns:
        float64, the shape of ``scores``.

    Example:
        >>> score_map = ScoreMap("isotonic", (0.2, 0.6), (0.1, 0.9))
        >>> score_map_in_graph(score_map, tf.constant([0.0, 0.4, 1.0], tf.float64)).numpy()
        array([0.1, 0.5, 0.9])
    """
    if score_map.method == "platt":
        return tf.math.sigmoid(score_map.slope * scores + score_map.intercept)
    knots = tf.constant(score_map.scores, tf.float64)
    values = tf.constant(score_map.values, tf.float64)
    last = len(score_map.scores) - 1
    if last == 0:  # np.interp with one knot: its value everywhere
        mapped = tf.fill(tf.shape(scores), values[0])
    else:
        flat = tf.reshape(scores, [-1])
        # knot i starts the segment of the scores in [knots[i], knots[i + 1]), as np.interp's search
        segment = tf.searchsorted(knots, flat, side="right") - 1
        inner = tf.clip_by_value(segment, 0, last - 1)
        low_score, high_score = tf.gather(knots, inner), tf.gather(knots, inner + 1)
        low_value, high_value = tf.gather(values, inner), tf.gather(values, inner + 1)
        # np.interp's own arithmetic (slope first), so that the two agree to the last bit
        between = (high_value - low_value) / (high_score - low_score) * (flat - low_score) + low_value
        mapped = tf.where(segment < 0, values[0], tf.where(segment >= last, values[last], between))
        mapped = tf.reshape(mapped, tf.shape(scores))
    return tf.where(tf.math.is_nan(scores), scores, mapped)


def decision_outputs(decision: MatchDecision, scores: tf.Tensor) -> dict[str, tf.Tensor]:
    """What a ``decide`` signature returns for float32 ``scores`` (see this module's description):
    the scores, and ``matches``, ``probabilities`` and ``expected_labels`` where ``decision`` has the
    threshold, the calibration map and the graded map they need; each computed on the score as
    float64, as :class:`~cosent_tf.calibration.MatchDecision` computes them in NumPy.

    Args:
        decision: the model's decision.
        scores: float32 [batch], one score per pair.

    Returns:
        Output name -> tensor [batch].

    Example:
        >>> decision = MatchDecision({"file": "valid.tsv"}, thresholds={"accuracy": 0.8, "f1": 0.7})
        >>> decision_outputs(decision, tf.constant([0.9, 0.75]))["matches"].numpy()
        array([ True, False])
    """
    outputs = {"scores": scores}
    exact = tf.cast(scores, tf.float64)
    if decision.binary:
        outputs["matches"] = tf.greater(exact, decision.threshold())
    if decision.calibration is not None:
        outputs["probabilities"] = score_map_in_graph(decision.calibration, exact)
    if decision.expected_label is not None:
        outputs["expected_labels"] = score_map_in_graph(decision.expected_label, exact)
    return outputs


class _ServedIds(tf.Module):
    """What an ids export serves: the model's function of token ids for its ``kind`` (``embed_ids``
    or ``score_ids``), which uses TensorFlow's own ops only. With a ``decision``, the module also
    holds ``decide_ids`` for that kind; with a ``dim``, a feature model's vectors are their first
    ``dim`` dimensions, renormalised. Saving traces every function a module holds, so each is made
    here for the kind that serves it, never declared on the class."""

    def __init__(
        self,
        model: keras.Model,
        kind: str = FEATURE.name,
        decision: Optional[MatchDecision] = None,
        dim: Optional[int] = None,
    ) -> None:
        super().__init__(name="cosent_tf")
        self.model = model
        if KERAS_MAJOR == 3:  # a Keras 3 model's variables, listed so that the SavedModel holds them
            self.weights = [variable.value for variable in model.variables]
        self._decision = decision
        self._dim = dim
        self._by_vectors = get_kind(kind).scored_by == "cosine"
        if self._by_vectors:
            self.embed_ids = tf.function(self._embed_ids, input_signature=[_IDS, _IDS])
        else:
            self.score_ids = tf.function(self._score_ids, input_signature=[_IDS, _IDS])
        if decision is not None:
            if self._by_vectors:
                self.decide_ids = tf.function(self._decide_vector_ids, input_signature=[_IDS] * 4)
            else:
                self.decide_ids = tf.function(self._decide_pair_ids, input_signature=[_IDS] * 2)

    def _model_outputs(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
        with tracing_precision(self.model):
            return tf.cast(self.model([token_ids, segment_ids], training=False), tf.float32)

    def _outputs(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
        return in_length_buckets(self._model_outputs, token_ids, segment_ids)

    def _vectors(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
        outputs = self._outputs(token_ids, segment_ids)
        if self._dim is not None:
            outputs = outputs[:, : self._dim]  # cut before normalising, as SentenceEncoder.encode(dim=) does
        return tf.math.l2_normalize(outputs, axis=1, epsilon=1e-24)

    def _scores(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
        return self._outputs(token_ids, segment_ids)[:, -1]

    def _decide(self, scores: tf.Tensor) -> dict[str, tf.Tensor]:
        assert self._decision is not None  # decide functions exist only with a decision
        return decision_outputs(self._decision, scores)

    def _embed_ids(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"embeddings": self._vectors(token_ids, segment_ids)}

    def _score_ids(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scores": self._scores(token_ids, segment_ids)}

    def _decide_vector_ids(
        self, token_ids_a: tf.Tensor, segment_ids_a: tf.Tensor, token_ids_b: tf.Tensor, segment_ids_b: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        token_ids_a = _same_count(token_ids_a, token_ids_b, "token_ids_a and token_ids_b must hold as many rows")
        # each side at its own width: the two texts of a pair are encoded apart
        first, second = self._vectors(token_ids_a, segment_ids_a), self._vectors(token_ids_b, segment_ids_b)
        return self._decide(tf.reduce_sum(first * second, axis=1))

    def _decide_pair_ids(self, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._decide(self._scores(token_ids, segment_ids))


class _Served(_ServedIds):
    """What a string export serves: the model behind its graph tokenizer, with the functions of
    texts besides those of token ids (and with a decision, ``decide`` besides ``decide_ids``)."""

    def __init__(
        self,
        model: keras.Model,
        tokenizer: GraphTokenizer,
        pair_segments: bool = False,
        kind: str = FEATURE.name,
        decision: Optional[MatchDecision] = None,
        dim: Optional[int] = None,
    ) -> None:
        super().__init__(model, kind, decision, dim)
        self.tokenizer = tokenizer
        self.pair_segments = pair_segments
        if self._by_vectors:
            self.embed = tf.function(self._embed, input_signature=[_TEXTS])
        else:
            self.score = tf.function(self._pair_scores, input_signature=[_TEXTS, _TEXTS])
        if decision is not None:
            decide = self._decide_texts_by_vectors if self._by_vectors else self._decide_texts_by_pairs
            self.decide = tf.function(decide, input_signature=[_TEXTS, _TEXTS])

    def _aligned(self, first: tf.Tensor, second: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        first, second = _batch_of_strings(first, "first"), _batch_of_strings(second, "second")
        return _same_count(first, second, "first and second must hold as many strings"), second

    def _pair_scores(self, first: tf.Tensor, second: tf.Tensor) -> dict[str, tf.Tensor]:
        first, second = self._aligned(first, second)
        token_ids, truncated = self.tokenizer.encode_pairs_and_flag(first, second)
        if self.pair_segments:
            segment_ids = pair_segment_ids(token_ids, self.tokenizer.sep_id)
        else:
            segment_ids = tf.zeros_like(token_ids)
        return {"scores": self._scores(token_ids, segment_ids), "truncated": truncated}

    def _embed(self, sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        sentences = _batch_of_strings(sentences, "sentences")
        token_ids, truncated = self.tokenizer.encode_and_flag(sentences)
        return {"embeddings": self._vectors(token_ids, tf.zeros_like(token_ids)), "truncated": truncated}

    def _decide_texts_by_vectors(self, first: tf.Tensor, second: tf.Tensor) -> dict[str, tf.Tensor]:
        first, second = self._aligned(first, second)
        # both sides in one call, grouped by length together, as SentenceEncoder.similarity encodes them
        token_ids, truncated = self.tokenizer.encode_and_flag(tf.concat([first, second], 0))
        vectors = self._vectors(token_ids, tf.zeros_like(token_ids))
        count = tf.size(first)
        outputs = self._decide(tf.reduce_sum(vectors[:count] * vectors[count:], axis=1))
        return {**outputs, "truncated": truncated[:count] | truncated[count:]}

    def _decide_texts_by_pairs(self, first: tf.Tensor, second: tf.Tensor) -> dict[str, tf.Tensor]:
        scored = self._pair_scores(first, second)
        return {**self._decide(scored["scores"]), "truncated": scored["truncated"]}


# What a SavedModel of each model kind (cosent_tf.models.kinds) serves, by what its signatures take
# (strings: tokenised in the graph; ids: tokenised by the client): signature name -> the served
# module's function behind it (described in this module's docstring).
SIGNATURES = {
    FEATURE.name: {
        "strings": {"serving_default": "embed", "encode_ids": "embed_ids"},
        "ids": {"serving_default": "embed_ids", "encode_ids": "embed_ids"},
    },
    INTERACTION.name: {
        "strings": {"serving_default": "score", "score_ids": "score_ids"},
        "ids": {"serving_default": "score_ids", "score_ids": "score_ids"},
    },
}
# What an export of a model folder with a match decision serves besides, of either kind.
DECISION_SIGNATURES = {"strings": {"decide": "decide", "decide_ids": "decide_ids"}, "ids": {"decide_ids": "decide_ids"}}


def check_export_folder(out_dir: str | os.PathLike[str], kind: FolderKind, overwrite: bool, model_dir: str) -> None:
    """:func:`cosent_tf.io.check_output_folder` for an export: a folder is replaced only when it
    holds this tool's :data:`EXPORT_RECORD`. Another program's folder with the same file names (a
    downloaded Hugging Face model, a SavedModel) is refused, and so is an export written before
    exports carried the record, which cannot be told apart from one.

    Args:
        out_dir: the export's folder.
        kind: the export's folder kind (one of :mod:`cosent_tf.exports`).
        overwrite: whether an earlier export of this tool there may be replaced.
        model_dir: the model folder exported, which ``out_dir`` may neither hold nor lie in.

    Raises:
        ConfigError: ``out_dir`` may not be written, saying why and that nothing was written.

    Example:
        >>> check_export_folder("exports/bq-cosent", SAVED_MODEL, overwrite=False, model_dir="runs/bq/model")
    """
    out_dir = os.fspath(out_dir)
    names = os.listdir(out_dir) if os.path.isdir(out_dir) else []
    apart = not (is_inside(out_dir, model_dir) or is_inside(model_dir, out_dir))  # else the inputs' message
    if names and apart and kind.marker not in names:
        found = [name for name in ("saved_model.pb", huggingface.CONFIG_FILE) if name in names]
        if found:
            raise ConfigError(
                f"{out_dir}: holds a model ({found[0]}) that cosent-tf did not mark as its own export (no "
                f"{EXPORT_RECORD}): another program's model, or an export from before exports carried that "
                "file, is never replaced; nothing was written: delete the folder yourself if it may go, "
                "or choose a new or empty folder"
            )
    if names and apart and kind.marker in names:
        record_path = os.path.join(out_dir, kind.marker)
        record = read_json(record_path, "the cosent-tf export record")
        if json_field(record, "format", str, record_path) != EXPORT_FORMAT:
            raise ConfigError(
                f"{record_path}: not a cosent-tf export record (format is not {EXPORT_FORMAT!r}); nothing was "
                "written: choose a new or empty folder"
            )
    check_output_folder(out_dir, kind, overwrite, inputs=[model_dir])


def export_width(spec: ModelSpec, model: keras.Model, dim: Optional[int], model_dir: str) -> Optional[int]:
    """The width an export of the model folder ``model_dir`` cuts its vectors to: ``dim`` checked
    against the model's own width (:func:`~cosent_tf.inference.vectors.check_dim`: a logged warning
    when the model was not trained for it, ``ModelSpec.matryoshka_dims``).

    Args:
        spec: the model's description.
        model: the loaded model.
        dim: the width asked for (``--dim``), or None.
        model_dir: the model folder, for messages.

    Returns:
        ``dim``, or None for the full width (``dim`` None or the model's width).

    Raises:
        ConfigError: ``dim`` for an interaction model, which has no vectors; ``dim`` below 1 or
            above the model's width.

    Example:
        >>> export_width(spec, model, 128, "runs/bq-cosent/model")
        128
    """
    if dim is None:
        return None
    if spec.kind != FEATURE.name:
        raise ConfigError(
            f"{model_dir}: --dim {dim} cuts a feature model's vectors, and this {spec.kind} model scores pairs "
            "without them; nothing was written: export it without --dim"
        )
    return check_dim(dim, model_width(model), spec.matryoshka_dims, model_dir)


def decision_at_width(decision: Optional[MatchDecision], dim: Optional[int], model_dir: str) -> Optional[MatchDecision]:
    """The match decision an export at width ``dim`` carries: ``decision`` at full width, none at a
    width (its thresholds and maps were fitted on the cosines of the full vectors, which the cut
    vectors' cosines are not), with a logged warning when that leaves one behind."""
    if dim is None or decision is None:
        return decision
    logger.warning(
        "%s: its match decision was fitted on the cosines of the model's full vectors and does not hold for "
        "vectors cut to %d dimensions, so the export carries none; measure the cut vectors' own threshold with "
        "cosent-tf evaluate %s LABELLED_FILE --dim %d",
        model_dir,
        dim,
        model_dir,
        dim,
    )
    return None


def write_export_record(folder: str, written: str, model_dir: str, spec: ModelSpec, **extra: Any) -> None:
    """Write the file that marks ``folder`` as this tool's export (see :func:`check_export_folder`):
    what was ``written``, from which model folder, of which kind, by which version, and ``extra``."""
    record = {
        "format": EXPORT_FORMAT,
        "export": written,
        "model_dir": os.path.abspath(model_dir),
        "kind": spec.kind,
        "cosent_tf_version": __version__,
        **extra,
    }
    write_json(os.path.join(folder, EXPORT_RECORD), record)


def export_saved_model(
    model_dir: str,
    out_dir: str,
    overwrite: bool = False,
    precision: str = "float32",
    inputs: str = "strings",
    dim: Optional[int] = None,
) -> list[str]:
    """Write ``out_dir`` (atomically) as a SavedModel of the model folder ``model_dir``.

    Also writes ``assets.extra/cosent_model.json`` (the model's description, with the accuracy
    threshold of its decision and the tokenizer's settings), ``assets.extra/vocab.txt`` (its
    vocabulary) and, when the folder has a match decision, ``assets.extra/decision.json`` for the
    serving side, and :data:`EXPORT_RECORD`. The signatures are in this module's description: with
    a decision, ``decide`` and ``decide_ids`` besides (an ids export: ``decide_ids``).

    Args:
        model_dir: a model folder written by training (or ``save_model_dir``).
        out_dir: the folder to write; an existing one must be empty, or this tool's export and
            ``overwrite`` true (:func:`check_export_folder`); it may not hold or lie inside
            ``model_dir``.
        overwrite: replace an earlier export in ``out_dir``.
        precision: ``"float32"``, or ``"bf16"`` to serve in bfloat16 with bfloat16 weights
            (outputs stay float32), as ``SentenceEncoder.load(..., precision="bf16")`` computes.
        inputs: what the signatures take (:data:`cosent_tf.choices.EXPORT_INPUTS`):
            ``"strings"``, tokenised in the graph by tensorflow-text's ops, or ``"ids"``,
            tokenised by the client, for a server without those ops.
        dim: serve a feature model's vectors cut to their first ``dim`` dimensions and
            renormalised (checked by :func:`export_width`); the export then carries no match
            decision. None (or the model's width): the full vectors.

    Returns:
        The signature names, sorted.

    Raises:
        ConfigError: an unknown ``inputs``; a string export of a word-level (jieba) model, which
            cannot tokenise inside a graph; an ``out_dir`` that may not be written; a
            ``decision.json`` that is malformed or was fitted for another model
            (:func:`~cosent_tf.models.spec.read_model_decision`); a ``dim`` above the
            model's width, or for an interaction model. Nothing is written then.

    Example:
        >>> export_saved_model("runs/bq-cosent/model", "exports/bq-cosent")
        ['decide', 'decide_ids', 'encode_ids', 'serving_default']
        >>> import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the WordPiece op)
        >>> served = tf.saved_model.load("exports/bq-cosent").signatures["serving_default"]
        >>> served(sentences=tf.constant(["花呗如何还钱"]))["embeddings"].shape
        TensorShape([1, 312])
        >>> decide = tf.saved_model.load("exports/bq-cosent").signatures["decide"]
        >>> sorted(decide(first=tf.constant(["花呗如何还钱"]), second=tf.constant(["花呗怎么还款"])))
        ['matches', 'probabilities', 'scores', 'truncated']
        >>> export_saved_model("runs/bq-cosent/model", "exports/bq-cosent-ids", inputs="ids")
        ['decide_ids', 'encode_ids', 'serving_default']
        >>> export_saved_model("runs/bq-cosent/model", "exports/bq-cosent-128", dim=128)
        ['encode_ids', 'serving_default']
    """
    lookup(EXPORT_INPUTS, inputs, "export inputs")
    require_tensorflow_graph("a SavedModel")
    check_export_folder(out_dir, SAVED_MODEL, overwrite, model_dir)
    # a decision that cannot be used (fitted for other weights, edited) is refused before the model loads
    described = read_spec(model_dir)
    decision = read_model_decision(model_dir, described.kind, described.threshold)
    spec, model, sentence_tokenizer = load_engine_model(model_dir, precision)
    dim = export_width(spec, model, dim, model_dir)
    decision = decision_at_width(decision, dim, model_dir)
    token_dict = sentence_tokenizer.token_dict
    served: _ServedIds
    if inputs == "ids":
        served = _ServedIds(model, spec.kind, decision, dim)
    elif spec.word_level:
        raise ConfigError(
            f"{model_dir}: a word-level ({spec.architecture}) model pre-tokenises with jieba, which "
            "cannot run inside a TensorFlow graph; serve it with cosent_tf.SentenceEncoder, or export "
            "its token-id signatures (inputs='ids') and tokenise with cosent_tf.SentenceTokenizer"
        )
    else:
        tokenizer = GraphTokenizer(token_dict, spec.maxlen, spec.do_lower_case)
        served = _Served(model, tokenizer, spec.pair_segments, spec.kind, decision, dim)
    functions = {**SIGNATURES[spec.kind][inputs], **(DECISION_SIGNATURES[inputs] if decision is not None else {})}
    signatures = {name: getattr(served, function) for name, function in functions.items()}
    with atomic_directory(out_dir, SAVED_MODEL, overwrite, inputs=[model_dir]) as tmp:
        with tracing_precision(model):  # saving traces the Keras model's own call functions too
            tf.saved_model.save(served, tmp, signatures=signatures)
        extra = os.path.join(tmp, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, "cosent_model.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "signatures": sorted(signatures),
                    "inputs": inputs,
                    "kind": spec.kind,
                    "maxlen": spec.maxlen,
                    "do_lower_case": spec.do_lower_case,
                    "word_level": spec.word_level,
                    "pair_segments": spec.pair_segments,
                    "sep_id": sentence_tokenizer.sep_id,
                    "precision": precision,
                    "dim": dim,
                    "matryoshka_dims": spec.matryoshka_dims,
                    "threshold": decision.threshold() if decision is not None and decision.binary else None,
                    "source": spec.source,
                },
                f,
                indent=2,
                ensure_ascii=False,
            )
        if decision is not None:
            write_json(os.path.join(extra, DECISION_FILE), decision.to_json())
        with open(os.path.join(extra, "vocab.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{token}\n" for token in sorted(token_dict, key=token_dict.__getitem__))
        write_export_record(tmp, "savedmodel", model_dir, spec, precision=precision, inputs=inputs, dim=dim)
    return sorted(signatures)
