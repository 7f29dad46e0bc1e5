"""Exact cosine search over sentence vectors, and the index folder that keeps them with their texts.

An index is written by ``SentenceEncoder.build_index(...).save(folder)`` and read back memory
mapped, so that a corpus larger than memory can still be searched; search works through blocks
of queries and corpus vectors, so its memory is bounded by the block size.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from ..data.pairs import MAX_LINE_BYTES
from ..errors import ConfigError, DataError
from ..io import FolderKind, atomic_directory, json_field, json_type, read_json


class Hit(NamedTuple):
    """One search result: a corpus text and its cosine with the query.

    Attributes:
        index: the text's position in the corpus (or the index's texts).
        score: cosine of the query's and the text's vectors.
        text: the corpus text itself.

    Example:
        >>> hit = encoder.search(["花呗怎么还款"], ["花呗如何还钱", "借呗额度"], top_k=1)[0][0]
        >>> hit.index, hit.text
        (0, '花呗如何还钱')
    """

    index: int  # type: ignore[assignment]  # the field's name since 0.1 hides tuple.index
    score: float
    text: str


# First-stage hits re-scored per query when the caller does not say how many: enough that a
# relevant text the encoder ranked a little low can still rise to the top, few enough that the
# interaction model's cost (one call per pair) stays small.
RERANK_TOP = 20


def rerank_depth(top_k: int, rerank_top: int | None = None) -> int:
    """How many cosine hits per query a reranked search re-scores: ``rerank_top``
    (:data:`RERANK_TOP` when None), and never fewer than the ``top_k`` it returns.

    Example:
        >>> rerank_depth(5), rerank_depth(50), rerank_depth(5, 10)
        (20, 50, 10)
    """
    return max(top_k, RERANK_TOP if rerank_top is None else rerank_top)


class RerankedHit(NamedTuple):
    """One hit after reranking: the interaction model's score, and where the first stage had it.

    Attributes:
        index: the text's position in the corpus (or the index's texts).
        score: the interaction model's score of the (query, text) pair; higher is more similar.
        text: the corpus text itself.
        cosine: the first stage's score (the cosine of the query's and the text's vectors).
        cosine_rank: the text's 1-based rank in the first stage's order.

    Example:
        >>> hit = encoder.search(["花呗怎么还款"], corpus, top_k=1, rerank=scorer)[0][0]
        >>> hit.score, hit.cosine_rank  # the interaction score; 3 if cosine had it third
    """

    index: int  # type: ignore[assignment]  # as Hit's: the field's name hides tuple.index
    score: float
    text: str
    cosine: float
    cosine_rank: int


class VectorIndex:
    """Unit-length vectors with their texts, searched by exact cosine in bounded memory.

    Saved as a folder: ``vectors.npy`` (float32), ``texts.jsonl`` (one JSON string per
    line) and ``index.json`` (count, dimension, and the model folder that made it: ``model_dir``,
    absolute, and ``model_dir_from_index``, relative to the index folder, so that an index moved
    together with its model still finds it). Loading memory-maps the vectors, so a million of
    them need not fit in memory at once.

    Args:
        vectors: float32 matrix, one unit-length row per text.
        texts: the texts, in the rows' order.
        model_dir: the model folder that encoded them, recorded so that queries are encoded
            with the same model.

    Raises:
        ValueError: ``vectors`` is not a matrix with one row per text.

    Example:
        >>> encoder = SentenceEncoder.load("runs/bq-cosent/model")
        >>> index = encoder.build_index(["花呗如何还钱", "借呗额度"])
        >>> index.save("bq-index")
        >>> hits = encoder.search(["花呗怎么还款"], VectorIndex.load("bq-index"), top_k=1)
    """

    VECTORS, TEXTS, INFO = "vectors.npy", "texts.jsonl", "index.json"
    FOLDER = FolderKind("a cosent-tf index", INFO, (VECTORS, TEXTS, INFO))
    # Rows checked for NaN at a time when loading: bounded memory for memory-mapped vectors.
    CHECK_ROWS = 65536
    directory: str | None = None  # the folder it was loaded from, for messages

    def __init__(self, vectors: np.ndarray, texts: Sequence[str], model_dir: str | None = None) -> None:
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"vectors of shape {vectors.shape} do not match {len(texts)} texts")
        self.vectors, self.texts, self.model_dir = vectors, list(texts), model_dir

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def dimension(self) -> int:
        """The vectors' width (a model's full width, or the ``dim`` they were cut to)."""
        return int(self.vectors.shape[1])

    def search(
        self, query_vectors: np.ndarray, top_k: int = 10, rescore_multiplier: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, indices), each (queries, min(top_k, len(self))), best first.

        Raises ValueError when the query vectors' dimension is not the index's."""
        query_vectors = np.asarray(query_vectors, dtype=np.float32)
        if query_vectors.ndim != 2 or query_vectors.shape[1] != self.vectors.shape[1]:
            raise ValueError(
                f"query vectors of shape {query_vectors.shape} do not fit this index's "
                f"dimension {self.vectors.shape[1]}; encode them with the index's model ({self.model_dir})"
            )
        return top_k_cosine(query_vectors, self.vectors, top_k)

    def model_path(self, model_dir: str | None = None) -> str:
        """The model folder to encode queries with: the one that built the index, or ``model_dir``.

        ``model_dir``, when given, must be that model where it is still there (another model's
        vectors cannot be compared with the index's); where it is not (moved or removed),
        ``model_dir`` is taken on the caller's word. Without ``model_dir``, a ConfigError says
        when the index does not record its model or the recorded one is not there.
        """
        where = self.directory or "this index"
        recorded = self.model_dir
        if model_dir is not None:
            self.check_model(model_dir, "query it without --model-dir, or build an index with this model")
            return model_dir
        if not recorded:
            raise ConfigError(f"{where}: the index does not record its model; pass --model-dir MODEL_DIR")
        if not os.path.isdir(recorded):
            raise ConfigError(
                f"{where}: the index's model {recorded} is not there (moved or removed); pass --model-dir "
                "with the model folder that built the index"
            )
        return recorded

    def check_model(self, model_dir: str | None, remedy: str) -> None:
        """Refuse ``model_dir`` when the index records another model that is still there: another
        model's vectors cannot be compared with the index's. An unknown model on either side (None,
        or a recorded folder moved or removed) is taken on the caller's word.

        Args:
            model_dir: the model the caller would compare with the index's vectors.
            remedy: what to do instead, the end of the message.

        Raises:
            ConfigError: naming the index, its model, ``model_dir`` and the remedy.
        """
        recorded = self.model_dir
        if model_dir is None or not recorded or not os.path.isdir(recorded):
            return
        if os.path.realpath(model_dir) != os.path.realpath(recorded):
            raise ConfigError(
                f"{self.directory or 'this index'}: the index was built with the model {recorded}, not {model_dir}; "
                f"its vectors cannot be compared with another model's: {remedy}"
            )

    def save(self, directory: str, overwrite: bool = False, inputs: Iterable[str] = ()) -> None:
        """Write the index folder; an existing one must be empty, or an index and ``overwrite`` true."""
        model_dir: str | None = None
        from_index: str | None = None
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
    def load(cls, directory: str | os.PathLike[str], mmap: bool = True) -> VectorIndex:
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
    def _load_vectors(cls, path: str, mmap: bool, dimension: int | None) -> np.ndarray:
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
    def _load_texts(path: str) -> list[str]:
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


def _recorded_model(directory: str, recorded: str | None, from_index: str | None) -> str | None:
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


def top_k_cosine(
    queries: np.ndarray, corpus: np.ndarray, top_k: int, query_chunk: int = 256, corpus_chunk: int = 16384
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by dot product of unit vectors: ``(scores, indices)``, best first.

    Works through ``query_chunk`` x ``corpus_chunk`` blocks, so memory stays bounded by
    the block size whatever the corpus size (``corpus`` may be a memory map). Ties are
    broken by the lower corpus index, as a stable sort of all scores would.

    Args:
        queries: float32 (queries, dim), unit rows.
        corpus: float32 (corpus, dim), unit rows; a memory map is read a block at a time.
        top_k: results per query (fewer when the corpus is smaller).
        query_chunk: queries per block.
        corpus_chunk: corpus vectors per block.

    Returns:
        ``(scores, indices)``, each (queries, min(top_k, len(corpus))), best first.

    Raises:
        ValueError: ``top_k`` below 1, or a query or corpus vector that is not finite.

    Example:
        >>> scores, indices = top_k_cosine(encoder.encode(["花呗怎么还款"]), index.vectors, top_k=5)
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


def _best(scores: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
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
