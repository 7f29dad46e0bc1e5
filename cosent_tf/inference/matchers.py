"""Using a trained matcher: sentence vectors, pair scores, and exact cosine search.

``SentenceEncoder`` wraps a feature model (a model folder's ``kind: feature``) and
``PairScorer`` an interaction model. Texts are tokenised exactly as in training
(truncated to the model's maxlen; an empty text is ``[CLS] [SEP]``) and run in batches
of similar length; results come back in input order.
"""

import collections
import contextlib
import json
import logging
import os
import weakref

import numpy as np
from tqdm.auto import tqdm

from ..backend import keras, model_precision, tf
from ..data.files import MAX_LINE_BYTES
from ..data.pipeline import length_sorted_batches, restore_order, segment_ids
from ..errors import ConfigError, DataError
from ..io import FolderKind, atomic_directory, json_field, json_type, read_json
from .model_dir import load_model_dir, read_spec

logger = logging.getLogger(__name__)
# Auto progress bars appear from this many texts on.
PROGRESS_FROM = 5000
Hit = collections.namedtuple("Hit", "index score text")


_INFERENCE_FUNCTIONS = weakref.WeakKeyDictionary()
_IDS = tf.TensorSpec(shape=(None, None), dtype=tf.int32)


def inference_function(model: keras.Model):
    """``model`` in inference mode as a tf.function traced once for every batch shape.

    The batch's two halves go through the model as two independent subgraphs, which
    TensorFlow's executor runs side by side. TensorFlow runs a oneDNN matmul on one thread
    when its operands fit in the L2 cache (``ExecuteSingleThreadedGemm``); with 2 MiB of L2 a
    core, as on Intel Xeons, that is most of a 64-sentence batch's matmuls, and one core
    would idle. Encoding on two cores of such a Xeon: 1.08x in bf16 and 1.07x in float32;
    with 1 MiB (the AMD EPYC of ``docs/performance.md``) 0.99-1.01x. Rows never interact in
    the model, so the outputs are the whole batch's (a batch of one leaves an empty half).
    """
    function = _INFERENCE_FUNCTIONS.get(model)
    if function is None:

        @tf.function(input_signature=[_IDS, _IDS])
        def function(token_ids, segment_ids):
            half = (tf.shape(token_ids)[0] + 1) // 2
            with model_precision(model):  # runs while tracing
                halves = [
                    model([token_ids[:half], segment_ids[:half]], training=False),
                    model([token_ids[half:], segment_ids[half:]], training=False),
                ]
            return tf.cast(tf.concat(halves, axis=0), tf.float32)

        _INFERENCE_FUNCTIONS[model] = function
    return function


def batched_outputs(
    model: keras.Model, token_ids: list, batch_size: int = 64, show_progress: bool = False, sep_id: int = None
):
    """A model's outputs (float32 numpy) in input order, computed in length-sorted batches.

    Each batch is padded only to its own longest sequence; segment ids are all 0, or with
    ``sep_id`` those of concatenated pairs (:func:`cosent_tf.data.pipeline.segment_ids`).
    """
    function = inference_function(model)
    order, batches = length_sorted_batches(token_ids, batch_size)
    outputs = [
        function(ids, segment_ids(ids, sep_id)).numpy()
        for _, ids in tqdm(
            batches, total=-(-len(order) // batch_size), unit="batch", desc="encoding", disable=not show_progress
        )
    ]
    if not outputs:
        return np.zeros((0,) + tuple(model.output_shape[1:]), dtype=np.float32)
    return restore_order(np.concatenate(outputs), order)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def cosine_scores(encoder: keras.Model, ids_a: list, ids_b: list, batch_size: int = 64, show_progress=False):
    """Cosine of each pair's two sentence vectors (both sides encoded in one pass)."""
    vectors = l2_normalize(batched_outputs(encoder, list(ids_a) + list(ids_b), batch_size, show_progress))
    first, second = vectors[: len(ids_a)], vectors[len(ids_a) :]
    return np.sum(first * second, axis=1)


def interaction_scores(
    model: keras.Model, pair_ids: list, batch_size: int = 64, show_progress=False, sep_id: int = None
):
    """A cross-encoder's score per pair: the scalar, or P(similar) for a two-way softmax.
    ``sep_id`` marks the second text with segment id 1 (models with ``pair_segments``)."""
    return batched_outputs(model, pair_ids, batch_size, show_progress, sep_id)[:, -1]


def check_texts(texts, name="texts"):
    """``texts`` as a list of str; a clear TypeError for anything else."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings, not a single {type(texts).__name__}; wrap it in a list")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of strings, got {type(texts).__name__}") from None
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] is a {type(text).__name__} ({text!r:.40}), not a str")
    return texts


def check_pairs(texts_a, texts_b):
    texts_a, texts_b = check_texts(texts_a, "texts_a"), check_texts(texts_b, "texts_b")
    if len(texts_a) != len(texts_b):
        raise ValueError(f"texts_a has {len(texts_a)} texts but texts_b has {len(texts_b)}; pairs must align")
    return texts_a, texts_b


def _show(show_progress, count):
    return count >= PROGRESS_FROM if show_progress is None else bool(show_progress)


class _Matcher:
    KIND = None

    def __init__(self, model, tokenizer, spec=None, path=None):
        self.model, self.tokenizer, self.spec, self.path = model, tokenizer, spec, path

    @classmethod
    def load(cls, path: str, precision: str = "float32"):
        """Load a model folder; ``precision='bf16'`` computes in bfloat16, with the weights
        stored in bfloat16 (see :func:`cosent_tf.inference.model_dir.load_model_dir`)."""
        spec, model, tokenizer = load_model_dir(path, precision)
        if spec.kind != cls.KIND:
            other = MATCHERS[spec.kind]
            raise ConfigError(f"{path}: holds a model of kind {spec.kind!r}; load it with {other.__name__}")
        if spec.source.get("random_weights"):
            logger.warning(
                "%s: this model was trained from random weights (no --checkpoint), so it is only fit for trying "
                "the tools: unrelated sentences may score near 1",
                path,
            )
        return cls(model, tokenizer, spec, os.path.abspath(path))

    @property
    def threshold(self) -> float:
        return None if self.spec is None else self.spec.threshold

    def predict(self, texts_a, texts_b, threshold: float = None, **kwargs) -> np.ndarray:
        """1 where a pair's score is above the threshold (the tuned one by default), else 0."""
        threshold = self.threshold if threshold is None else threshold
        if threshold is None:
            raise ConfigError(
                f"{self.path or 'this model'}: no tuned threshold (its training task had no "
                "binary labels); pass threshold="
            )
        return (self.similarity(texts_a, texts_b, **kwargs) > threshold).astype(np.int32)


class SentenceEncoder(_Matcher):
    """Sentence vectors from a feature model; cosine similarity and search over them."""

    KIND = "feature"

    def encode(self, texts, batch_size: int = 64, normalize: bool = True, show_progress: bool = None) -> np.ndarray:
        """Vectors of ``texts`` (float32, shape (len(texts), dim)), L2-normalised by default."""
        texts = check_texts(texts)
        vectors = batched_outputs(
            self.model, self.tokenizer.encode_all(texts), batch_size, _show(show_progress, len(texts))
        )
        return l2_normalize(vectors) if normalize else vectors

    def similarity(self, texts_a, texts_b, batch_size: int = 64, show_progress: bool = None) -> np.ndarray:
        """Cosine of each aligned pair (texts_a[i], texts_b[i])."""
        texts_a, texts_b = check_pairs(texts_a, texts_b)
        vectors = self.encode(texts_a + texts_b, batch_size, True, show_progress)
        return np.sum(vectors[: len(texts_a)] * vectors[len(texts_a) :], axis=1)

    def build_index(self, corpus, batch_size: int = 64, show_progress: bool = None) -> "VectorIndex":
        corpus = check_texts(corpus, "corpus")
        return VectorIndex(self.encode(corpus, batch_size, True, show_progress), corpus, model_dir=self.path)

    def search(
        self, queries, corpus_or_index, top_k: int = 10, batch_size: int = 64, show_progress: bool = None
    ) -> list:
        """The ``top_k`` most similar corpus texts of each query, by exact cosine.

        ``corpus_or_index`` is a list of texts (encoded now) or a :class:`VectorIndex`.
        Returns one list of :class:`Hit` (index, score, text) per query, best first;
        ties go to the lower corpus index.
        """
        index = (
            corpus_or_index
            if isinstance(corpus_or_index, VectorIndex)
            else self.build_index(corpus_or_index, batch_size, show_progress)
        )
        queries = self.encode(queries, batch_size, True, show_progress)
        scores, indices = index.search(queries, top_k)
        return [
            [Hit(int(i), float(s), index.texts[i]) for s, i in zip(row_scores, row_indices)]
            for row_scores, row_indices in zip(scores, indices)
        ]


class PairScorer(_Matcher):
    """Scores of sentence pairs from an interaction (cross-encoder) model.

    The score is the head's output: an unbounded value for a CoSENT-trained model, and
    P(similar) for a cross-entropy one. Higher means more similar in both cases.
    """

    KIND = "interaction"

    def similarity(self, texts_a, texts_b, batch_size: int = 64, show_progress: bool = None) -> np.ndarray:
        texts_a, texts_b = check_pairs(texts_a, texts_b)
        return interaction_scores(
            self.model,
            self.tokenizer.encode_pairs(texts_a, texts_b),
            batch_size,
            _show(show_progress, len(texts_a)),
            self.tokenizer.sep_id if self.spec is not None and self.spec.pair_segments else None,
        )

    score = similarity


MATCHERS = {SentenceEncoder.KIND: SentenceEncoder, PairScorer.KIND: PairScorer}


def load_matcher(path: str, precision: str = "float32"):
    """The :class:`SentenceEncoder` or :class:`PairScorer` of a model folder, as its kind says."""
    return MATCHERS[read_spec(path).kind].load(path, precision)


class VectorIndex:
    """Unit-length vectors with their texts, searched by exact cosine in bounded memory.

    Saved as a folder: ``vectors.npy`` (float32), ``texts.jsonl`` (one JSON string per
    line) and ``index.json`` (count, dimension, and the model folder that made it: ``model_dir``,
    absolute, and ``model_dir_from_index``, relative to the index folder, so that an index moved
    together with its model still finds it). Loading memory-maps the vectors, so a million of
    them need not fit in memory at once.
    """

    VECTORS, TEXTS, INFO = "vectors.npy", "texts.jsonl", "index.json"
    FOLDER = FolderKind("a cosent-tf index", INFO, (VECTORS, TEXTS, INFO))
    # Rows checked for NaN at a time when loading: bounded memory for memory-mapped vectors.
    CHECK_ROWS = 65536
    directory = None  # the folder it was loaded from, for messages

    def __init__(self, vectors: np.ndarray, texts, model_dir: str = None):
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"vectors of shape {vectors.shape} do not match {len(texts)} texts")
        self.vectors, self.texts, self.model_dir = vectors, list(texts), model_dir

    def __len__(self):
        return len(self.texts)

    def search(self, query_vectors, top_k: int = 10) -> tuple:
        """(scores, indices), each (queries, min(top_k, len(self))), best first."""
        query_vectors = np.asarray(query_vectors, dtype=np.float32)
        if query_vectors.ndim != 2 or query_vectors.shape[1] != self.vectors.shape[1]:
            raise ValueError(
                f"query vectors of shape {query_vectors.shape} do not fit this index's "
                f"dimension {self.vectors.shape[1]}; encode them with the index's model ({self.model_dir})"
            )
        return top_k_cosine(query_vectors, self.vectors, top_k)

    def model_path(self, model_dir: str = None) -> str:
        """The model folder to encode queries with: the one that built the index, or ``model_dir``.

        ``model_dir``, when given, must be that model where it is still there (another model's
        vectors cannot be compared with the index's); where it is not (moved or removed),
        ``model_dir`` is taken on the caller's word. Without ``model_dir``, a ConfigError says
        when the index does not record its model or the recorded one is not there.
        """
        where = self.directory or "this index"
        recorded = self.model_dir
        if model_dir is not None:
            if recorded and os.path.isdir(recorded) and os.path.realpath(model_dir) != os.path.realpath(recorded):
                raise ConfigError(
                    f"{where}: the index was built with the model {recorded}, not {model_dir}; its vectors "
                    "cannot be compared with another model's: query it without --model-dir, or build an "
                    "index with this model"
                )
            return model_dir
        if not recorded:
            raise ConfigError(f"{where}: the index does not record its model; pass --model-dir MODEL_DIR")
        if not os.path.isdir(recorded):
            raise ConfigError(
                f"{where}: the index's model {recorded} is not there (moved or removed); pass --model-dir "
                "with the model folder that built the index"
            )
        return recorded

    def save(self, directory: str, overwrite: bool = False, inputs=()) -> None:
        """Write the index folder; an existing one must be empty, or an index and ``overwrite`` true."""
        model_dir = from_index = None
        if self.model_dir is not None:
            model_dir = os.path.abspath(self.model_dir)
            with contextlib.suppress(ValueError):  # on another drive (Windows) there is no relative path
                from_index = os.path.relpath(model_dir, os.path.abspath(directory))
        with atomic_directory(directory, self.FOLDER, overwrite, inputs) as tmp:
            np.save(os.path.join(tmp, self.VECTORS), np.asarray(self.vectors, dtype=np.float32))
            with open(os.path.join(tmp, self.TEXTS), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(text, ensure_ascii=False) + "\n" for text in self.texts)
            with open(os.path.join(tmp, self.INFO), "w", encoding="utf-8") as f:
                json.dump(
                    {
                        "format": "cosent-tf-index",
                        "count": len(self),
                        "dimension": int(self.vectors.shape[1]),
                        "model_dir": model_dir,
                        "model_dir_from_index": from_index,
                    },
                    f,
                    indent=2,
                )

    @classmethod
    def load(cls, directory: str, mmap: bool = True) -> "VectorIndex":
        """The index saved in ``directory``. Each file is checked, and a fault named with its file (and
        line): the description's field types, each text a JSON string, the vectors a finite float32
        matrix of the recorded count and dimension, as many texts as vectors."""
        directory = os.fspath(directory)
        paths = {name: os.path.join(directory, name) for name in (cls.VECTORS, cls.TEXTS, cls.INFO)}
        missing = [name for name, path in paths.items() if not os.path.exists(path)]
        if missing:
            raise ConfigError(f"{directory}: not a complete cosent-tf index (missing {', '.join(missing)})")
        info_path = paths[cls.INFO]
        info = read_json(info_path, "the index description")
        count = json_field(info, "count", int, info_path)
        dimension = json_field(info, "dimension", int, info_path)
        recorded = json_field(info, "model_dir", (str, type(None)), info_path)
        if "model_dir" not in info:  # indexes written before 0.2 call the model folder "model"
            recorded = json_field(info, "model", (str, type(None)), info_path)
        from_index = json_field(info, "model_dir_from_index", (str, type(None)), info_path)
        vectors = cls._load_vectors(paths[cls.VECTORS], mmap, dimension)
        texts = cls._load_texts(paths[cls.TEXTS])
        if len(texts) != len(vectors) or count != len(vectors):
            raise ConfigError(
                f"{directory}: {len(vectors)} vectors, {len(texts)} texts and a count of "
                f"{count} do not agree; rebuild the index"
            )
        index = cls(vectors, texts, model_dir=_recorded_model(directory, recorded, from_index))
        index.directory = directory
        return index

    @classmethod
    def _load_vectors(cls, path, mmap, dimension):
        try:
            vectors = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise DataError(path, f"not a readable .npy matrix ({e}); rebuild the index") from None
        if vectors.ndim != 2 or vectors.dtype != np.float32:
            raise DataError(
                path, f"holds a {vectors.dtype} array of shape {vectors.shape}, not a float32 matrix; rebuild the index"
            )
        if dimension is not None and vectors.shape[1] != dimension:
            raise DataError(
                path,
                f"holds vectors of dimension {vectors.shape[1]}, but the index records {dimension}; rebuild the index",
            )
        for start in range(0, len(vectors), cls.CHECK_ROWS):
            finite = np.isfinite(vectors[start : start + cls.CHECK_ROWS]).all(axis=1)
            if not finite.all():
                row = start + int(np.argmin(finite))
                raise DataError(
                    path,
                    f"vector {row} (of texts.jsonl line {row + 1}) holds NaN or infinite values; rebuild the index",
                )
        return vectors

    @staticmethod
    def _load_texts(path):
        texts = []
        # A text came from a line of at most MAX_LINE_BYTES; as JSON its escapes may make it longer.
        limit = 8 * MAX_LINE_BYTES
        with open(path, "rb") as f:  # bytes: a text holding U+2028 or a stray CR stays one line
            for number, line in enumerate(iter(lambda: f.readline(limit + 1), b""), start=1):
                if len(line) > limit:
                    raise DataError(path, f"longer than {limit >> 20} MB; rebuild the index", line=number)
                try:
                    text = json.loads(line.decode("utf-8"))
                except UnicodeDecodeError as e:
                    raise DataError(path, f"not valid UTF-8 ({e.reason}); rebuild the index", line=number) from None
                except (ValueError, RecursionError) as e:
                    reason = e.msg if isinstance(e, json.JSONDecodeError) else "not usable JSON"
                    raise DataError(path, f"not a JSON string ({reason}); rebuild the index", line=number) from None
                if not isinstance(text, str):
                    raise DataError(
                        path,
                        f"holds a JSON {json_type(type(text))}, not a string: each line is one text as a JSON "
                        "string; rebuild the index",
                        line=number,
                    )
                texts.append(text)
        return texts


def _recorded_model(directory, recorded, from_index):
    """The model folder an index records: beside the index as it was saved (the two moved together),
    else where it was (an absolute path; a relative one, from indexes that recorded a path as given,
    is from the working folder)."""
    candidates = []
    if from_index is not None:
        candidates.append(os.path.normpath(os.path.join(os.path.abspath(directory), from_index)))
    if recorded is not None:
        candidates.append(os.path.abspath(recorded))
    for candidate in candidates:
        if os.path.isdir(candidate):
            return candidate
    return candidates[-1] if candidates else None


def top_k_cosine(queries, corpus, top_k: int, query_chunk: int = 256, corpus_chunk: int = 16384) -> tuple:
    """Exact top-k by dot product of unit vectors: ``(scores, indices)``, best first.

    Works through ``query_chunk`` x ``corpus_chunk`` blocks, so memory stays bounded by
    the block size whatever the corpus size (``corpus`` may be a memory map). Ties are
    broken by the lower corpus index, as a stable sort of all scores would.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if not np.isfinite(queries).all():
        row = int(np.argmin(np.isfinite(queries).all(axis=1)))
        raise ValueError(f"query vector {row} holds NaN or infinite values: the model that encoded it is broken")
    count = len(corpus)
    k = min(int(top_k), count)
    all_scores = np.zeros((len(queries), k), dtype=np.float32)
    all_indices = np.zeros((len(queries), k), dtype=np.int64)
    for q in range(0, len(queries), query_chunk):
        block = queries[q : q + query_chunk]
        best_scores = np.zeros((len(block), 0), dtype=np.float32)
        best_indices = np.zeros((len(block), 0), dtype=np.int64)
        for c in range(0, count, corpus_chunk):
            scores = block @ np.asarray(corpus[c : c + corpus_chunk], dtype=np.float32).T
            finite = np.isfinite(scores).all(axis=0)
            if not finite.all():  # a NaN would never rank, and the best lists would come out short
                raise ValueError(
                    f"corpus vector {c + int(np.argmin(finite))} gives NaN or infinite scores: it holds NaN or "
                    "infinite values (or is far from unit length); rebuild the vectors"
                )
            indices = np.broadcast_to(np.arange(c, c + scores.shape[1]), scores.shape)
            scores, indices = _best(scores, indices, min(k, scores.shape[1]))
            best_scores, best_indices = _best(
                np.concatenate([best_scores, scores], axis=1), np.concatenate([best_indices, indices], axis=1), k
            )
        all_scores[q : q + query_chunk], all_indices[q : q + query_chunk] = best_scores, best_indices
    return all_scores, all_indices


def _best(scores, indices, k):
    """The k best columns of each row by (score descending, index ascending)."""
    if scores.shape[1] <= k:
        k = scores.shape[1]
    kth = np.partition(scores, scores.shape[1] - k, axis=1)[:, scores.shape[1] - k]
    rows, columns = np.nonzero(scores >= kth[:, None])  # at least k per row, more on ties
    values, positions = scores[rows, columns], indices[rows, columns]
    order = np.lexsort((positions, -values, rows))
    rows, values, positions = rows[order], values[order], positions[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows)
    keep = rank < k
    return values[keep].reshape(-1, k), positions[keep].reshape(-1, k)
