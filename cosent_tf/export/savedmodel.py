"""Export a model folder as a TensorFlow SavedModel that takes raw UTF-8 strings, or as a
Hugging Face folder (:func:`export_hf`).

Serving needs TensorFlow and tensorflow-text only (tensorflow-text's WordPiece op is in
the graph): ``import tensorflow_text`` before ``tf.saved_model.load``. Signatures:

* feature model: ``serving_default(sentences: string[batch]) -> {"embeddings": float32[batch, dim],
  "truncated": bool[batch]}`` (L2-normalised; ``truncated``: the text was longer than the model's
  maxlen and was cut), and ``encode_ids(token_ids, segment_ids)`` for pre-tokenised input;
* interaction model: ``serving_default(first: string[batch], second: string[batch])
  -> {"scores": float32[batch], "truncated": bool[batch]}``, and ``score_ids(token_ids, segment_ids)``.

A string input of another rank (one string, a matrix of them) is an InvalidArgumentError that
says it must be a 1-D batch of strings.

Each request's rows are computed in groups of similar length (:func:`in_length_buckets`), as
requests come unsorted: about twice the sentences a second of one call padded to its longest
row, for BQ's test sentences 64 to a request (``docs/performance.md``).
Word-level (jieba) models cannot tokenise inside a graph and are refused.

Every export holds :data:`EXPORT_RECORD`, a file only this tool writes: ``overwrite`` replaces
a folder holding it, and no other (a downloaded checkpoint has the same file names).
"""

import json
import os

import numpy as np

from .. import __version__, huggingface
from ..backend import model_precision, tf
from ..data.pipeline import pair_segment_ids
from ..errors import ConfigError
from ..inference.model_dir import load_model_dir
from ..io import FolderKind, atomic_directory, check_output_folder, is_inside, json_field, read_json, write_json
from ..models.builders import head_layer_name
from ..models.checkpoints import HEAD_SCOPE, checkpoint_files, model_arrays, read_config
from .graph_tokenization import GraphTokenizer

# No declared shape: a SavedModel signature does not enforce one (a [2, 2] request was served as
# 4 sentences), so the served functions check the rank themselves (:func:`_batch_of_strings`).
_TEXTS = tf.TensorSpec(shape=None, dtype=tf.string)
_IDS = tf.TensorSpec(shape=[None, None], dtype=tf.int32)

# Widths (in tokens) at which a request's rows are split between model calls, 1.5x apart.
# Requests come in no order, and padding 64 BQ sentences to their longest triples the tokens
# (40 a row against 13.5).
LENGTH_BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384)


def in_length_buckets(compute, token_ids, segment_ids, buckets=LENGTH_BUCKETS):
    """``compute(token_ids, segment_ids)`` (float32 rows) over a padded batch, one call per
    bucket of rows whose lengths fall between the same two ``buckets`` bounds, each call cut
    to its longest row; the rows come back in input order.

    A row's length is its last non-padding (non-zero) token's position plus one, so the cut
    never drops a token the model would have seen: the results are the padded batch's, as
    the model masks padding. Used inside a ``tf.function``.
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
    if tf.size(starts) == 0:  # an empty request: the tokenizer pads it to width 0, which no model takes
        return compute(tf.zeros([0, 1], token_ids.dtype), tf.zeros([0, 1], segment_ids.dtype))
    grouped = tf.TensorArray(tf.float32, size=tf.size(starts), infer_shape=False)
    for i in tf.range(tf.size(starts)):
        rows = order[starts[i] : ends[i]]
        width = tf.maximum(sorted_lengths[ends[i] - 1], 1)
        grouped = grouped.write(
            i, compute(tf.gather(token_ids, rows)[:, :width], tf.gather(segment_ids, rows)[:, :width])
        )
    return tf.gather(grouped.concat(), tf.math.invert_permutation(order))


def _batch_of_strings(texts, name):
    """``texts`` once checked to be a 1-D batch, with that static shape for the ops after it."""
    shape = tf.shape(texts)
    is_batch = tf.debugging.Assert(
        tf.equal(tf.rank(texts), 1), [f"{name} must be a 1-D batch of strings (a list), not a tensor of shape", shape]
    )
    with tf.control_dependencies([is_batch]):
        texts = tf.identity(texts)
    texts.set_shape([None])
    return texts


class _Served(tf.Module):
    def __init__(self, model, tokenizer, pair_segments=False):
        super().__init__(name="cosent_tf")
        self.model = model
        self.tokenizer = tokenizer
        self.pair_segments = pair_segments

    def _model_outputs(self, token_ids, segment_ids):
        with model_precision(self.model):
            return tf.cast(self.model([token_ids, segment_ids], training=False), tf.float32)

    def _outputs(self, token_ids, segment_ids):
        return in_length_buckets(self._model_outputs, token_ids, segment_ids)

    def _vectors(self, token_ids, segment_ids):
        return tf.math.l2_normalize(self._outputs(token_ids, segment_ids), axis=1, epsilon=1e-24)

    def _scores(self, token_ids, segment_ids):
        return self._outputs(token_ids, segment_ids)[:, -1]

    @tf.function(input_signature=[_TEXTS])
    def embed(self, sentences):
        sentences = _batch_of_strings(sentences, "sentences")
        token_ids, truncated = self.tokenizer.encode_and_flag(sentences)
        return {"embeddings": self._vectors(token_ids, tf.zeros_like(token_ids)), "truncated": truncated}

    @tf.function(input_signature=[_IDS, _IDS])
    def embed_ids(self, token_ids, segment_ids):
        return {"embeddings": self._vectors(token_ids, segment_ids)}

    @tf.function(input_signature=[_TEXTS, _TEXTS])
    def score(self, first, second):
        first, second = _batch_of_strings(first, "first"), _batch_of_strings(second, "second")
        same_count = tf.debugging.Assert(
            tf.equal(tf.size(first), tf.size(second)),
            ["first and second must hold as many strings (pairs align), not", tf.size(first), tf.size(second)],
        )
        with tf.control_dependencies([same_count]):
            first = tf.identity(first)
        token_ids, truncated = self.tokenizer.encode_pairs_and_flag(first, second)
        if self.pair_segments:
            segment_ids = pair_segment_ids(token_ids, self.tokenizer.sep_id)
        else:
            segment_ids = tf.zeros_like(token_ids)
        return {"scores": self._scores(token_ids, segment_ids), "truncated": truncated}

    @tf.function(input_signature=[_IDS, _IDS])
    def score_ids(self, token_ids, segment_ids):
        return {"scores": self._scores(token_ids, segment_ids)}


EXPORT_RECORD = "cosent_tf_export.json"
EXPORT_FORMAT = "cosent-tf-export"
SAVED_MODEL = FolderKind(
    "a SavedModel export",
    EXPORT_RECORD,
    (EXPORT_RECORD, "saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra"),
)


def check_export_folder(out_dir, kind, overwrite, model_dir):
    """:func:`cosent_tf.io.check_output_folder` for an export: a folder is replaced only when it
    holds this tool's :data:`EXPORT_RECORD`. Another program's folder with the same file names (a
    downloaded Hugging Face model, a SavedModel) is refused, and so is an export written before
    exports carried the record, which cannot be told apart from one."""
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


def _write_export_record(folder, written, model_dir, spec, **extra):
    """The file that marks ``folder`` as this tool's export (see :func:`check_export_folder`)."""
    record = {
        "format": EXPORT_FORMAT,
        "export": written,
        "model_dir": os.path.abspath(model_dir),
        "kind": spec.kind,
        "cosent_tf_version": __version__,
        **extra,
    }
    write_json(os.path.join(folder, EXPORT_RECORD), record)


def export_saved_model(model_dir: str, out_dir: str, overwrite: bool = False, precision: str = "float32") -> list:
    """Write ``out_dir`` (atomically) as a SavedModel of the model folder ``model_dir``.

    Returns the signature names. Also writes ``assets.extra/cosent_model.json`` (the
    model's description, with the tuned threshold) for the serving side, and
    :data:`EXPORT_RECORD`. An existing ``out_dir`` must be empty, or this tool's export and
    ``overwrite`` true (:func:`check_export_folder`); it may not hold or lie inside ``model_dir``.
    ``precision='bf16'`` serves the model in bfloat16 with bfloat16 weights (outputs stay
    float32), as ``SentenceEncoder.load(..., precision='bf16')`` computes.
    """
    check_export_folder(out_dir, SAVED_MODEL, overwrite, model_dir)
    spec, model, sentence_tokenizer = load_model_dir(model_dir, precision)
    if spec.word_level:
        raise ConfigError(
            f"{model_dir}: a word-level ({spec.architecture}) model pre-tokenises with jieba, which "
            "cannot run inside a TensorFlow graph; serve it with cosent_tf.SentenceEncoder"
        )
    token_dict = sentence_tokenizer.token_dict
    served = _Served(model, GraphTokenizer(token_dict, spec.maxlen, spec.do_lower_case), spec.pair_segments)
    if spec.kind == "feature":
        signatures = {"serving_default": served.embed, "encode_ids": served.embed_ids}
    else:
        signatures = {"serving_default": served.score, "score_ids": served.score_ids}
    with atomic_directory(out_dir, SAVED_MODEL, overwrite, inputs=[model_dir]) as tmp:
        with model_precision(model):  # saving traces the Keras model's own call functions too
            tf.saved_model.save(served, tmp, signatures=signatures)
        os.makedirs(os.path.join(tmp, "assets.extra"), exist_ok=True)
        with open(os.path.join(tmp, "assets.extra", "cosent_model.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "signatures": sorted(signatures),
                    "kind": spec.kind,
                    "maxlen": spec.maxlen,
                    "precision": precision,
                    "threshold": spec.threshold,
                    "source": spec.source,
                },
                f,
                indent=2,
                ensure_ascii=False,
            )
        _write_export_record(tmp, "savedmodel", model_dir, spec, precision=precision)
    return sorted(signatures)


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
        "1_Pooling",
        "2_Normalize",
        "README.md",
        EXPORT_RECORD,
    ),
)
# Architectures whose weights and tokenizer are Hugging Face's BertModel and BertTokenizer.
HF_ARCHITECTURES = ("bert", "roberta")


def export_hf(model_dir: str, out_dir: str, overwrite: bool = False) -> str:
    """Write ``out_dir`` (atomically) as a Hugging Face folder of the model folder ``model_dir``.

    A feature model becomes a sentence-transformers folder (``BertModel`` weights as
    ``model.safetensors``, the tokenizer, ``modules.json`` with its pooling and Normalize) that
    ``SentenceTransformer(out_dir)`` loads and encodes as :class:`cosent_tf.SentenceEncoder`
    does. An interaction model trained with ``--head pooler`` becomes a
    ``BertForSequenceClassification`` (num_labels 1 for a score, 2 for the softmax head) that
    ``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` load.
    Returns what was written (``sentence-transformers`` or ``sequence-classification``). The folder
    also holds :data:`EXPORT_RECORD`, which transformers and sentence-transformers do not read; an
    existing ``out_dir`` is replaced only as :func:`check_export_folder` allows.
    """
    check_export_folder(out_dir, HF_FOLDER, overwrite, model_dir)
    spec, model, tokenizer = load_model_dir(model_dir)
    if spec.architecture not in HF_ARCHITECTURES or spec.word_level:
        raise ConfigError(
            f"{model_dir}: a {spec.architecture} model cannot be written as a Hugging Face BERT folder "
            f"(only {', '.join(HF_ARCHITECTURES)} with a character vocabulary); export it as a SavedModel"
        )
    if spec.kind == "interaction" and not (spec.head_input == "pooler" and spec.pair_segments):
        raise ConfigError(
            f"{model_dir}: this interaction model's head reads the [CLS] hidden state directly (as the original "
            "experiments), which BertForSequenceClassification cannot express: it scores through BERT's pooler. "
            "Train with --head pooler to export to Hugging Face, or export it as a SavedModel"
        )
    if spec.kind == "feature" and spec.pooling not in huggingface.ST_POOLING.values():
        raise ConfigError(
            f"{model_dir}: pooling {spec.pooling!r} cannot be expressed in sentence-transformers, which pools with "
            f"{', '.join(huggingface.ST_POOLING)} ({', '.join(huggingface.ST_POOLING.values())} here); "
            "export it as a SavedModel"
        )
    config = read_config(checkpoint_files(model_dir)[0])
    arrays = model_arrays(model, config, spec.architecture)
    layers = config["num_hidden_layers"]
    tokens = list(tokenizer.token_dict)
    with atomic_directory(out_dir, HF_FOLDER, overwrite, inputs=[model_dir]) as tmp:
        if spec.kind == "feature":
            written = "sentence-transformers"
            if "bert/pooler/dense/kernel" not in arrays:
                # BertModel always has a pooler, which sentence-transformers' pooling never reads: zeros
                # keep transformers from reporting it missing at every load.
                hidden = config["hidden_size"]
                arrays["bert/pooler/dense/kernel"] = np.zeros((hidden, hidden), np.float32)
                arrays["bert/pooler/dense/bias"] = np.zeros((hidden,), np.float32)
            weights = huggingface.hf_weights(arrays, layers)
            huggingface.write_hf_folder(tmp, weights, huggingface.hf_config(config))
            huggingface.write_sentence_transformers_modules(
                tmp, spec.pooling, config["hidden_size"], spec.maxlen, spec.do_lower_case
            )
        else:
            written = "sequence-classification"
            scope = HEAD_SCOPE + head_layer_name(spec.head)
            head = model.get_layer(head_layer_name(spec.head))
            arrays[scope + "/kernel"], arrays[scope + "/bias"] = (w.numpy() for w in head.weights)
            weights = huggingface.hf_weights(arrays, layers, scope, prefix="bert.")
            labels = {value: key for key, value in huggingface.CLASSIFIER_HEADS.items()}[spec.head]
            hf_config = huggingface.hf_config(config, ("BertForSequenceClassification",), num_labels=labels)
            huggingface.write_hf_folder(tmp, weights, hf_config)
        huggingface.write_tokenizer(tmp, tokens, spec.do_lower_case, spec.maxlen)
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(_model_card(spec, written, model_dir))
        _write_export_record(tmp, written, model_dir, spec)
    return written


def _model_card(spec, written, model_dir):
    usage = (
        "from sentence_transformers import SentenceTransformer\n"
        "model = SentenceTransformer('THIS_FOLDER')\n"
        "vectors = model.encode(['第一句', '第二句'])"
        if written == "sentence-transformers"
        else "from sentence_transformers import CrossEncoder\n"
        "model = CrossEncoder('THIS_FOLDER')\n"
        "scores = model.predict([('第一句', '第二句')])"
    )
    source = json.dumps(spec.source, ensure_ascii=False, sort_keys=True)
    return (
        f"# {written} model exported by cosent-tf\n\n"
        f"Exported from the cosent-tf model folder `{os.path.abspath(model_dir)}` "
        f"({spec.kind} model, {spec.pooling or spec.head}, maxlen {spec.maxlen}).\n\n"
        f"Training record: `{source}`\n\n```python\n{usage}\n```\n"
    )
