"""Cosine search over sentence vectors, and the index folder that keeps them with their texts.

An index is written by ``SentenceEncoder.build_index(...).save(folder)`` and read back memory
mapped, so that a corpus larger than memory can still be searched. Exact search works through
blocks of queries and corpus vectors, so its memory is bounded by the block size. An index may
also keep its vectors as int8 or binary codes (:mod:`cosent_tf.inference.vectors`) and search
them first, exactly or through an approximate faiss structure (:mod:`cosent_tf.inference.ann`),
re-scoring the candidates with the float32 vectors.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, NamedTuple

import numpy as np

from ..calibration import weights_fingerprint
from ..choices import INDEX_KINDS, RESCORE_MULTIPLIER, VECTOR_PRECISIONS
from ..data.pairs import MAX_LINE_BYTES
from ..errors import ConfigError, DataError
from ..io import FolderKind, atomic_directory, json_field, json_type, read_json, read_whole_folder
from . import ann as approximate
from .vectors import approximate_scores, check_precision, int8_ranges, packed_bytes, quantize, truncate

logger = logging.getLogger("cosent_tf")


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


# Corpora up to this many vectors get an exact index when no kind is asked for, larger ones an
# approximate (hnsw) one: where one query's exact search of BERT-base-wide vectors stays within
# about 50 ms on a 2-core CPU (benchmarks/ANN.md, "Exact against hnsw by corpus size").
EXACT_INDEX_LIMIT = 80_000


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
    """Unit-length vectors with their texts, searched by cosine: exactly, or through int8 or binary
    codes and an approximate structure whose candidates are re-scored with the float32 vectors.

    Made by :meth:`build` (or, float32 and exact, the constructor) and saved as a folder:
    ``vectors.npy`` (float32, always: exact search and re-scoring), ``codes.npy`` (int8 or uint8
    rows, for int8 or binary precision), ``ranges.npy`` (the int8 calibration, (2, dimension)),
    ``ann.faiss`` (an ``hnsw`` or ``ivf`` index, :mod:`cosent_tf.inference.ann`), ``texts.jsonl``
    (one JSON string per line) and ``index.json`` (count, dimension, precision, kind, the
    approximate structure's settings, and the model: ``model_dir``, absolute, and
    ``model_dir_from_index``, relative to the index folder, so that an index moved together with
    its model still finds it; ``model_fingerprint``, its weights' digest, so that a model retrained
    at the same path is refused; ``model_width``, its full width). Loading memory-maps the
    vectors, the codes and the faiss file, so a million vectors need not fit in memory at once.

    Args:
        vectors: float32 matrix, one unit-length row per text.
        texts: the texts, in the rows' order.
        model_dir: the model folder that encoded them, recorded so that queries are encoded
            with the same model.
        precision, kind, codes, ranges, ann, ann_settings, model_fingerprint, model_width:
            keyword-only, the attributes below (:meth:`build` and :meth:`load` give them; left
            out, a float32 exact index).

    Attributes:
        precision: how the first stage reads the vectors (``float32``, ``int8``, ``binary``).
        kind: the search structure (``exact``, ``hnsw``, ``ivf``).
        codes: the int8 or packed binary rows (None for float32).
        ranges: the int8 calibration, float32 (2, dimension): each dimension's minimum and maximum
            (None for other precisions).
        ann: the faiss structure (None for exact).
        ann_settings: its settings (:func:`~cosent_tf.inference.ann.ann_settings`); ``ef_search`` or
            ``nprobe`` set here apply to the searches after.
        model_fingerprint: the weights digest of ``model_dir`` at build
            (:func:`~cosent_tf.calibration.weights_fingerprint`), or None.
        model_width: the model's full vector width where known (the index may hold fewer).

    Raises:
        ValueError: ``vectors`` is not a matrix with one row per text.

    Example:
        >>> encoder = SentenceEncoder.load("runs/bq-cosent/model")
        >>> index = encoder.build_index(["花呗如何还钱", "借呗额度"])
        >>> index.save("bq-index")
        >>> hits = encoder.search(["花呗怎么还款"], VectorIndex.load("bq-index"), top_k=1)
    """

    VECTORS, TEXTS, INFO = "vectors.npy", "texts.jsonl", "index.json"
    CODES, RANGES, ANN = "codes.npy", "ranges.npy", "ann.faiss"
    FOLDER = FolderKind("a cosent-tf index", INFO, (VECTORS, TEXTS, INFO, CODES, RANGES, ANN))
    # 1: float32 exact only (no format_version field); 2: precisions, kinds, the model's fingerprint.
    FORMAT_VERSION = 2
    # Rows checked for NaN at a time when loading: bounded memory for memory-mapped vectors.
    CHECK_ROWS = 65536
    # Candidates re-scored at a time: their float32 vectors are gathered in memory.
    RESCORE_ROWS = 16384
    directory: str | None = None  # the folder it was loaded from, for messages

    def __init__(
        self,
        vectors: np.ndarray,
        texts: Sequence[str],
        model_dir: str | None = None,
        *,
        precision: str = "float32",
        kind: str = "exact",
        codes: np.ndarray | None = None,
        ranges: np.ndarray | None = None,
        ann: Any = None,
        ann_settings: Mapping[str, int] | None = None,
        model_fingerprint: str | None = None,
        model_width: int | None = None,
    ) -> None:
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"vectors of shape {vectors.shape} do not match {len(texts)} texts")
        check_precision(precision)
        check_kind(kind)
        if (codes is None) != (precision == "float32") or (ranges is None) != (precision != "int8"):
            raise ValueError(f"{precision} vectors need codes{' and ranges' if precision == 'int8' else ''}, no others")
        if (ann is None) != (kind == "exact"):
            raise ValueError(f"an {kind} index {'has no' if kind == 'exact' else 'needs its'} faiss structure")
        self.vectors, self.texts, self.model_dir = vectors, list(texts), model_dir
        self.precision, self.kind, self.codes, self.ranges, self.ann = precision, kind, codes, ranges, ann
        self.ann_settings = dict(ann_settings or {})
        self.model_fingerprint, self.model_width = model_fingerprint, model_width

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        texts: Sequence[str],
        model_dir: str | None = None,
        precision: str = "float32",
        kind: str | None = None,
        show_progress: bool | None = None,
        model_width: int | None = None,
        **ann_settings: Any,
    ) -> VectorIndex:
        """An index of ``vectors`` in ``precision`` and ``kind``.

        Args:
            vectors: float32 unit rows, one per text; a memory map is read a block at a time (the
                codes and the faiss structure are made in memory; the float32 vectors stay where
                they are).
            texts: the texts, in the rows' order.
            model_dir: the model folder that encoded them; its weights' fingerprint is recorded
                when the folder is there.
            precision: ``float32``, ``int8`` (each dimension calibrated on ``vectors`` themselves:
                :func:`~cosent_tf.inference.vectors.int8_ranges`) or ``binary``
                (:data:`~cosent_tf.choices.VECTOR_PRECISIONS`).
            kind: ``exact``, ``hnsw`` or ``ivf``; None: ``exact`` up to :data:`EXACT_INDEX_LIMIT`
                vectors, ``hnsw`` above (``exact`` when faiss is not installed), logged.
            show_progress: the approximate structure's progress bar (on a terminal); None: shown.
            model_width: the model's full width, recorded for messages about ``--dim``.
            **ann_settings: ``m``, ``ef_construction``, ``ef_search`` (hnsw) or ``nlist``, ``nprobe``
                (ivf) (:func:`~cosent_tf.inference.ann.ann_settings`; defaults where left out).

        Returns:
            The index, not yet saved.

        Raises:
            ConfigError: an unknown precision or kind, a setting of another kind, an approximate or
                quantised index of no vectors, an approximate one without faiss installed.
            ValueError: vectors that are not one row per text, or that hold NaN.

        Example:
            >>> index = VectorIndex.build(vectors, texts, "runs/bq/model", precision="binary", kind="hnsw")
            >>> scores, rows = index.search(queries, top_k=10, rescore_multiplier=4)
        """
        check_precision(precision)
        texts = list(texts)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"vectors of shape {vectors.shape} do not match {len(texts)} texts")
        if vectors.dtype != np.float32:
            vectors = np.asarray(vectors, dtype=np.float32)
        count = len(vectors)
        kind = _choose_kind(count, kind, ann_settings)
        if count == 0 and (precision != "float32" or kind != "exact"):
            raise ConfigError(f"an index of {precision} vectors ({kind}) needs at least one vector; there are none")
        settings: dict[str, int] = {}
        if kind != "exact":
            approximate.require_faiss()  # before the codes are made
            settings = approximate.ann_settings(kind, count, ann_settings)
        ranges = int8_ranges(vectors) if precision == "int8" else None
        codes = quantize(vectors, precision, ranges) if precision != "float32" else None
        structure = None
        if kind != "exact":
            structure = approximate.build_ann(vectors, precision, kind, settings, ranges, show_progress is not False)
        fingerprint = weights_fingerprint(model_dir) if model_dir is not None and os.path.isdir(model_dir) else None
        return cls(
            vectors,
            texts,
            model_dir,
            precision=precision,
            kind=kind,
            codes=codes,
            ranges=ranges,
            ann=structure,
            ann_settings=settings,
            model_fingerprint=fingerprint,
            model_width=model_width,
        )

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def dimension(self) -> int:
        """The vectors' width (a model's full width, or the ``dim`` they were cut to)."""
        return int(self.vectors.shape[1])

    def search(
        self,
        query_vectors: np.ndarray,
        top_k: int = 10,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``top_k`` rows nearest each query by cosine, best first, ties to the lower row.

        A float32 exact index compares every vector (:func:`top_k_cosine`). Any other takes
        ``rescore_multiplier * top_k`` candidates by its first stage (every code scored
        by :func:`~cosent_tf.inference.vectors.approximate_scores` in blocks, or the faiss
        structure), and re-scores each candidate with its float32 vector (read for those rows only):
        where the true top-k are among the candidates, the result is exact search's.

        Args:
            query_vectors: float32 (queries, dimension), unit rows, from the index's model.
            top_k: results per query (fewer when the index holds fewer).
            rescore_multiplier: candidates per result; None:
                :data:`~cosent_tf.choices.RESCORE_MULTIPLIER`; 1 re-scores only ``top_k``.
            ef_search: an hnsw index's candidate list for this search (default: its
                ``ann_settings``).
            nprobe: the IVF lists an ivf index searches this time (default: its ``ann_settings``).

        Returns:
            ``(scores, indices)``, each (queries, min(top_k, len(self))): exact cosines, and rows.

        Raises:
            ConfigError: query vectors of another width than the index's; a ``rescore_multiplier``,
                ``ef_search`` or ``nprobe`` that is not a positive integer, or a setting of another
                kind of index (all ValueErrors).
            ValueError: ``top_k`` below 1; a query that holds NaN.

        Example:
            >>> scores, rows = index.search(encoder.encode(["花呗怎么还款"], dim=index.dimension), top_k=5)
        """
        queries = self._check_queries(query_vectors)
        multiplier = self._check_multiplier(rescore_multiplier)
        settings = self._search_settings(ef_search, nprobe)
        if self.precision == "float32" and self.kind == "exact":
            return top_k_cosine(queries, self.vectors, top_k)
        _check_search(queries, top_k)
        k = min(int(top_k), len(self))
        if k == 0:
            return np.zeros((len(queries), 0), dtype=np.float32), np.zeros((len(queries), 0), dtype=np.int64)
        depth = min(len(self), multiplier * k)
        if self.kind == "exact":
            candidates = self._exact_candidates(queries, depth)
        else:
            candidates = approximate.search_ann(self.ann, queries, self.precision, self.kind, depth, settings)
            short = (candidates >= 0).sum(axis=1) < k
            if short.any():  # an IVF search whose lists held fewer: complete those queries exactly
                candidates[short] = self._exact_candidates(queries[short], depth)
        return self._rescore(queries, candidates, k)

    def _check_queries(self, query_vectors: np.ndarray) -> np.ndarray:
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dimension:
            cut = ""
            if self.model_width is not None and self.dimension != self.model_width:
                cut = (
                    f" cut to the index's width (--dim {self.dimension}; the model's full width is {self.model_width})"
                )
            raise ConfigError(
                f"{self.directory or 'this index'}: query vectors of shape {queries.shape} do not fit this index's "
                f"dimension {self.dimension}; encode them with the index's model ({self.model_dir}){cut}"
            )
        return queries

    def _check_multiplier(self, rescore_multiplier: int | None) -> int:
        if rescore_multiplier is None:
            return RESCORE_MULTIPLIER
        if (
            isinstance(rescore_multiplier, bool)
            or not isinstance(rescore_multiplier, (int, np.integer))
            or rescore_multiplier < 1
        ):
            raise ConfigError(
                f"{self.directory or 'this index'}: --rescore-multiplier {rescore_multiplier!r}: candidates per "
                "result are a positive integer (1: re-score only top_k; more finds more of the exact top-k)"
            )
        return int(rescore_multiplier)

    def _search_settings(self, ef_search: int | None, nprobe: int | None) -> dict[str, int]:
        settings = dict(self.ann_settings)
        for name, value in (("ef_search", ef_search), ("nprobe", nprobe)):
            if value is None:
                continue
            if self.kind == "exact" or approximate.SEARCH_SETTINGS[self.kind] != name:
                owner = next(kind for kind, setting in approximate.SEARCH_SETTINGS.items() if setting == name)
                raise ConfigError(
                    f"{self.directory or 'this index'}: {name} is a setting of {owner} indexes; this index is "
                    f"{self.kind}"
                )
            settings[name] = approximate.check_setting(name, value)
        return settings

    def _exact_candidates(self, queries: np.ndarray, depth: int) -> np.ndarray:
        """The ``depth`` best rows of each query by the first stage's score over every code."""
        if self.codes is None:
            return top_k_cosine(queries, self.vectors, depth)[1]
        return top_k_codes(queries, self.codes, self.precision, depth, self.ranges)[1]

    def _rescore(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of each query's ``candidates`` (rows; -1: none) by exact cosine with the
        float32 vectors, read :data:`RESCORE_ROWS` candidates at a time."""
        depth = candidates.shape[1]
        best_scores = np.zeros((len(queries), k), dtype=np.float32)
        best_rows = np.zeros((len(queries), k), dtype=np.int64)
        step = max(1, self.RESCORE_ROWS // depth)
        for start in range(0, len(queries), step):
            rows = candidates[start : start + step]
            scores = np.full(rows.shape, -np.inf, dtype=np.float32)
            for column in range(0, depth, self.RESCORE_ROWS):
                part = rows[:, column : column + self.RESCORE_ROWS]
                valid = part >= 0
                wanted, where = np.unique(np.where(valid, part, 0).ravel(), return_inverse=True)
                vectors = np.asarray(self.vectors[wanted], dtype=np.float32)  # a memory map reads these rows only
                gathered = vectors[where.reshape(part.shape)]
                # Per-element sums (not BLAS): a query's scores do not depend on what it is batched with.
                cosines = np.einsum("qkd,qd->qk", gathered, queries[start : start + step])
                if not np.isfinite(cosines[valid]).all():
                    row = int(part[valid][np.argmin(np.isfinite(cosines[valid]))])
                    raise ValueError(
                        f"corpus vector {row} gives NaN or infinite scores: it holds NaN or infinite values; "
                        "rebuild the vectors"
                    )
                scores[:, column : column + self.RESCORE_ROWS] = np.where(valid, cosines, -np.inf)
            ranked = np.where(rows >= 0, rows, len(self))  # a missing candidate ranks last
            best_scores[start : start + step], best_rows[start : start + step] = _best(scores, ranked, k)
        return best_scores, best_rows

    def copy_vectors(self, into: np.ndarray, dim: int | None = None) -> np.ndarray:
        """Write this index's float32 vectors into ``into``, cut to their first ``dim`` dimensions and
        renormalised (:func:`~cosent_tf.inference.vectors.truncate`) when ``dim`` is given, and
        return it: another index built on them (``search build --from-index``) encodes nothing.
        :data:`CHECK_ROWS` rows at a time, so neither a memory-mapped index nor ``into``
        (:meth:`IndexFolder.new_vectors`) need fit in memory.

        Raises:
            ValueError: ``into`` is not float32 (this index's count, ``dim`` or its dimension), or
                ``dim`` is not from 1 to its dimension.
            DataError: a vector that is not finite, naming this index's vectors.npy.

        Example:
            >>> with VectorIndex.writing("bq-index-64") as folder:
            ...     vectors = earlier.copy_vectors(folder.new_vectors(len(earlier), 64), dim=64)
            ...     folder.save(VectorIndex.build(vectors, earlier.texts, earlier.model_path(), precision="int8"))
        """
        width = self.dimension if dim is None else dim
        if not 1 <= width <= self.dimension:
            raise ValueError(f"cannot cut vectors of {self.dimension} dimensions to {dim}")
        if into.dtype != np.float32 or into.shape != (len(self), width):
            raise ValueError(
                f"a {into.dtype} matrix of shape {into.shape} cannot take {len(self)} float32 vectors of {width} "
                "dimensions"
            )
        for start in range(0, len(self), self.CHECK_ROWS):
            block = truncate(self.vectors[start : start + self.CHECK_ROWS], dim)
            finite = np.isfinite(block).all(axis=1)
            if not finite.all():
                row = start + int(np.argmin(finite))
                raise DataError(
                    os.path.join(self.directory, self.VECTORS) if self.directory else "this index's vectors",
                    f"vector {row} (of texts.jsonl line {row + 1}) holds NaN or infinite values; rebuild the index",
                )
            into[start : start + len(block)] = block
        return into

    def model_path(self, model_dir: str | None = None) -> str:
        """The model folder to encode queries with: the one that built the index, or ``model_dir``.

        ``model_dir``, when given, must be that model where it is still there (another model's
        vectors cannot be compared with the index's), and have the recorded weights where the
        index records them; where the recorded folder is not there (moved or removed) and the index
        records no weights, ``model_dir`` is taken on the caller's word. Without ``model_dir``, a
        ConfigError says when the index does not record its model, the recorded one is not there,
        or its weights are no longer the ones that built the index (retrained).
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
        self._check_weights(recorded, "rebuild the index with the model as it is now (cosent-tf search build)")
        return recorded

    def check_model(self, model_dir: str | None, remedy: str) -> None:
        """Refuse ``model_dir`` when the index records another model that is still there, or
        records weights (:attr:`model_fingerprint`) that are not ``model_dir``'s (the same folder
        retrained, or another one): another model's vectors cannot be compared with the index's. An
        unknown model on either side (None, a recorded folder moved or removed and no fingerprint,
        a folder without weights files) is taken on the caller's word.

        Args:
            model_dir: the model the caller would compare with the index's vectors.
            remedy: what to do instead, the end of the message.

        Raises:
            ConfigError: naming the index, its model, ``model_dir`` and the remedy.
        """
        recorded = self.model_dir
        if model_dir is None:
            return
        if recorded and os.path.isdir(recorded) and os.path.realpath(model_dir) != os.path.realpath(recorded):
            raise ConfigError(
                f"{self.directory or 'this index'}: the index was built with the model {recorded}, not {model_dir}; "
                f"its vectors cannot be compared with another model's: {remedy}"
            )
        self._check_weights(model_dir, remedy)

    def _check_weights(self, model_dir: str, remedy: str) -> None:
        if not self.model_fingerprint or not os.path.isdir(model_dir):
            return
        current = weights_fingerprint(model_dir)
        if current is not None and current != self.model_fingerprint:
            raise ConfigError(
                f"{self.directory or 'this index'}: the model {model_dir} does not have the weights that built the "
                f"index (retrained or replaced since: its weights fingerprint is not the recorded one); its vectors "
                f"cannot be compared with the index's: {remedy}"
            )

    def save(self, directory: str, overwrite: bool = False, inputs: Iterable[str] = ()) -> None:
        """Write the index folder; an existing one must be empty, or an index and ``overwrite`` true.
        Nothing is half-written: the folder appears whole or not at all (a replaced one stays whole
        until then)."""
        with self.writing(directory, overwrite, inputs) as folder:
            folder.save(self)

    @classmethod
    @contextlib.contextmanager
    def writing(
        cls, directory: str | os.PathLike[str], overwrite: bool = False, inputs: Iterable[str] = ()
    ) -> Iterator[IndexFolder]:
        """Write the index folder ``directory`` from the block, whose float32 vectors may be made in
        it: an :class:`IndexFolder` whose :meth:`~IndexFolder.new_vectors` is ``vectors.npy`` of the
        folder being written, memory-mapped, for the block to fill and build the index on, so that
        the disk holds the vectors once. The block ends with :meth:`IndexFolder.save`; the folder
        then appears whole, and nothing is left of it when the block fails (or saves no index).
        ``directory``, ``overwrite`` and ``inputs`` are checked as :meth:`save` checks them.

        Raises:
            ConfigError: ``directory`` may not be written (:func:`~cosent_tf.io.check_output_folder`).
            ValueError: the block saved no index.

        Example:
            >>> with VectorIndex.writing("bq-index") as folder:
            ...     vectors = assemble_parts(checked, folder.new_vectors(len(texts), 128))
            ...     folder.save(VectorIndex.build(vectors, texts, "runs/bq/model", precision="int8"))
        """
        with atomic_directory(directory, cls.FOLDER, overwrite, inputs) as tmp:
            folder = IndexFolder(os.fspath(directory), tmp)
            yield folder
            if not folder.saved:
                raise ValueError(f"{directory}: no index was saved into the folder (IndexFolder.save); nothing written")

    def _write_files(self, folder: str, directory: str, own_vectors: np.memmap | None) -> None:
        """Write the index's files into ``folder``, which becomes ``directory``; ``own_vectors``:
        the memory map of ``folder``'s vectors.npy (:meth:`IndexFolder.new_vectors`), kept as it is
        when they are the index's vectors."""
        model_dir: str | None = None
        from_index: str | None = None
        if self.model_dir is not None:
            model_dir = os.path.abspath(self.model_dir)
            with contextlib.suppress(ValueError):  # on another drive (Windows) there is no relative path
                from_index = os.path.relpath(model_dir, os.path.abspath(directory))
        if own_vectors is not None and np.may_share_memory(self.vectors, own_vectors):
            if not _same_view(self.vectors, own_vectors):
                # Writing the file anew would truncate it under the map these vectors are read from.
                raise ValueError(
                    "the index's vectors are part of the folder's vectors.npy, not all of it: build the index on "
                    "the whole matrix of IndexFolder.new_vectors"
                )
            own_vectors.flush()
        else:
            np.save(os.path.join(folder, self.VECTORS), np.asarray(self.vectors, dtype=np.float32))
        if self.codes is not None:
            np.save(os.path.join(folder, self.CODES), self.codes)
        if self.ranges is not None:
            np.save(os.path.join(folder, self.RANGES), np.asarray(self.ranges, dtype=np.float32))
        ann_bytes = None
        if self.ann is not None:
            ann_bytes = approximate.write_ann(self.ann, self.precision, os.path.join(folder, self.ANN))
        with open(os.path.join(folder, self.TEXTS), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(text, ensure_ascii=False) + "\n" for text in self.texts)
        with open(os.path.join(folder, self.INFO), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "format": "cosent-tf-index",
                    "format_version": self.FORMAT_VERSION,
                    "count": len(self),
                    "dimension": self.dimension,
                    "precision": self.precision,
                    "kind": self.kind,
                    "ann_settings": self.ann_settings,
                    "ann_bytes": ann_bytes,
                    "model_dir": model_dir,
                    "model_dir_from_index": from_index,
                    "model_fingerprint": self.model_fingerprint,
                    "model_width": self.model_width,
                },
                f,
                indent=2,
            )

    @classmethod
    def load(cls, directory: str | os.PathLike[str], mmap: bool = True) -> VectorIndex:
        """The index saved in ``directory``. Each file is checked, and a fault named with its file (and
        line): the description's field types, each text a JSON string, the vectors a finite float32
        matrix of the recorded count and dimension, as many texts as vectors, the codes of the
        recorded precision (an index of another precision is refused), the int8 ranges (2,
        dimension), the faiss file's size, class, width and count. ``mmap``: memory-map the
        vectors, the codes and the faiss file (:mod:`cosent_tf.inference.ann`). An index written
        before precisions and kinds (no ``format_version``) is float32 and exact.

        Raises:
            ConfigError: a missing file, an unreadable or inconsistent ``index.json``, an index
                written by a newer cosent-tf, an approximate index without faiss installed.
            DataError: a file that is unreadable, cut short, or not what ``index.json`` records.

        A folder replaced by a rebuild while it is read is read again: the index is one build's
        (:func:`~cosent_tf.io.read_whole_folder`).
        """
        directory = os.fspath(directory)
        return read_whole_folder(directory, lambda folder: cls._read(folder, mmap), "index")

    @classmethod
    def _read(cls, directory: str, mmap: bool) -> VectorIndex:
        paths = {
            name: os.path.join(directory, name)
            for name in (cls.VECTORS, cls.TEXTS, cls.INFO, cls.CODES, cls.RANGES, cls.ANN)
        }
        cls._check_complete(directory, paths, (cls.VECTORS, cls.TEXTS, cls.INFO))
        info_path = paths[cls.INFO]
        info = read_json(info_path, "the index description")
        version = json_field(info, "format_version", int, info_path, default=1)
        if version > cls.FORMAT_VERSION:
            raise ConfigError(
                f"{info_path}: an index of format {version}, written by a newer cosent-tf (this one reads "
                f"{cls.FORMAT_VERSION} and older); upgrade cosent-tf or rebuild the index"
            )
        count = json_field(info, "count", int, info_path)
        dimension = json_field(info, "dimension", int, info_path)
        missing = [key for key, value in (("count", count), ("dimension", dimension)) if value is None]
        if missing:
            raise ConfigError(f"{info_path}: no {' or '.join(map(repr, missing))} recorded; rebuild the index")
        precision = json_field(info, "precision", str, info_path, default="float32")
        kind = json_field(info, "kind", str, info_path, default="exact")
        if precision not in VECTOR_PRECISIONS or kind not in INDEX_KINDS:
            raise ConfigError(
                f"{info_path}: precision {precision!r} and kind {kind!r}: not an index this cosent-tf reads "
                f"(precisions: {', '.join(VECTOR_PRECISIONS)}; kinds: {', '.join(INDEX_KINDS)}); rebuild the index"
            )
        recorded = json_field(info, "model_dir", (str, type(None)), info_path)
        if "model_dir" not in info:  # indexes written before 0.2 call the model folder "model"
            recorded = json_field(info, "model", (str, type(None)), info_path)
        from_index = json_field(info, "model_dir_from_index", (str, type(None)), info_path)
        fingerprint = json_field(info, "model_fingerprint", (str, type(None)), info_path)
        model_width = json_field(info, "model_width", (int, type(None)), info_path)
        settings = cls._recorded_settings(info, kind, info_path)
        ann_bytes = json_field(info, "ann_bytes", (int, type(None)), info_path)
        needed = [cls.CODES] if precision != "float32" else []
        needed += [cls.RANGES] if precision == "int8" else []
        needed += [cls.ANN] if kind != "exact" else []
        cls._check_complete(directory, paths, needed)
        # a float32 exact search reads every vector anyway; the others read the float32 vectors of their
        # candidates only (and refuse a non-finite score then), so scanning them all here would read
        # the whole file that memory-mapping keeps on disk
        scan = precision == "float32" and kind == "exact"
        vectors = cls._load_vectors(paths[cls.VECTORS], mmap, dimension, scan)
        texts = cls._load_texts(paths[cls.TEXTS])
        if len(texts) != len(vectors) or count != len(vectors):
            raise ConfigError(
                f"{directory}: {len(vectors)} vectors, {len(texts)} texts and a count of "
                f"{count} do not agree; rebuild the index"
            )
        codes = cls._load_codes(paths[cls.CODES], mmap, precision, count, dimension) if precision != "float32" else None
        ranges = cls._load_ranges(paths[cls.RANGES], dimension) if precision == "int8" else None
        structure = None
        if kind != "exact":
            structure = approximate.read_ann(paths[cls.ANN], precision, kind, count, dimension, ann_bytes, mmap)
        index = cls(
            vectors,
            texts,
            model_dir=_recorded_model(directory, recorded, from_index),
            precision=precision,
            kind=kind,
            codes=codes,
            ranges=ranges,
            ann=structure,
            ann_settings=settings,
            model_fingerprint=fingerprint,
            model_width=model_width,
        )
        index.directory = directory
        return index

    @staticmethod
    def _check_complete(directory: str, paths: Mapping[str, str], names: Iterable[str]) -> None:
        names = list(names)
        missing = [name for name in names if not os.path.exists(paths[name])]
        if missing:
            raise ConfigError(f"{directory}: not a complete cosent-tf index (missing {', '.join(missing)})")
        for name in names:
            # a pipe would hang the reader, a device or folder give a bare OSError
            if not os.path.isfile(paths[name]):
                raise DataError(
                    paths[name],
                    f"not a regular file ({_file_kind(paths[name])}): an index's files are files it wrote; "
                    "rebuild the index",
                )

    @staticmethod
    def _recorded_settings(info: dict, kind: str, path: str) -> dict[str, int]:
        settings = json_field(info, "ann_settings", dict, path, default={})
        expected = set(approximate.SETTINGS.get(kind, ()))
        if set(settings) != expected:
            raise ConfigError(
                f"{path}: ann_settings {sorted(settings)} are not the settings of an {kind} index "
                f"({', '.join(sorted(expected)) or 'none'}); rebuild the index"
            )
        for name in settings:
            json_field(settings, name, int, path, f"ann_settings.{name}")
            try:
                approximate.check_setting(name, settings[name])
            except ConfigError as error:
                raise ConfigError(f"{path}: ann_settings.{error}; rebuild the index") from None
        return settings

    @classmethod
    def _load_vectors(cls, path: str, mmap: bool, dimension: int | None, scan: bool = True) -> np.ndarray:
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
        for start in range(0, len(vectors) if scan else 0, cls.CHECK_ROWS):
            finite = np.isfinite(vectors[start : start + cls.CHECK_ROWS]).all(axis=1)
            if not finite.all():
                row = start + int(np.argmin(finite))
                raise DataError(
                    path,
                    f"vector {row} (of texts.jsonl line {row + 1}) holds NaN or infinite values; rebuild the index",
                )
        return vectors

    @classmethod
    def _load_codes(cls, path: str, mmap: bool, precision: str, count: int, dimension: int) -> np.ndarray:
        try:
            codes = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise DataError(path, f"not a readable .npy matrix ({e}); rebuild the index") from None
        dtype, width = (
            (np.dtype(np.int8), dimension) if precision == "int8" else (np.dtype(np.uint8), packed_bytes(dimension))
        )
        if codes.dtype != dtype or codes.shape != (count, width):
            other = {np.dtype(np.int8): " (int8 codes)", np.dtype(np.uint8): " (binary codes)"}.get(codes.dtype, "")
            raise DataError(
                path,
                f"holds a {codes.dtype} array of shape {codes.shape}{other}, but the index records {count} {precision} "
                f"vectors of dimension {dimension} ({dtype} codes of shape {(count, width)}): it is another index's, "
                "or of another precision; rebuild the index",
            )
        return codes

    @staticmethod
    def _load_ranges(path: str, dimension: int) -> np.ndarray:
        try:
            ranges = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise DataError(path, f"not a readable .npy matrix ({e}); rebuild the index") from None
        if ranges.dtype != np.float32 or ranges.shape != (2, dimension):
            raise DataError(
                path,
                f"holds a {ranges.dtype} array of shape {ranges.shape}, not the int8 calibration of {dimension} "
                f"dimensions (float32 of shape (2, {dimension}): each dimension's minimum, then maximum); "
                "rebuild the index",
            )
        if not np.isfinite(ranges).all():
            raise DataError(path, "holds NaN or infinite values; rebuild the index")
        if (ranges[0] > ranges[1]).any():
            dimension = int(np.argmax(ranges[0] > ranges[1]))
            raise DataError(path, f"dimension {dimension} has a minimum above its maximum; rebuild the index")
        return ranges

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


class IndexFolder:
    """An index folder being written (:meth:`VectorIndex.writing`): its float32 vectors may be made
    in it, and the index built on them is then saved into it without another copy.

    Attributes:
        directory: the folder it becomes once whole.
        path: the temporary folder it is written in.
        saved: whether an index was saved into it.
    """

    def __init__(self, directory: str, path: str) -> None:
        self.directory, self.path, self.saved = directory, path, False
        self._vectors: np.ndarray | None = None

    def new_vectors(self, count: int, dimension: int) -> np.ndarray:
        """The index's ``vectors.npy``, float32 (``count``, ``dimension``), created in the folder and
        memory-mapped for writing: fill it, build the index on it (:meth:`VectorIndex.build` keeps
        it as it is), and :meth:`save` the index; the vectors are then not written again.

        Raises:
            ValueError: called twice, or a negative count or a dimension below 1.
            OSError: no room for the file.
        """
        if self._vectors is not None:
            raise ValueError(f"{self.directory}: the index's vectors were made already")
        if count < 0 or dimension < 1:
            raise ValueError(f"{self.directory}: no vectors of shape ({count}, {dimension})")
        if count == 0:  # nothing to map: saved as a file like any other vectors
            self._vectors = np.zeros((0, dimension), dtype=np.float32)
            return self._vectors
        path = os.path.join(self.path, VectorIndex.VECTORS)
        self._vectors = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(count, dimension))
        return self._vectors

    def save(self, index: VectorIndex) -> None:
        """Write ``index`` into the folder: its vectors, when they are :meth:`new_vectors`', are
        flushed where they are; any others are written.

        Raises:
            ValueError: an index saved already, or whose vectors are only part of :meth:`new_vectors`.
        """
        if self.saved:
            raise ValueError(f"{self.directory}: an index was saved into this folder already")
        mapped = self._vectors if isinstance(self._vectors, np.memmap) else None
        index._write_files(self.path, self.directory, mapped)
        self.saved = True


def _file_kind(path: str) -> str:
    """What ``path`` is, for a message: a folder, a named pipe, a device, a socket."""
    mode = os.stat(path).st_mode
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a device")


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory, in the same layout."""
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


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


def _choose_kind(count: int, kind: str | None, settings: Mapping[str, Any]) -> str:
    """``kind``, checked; None: exact up to :data:`EXACT_INDEX_LIMIT` vectors, hnsw above (exact
    when faiss is not installed), logged; None with settings of an approximate index is refused."""
    if kind is not None:
        check_kind(kind)
        if kind == "exact" and any(value is not None for value in settings.values()):
            raise ConfigError(
                f"{', '.join(sorted(settings))}: settings of an approximate index (hnsw, ivf); an exact index has none"
            )
        return kind
    given = sorted(name for name, value in settings.items() if value is not None)
    if given:  # a setting says which structure it was meant for; choosing by size could drop it
        raise ConfigError(
            f"{', '.join(given)}: settings of an approximate index; say which: kind 'hnsw' or 'ivf' (--index)"
        )
    if count <= EXACT_INDEX_LIMIT:
        chosen = "exact"
        logger.info("index of %d vectors: exact search (approximate from %d vectors on)", count, EXACT_INDEX_LIMIT + 1)
    elif approximate.faiss_available():
        chosen = "hnsw"
        logger.info("index of %d vectors: hnsw, approximate (exact up to %d vectors)", count, EXACT_INDEX_LIMIT)
    else:
        chosen = "exact"
        logger.warning(
            "index of %d vectors: exact search, as faiss is not installed; above %d vectors an hnsw index searches "
            "faster: install it with %s",
            count,
            EXACT_INDEX_LIMIT,
            approximate.INSTALL_HINT,
        )
    return chosen


def check_kind(kind: str) -> str:
    """``kind`` if it is one of :data:`~cosent_tf.choices.INDEX_KINDS`, else a ConfigError."""
    if kind not in INDEX_KINDS:
        raise ConfigError(f"unknown index kind {kind!r}; choose one of {', '.join(INDEX_KINDS)}")
    return kind


def _check_search(queries: np.ndarray, top_k: int) -> None:
    """ValueError for ``top_k`` below 1 or a query vector that is not finite."""
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if not np.isfinite(queries).all():
        row = int(np.argmin(np.isfinite(queries).all(axis=1)))
        raise ValueError(f"query vector {row} holds NaN or infinite values: the model that encoded it is broken")


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
    _check_search(queries, top_k)

    def cosines(block: np.ndarray, start: int, stop: int) -> np.ndarray:
        scores = block @ np.asarray(corpus[start:stop], dtype=np.float32).T
        finite = np.isfinite(scores).all(axis=0)
        if not finite.all():  # a NaN would never rank, and the best lists would come out short
            raise ValueError(
                f"corpus vector {start + int(np.argmin(finite))} gives NaN or infinite scores: it holds NaN or "
                "infinite values (or is far from unit length); rebuild the vectors"
            )
        return scores

    return _top_k_blocks(queries, len(corpus), top_k, cosines, query_chunk, corpus_chunk)


def top_k_codes(
    queries: np.ndarray,
    codes: np.ndarray,
    precision: str,
    top_k: int,
    ranges: np.ndarray | None = None,
    query_chunk: int = 256,
    corpus_chunk: int = 16384,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of float32 unit ``queries`` by the first-stage score over int8 or binary
    ``codes`` (:func:`~cosent_tf.inference.vectors.approximate_scores`): ``(scores, indices)``,
    best first, ties to the lower index; in blocks as :func:`top_k_cosine` (the binary ones
    unpacked a block at a time), so ``codes`` may be a memory map.

    Raises:
        ValueError: ``top_k`` below 1, a query that is not finite, int8 without ``ranges``.

    Example:
        >>> scores, rows = top_k_codes(queries, quantize(corpus, "binary"), "binary", top_k=40)
    """
    _check_search(queries, top_k)

    def first_stage(block: np.ndarray, start: int, stop: int) -> np.ndarray:
        return approximate_scores(block, codes[start:stop], precision, ranges)

    return _top_k_blocks(queries, len(codes), top_k, first_stage, query_chunk, corpus_chunk)


def _top_k_blocks(
    queries: np.ndarray,
    count: int,
    top_k: int,
    scores_of: Callable[[np.ndarray, int, int], np.ndarray],
    query_chunk: int,
    corpus_chunk: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``top_k`` best of ``count`` rows for each query, from ``scores_of(queries block, first
    row, end row)``, one ``query_chunk`` x ``corpus_chunk`` block at a time."""
    k = min(int(top_k), count)
    all_scores = np.zeros((len(queries), k), dtype=np.float32)
    all_indices = np.zeros((len(queries), k), dtype=np.int64)
    for q in range(0, len(queries), query_chunk):
        block = queries[q : q + query_chunk]
        best_scores = np.zeros((len(block), 0), dtype=np.float32)
        best_indices = np.zeros((len(block), 0), dtype=np.int64)
        for c in range(0, count, corpus_chunk):
            scores = scores_of(block, c, min(c + corpus_chunk, count))
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
