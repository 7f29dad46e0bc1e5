"""The approximate side of an index: faiss's HNSW and IVF structures over float32, int8 or binary
vectors, which find candidates that :class:`~cosent_tf.inference.index.VectorIndex` re-scores with
the float32 vectors.

faiss is the ``[ann]`` extra (``pip install "cosent-tf[ann]"``), imported only when an approximate
index is built or loaded. It is chosen over hnswlib and usearch because one well-kept library
(wheels for Linux, macOS and Windows) has both structures for float, 8-bit and binary codes, writes
them to one file and reads that file memory-mapped.

The structures, all searched by inner product of unit vectors (the cosine):

========  =====================================  ==========================================
vectors   ``hnsw``                               ``ivf``
========  =====================================  ==========================================
float32   ``IndexHNSWFlat``                      ``IndexIVFFlat``
int8      ``IndexHNSWSQ`` (``QT_8bit``)          ``IndexIVFScalarQuantizer`` (``QT_8bit``)
binary    ``IndexBinaryHNSW`` (Hamming)          ``IndexBinaryIVF`` (Hamming)
========  =====================================  ==========================================

The int8 structures are given the index's own calibration (each dimension's minimum and span,
:func:`~cosent_tf.inference.vectors.int8_ranges`) rather than faiss's training on a sample, and
encode the vectors themselves (not IVF residuals), so their codes are the index's ``codes.npy``
to within a step's rounding. The binary ones hold the packed sign bits (a width rounded up to a
whole byte: the padding bits are 0 in every code and never differ).

Settings (recorded in the index's ``index.json``): ``hnsw``: ``m`` (links per vector),
``ef_construction`` (the candidate list while building) and ``ef_search`` (the candidate list
while searching, never below the candidates asked for); ``ivf``: ``nlist`` (lists, by default
about 4 sqrt(count), at most one per :data:`IVF_TRAIN_PER_LIST` vectors) and ``nprobe`` (lists
searched). ``ef_search`` and ``nprobe`` may be changed on a loaded index: pass them to
:meth:`VectorIndex.search <cosent_tf.inference.index.VectorIndex.search>` (one search), or set
``index.ann_settings["ef_search"]`` (the searches after).

Reading: ``faiss.IO_FLAG_MMAP_IFC`` maps the file and reads the large arrays in place for all six
structures (faiss 1.15: the HNSW graph's links and its flat, scalar-quantised or binary storage;
the IVF lists' codes and ids), so a loaded index takes little memory until it is searched. The
older ``faiss.IO_FLAG_MMAP`` maps only IVF lists (as on-disk lists) and reads an HNSW index whole,
so it is not used. A mapped file that is cut short can crash faiss's reader (binary HNSW) or go
unnoticed (IVF), so the index records the file's size and refuses another before faiss reads it.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
from tqdm.auto import tqdm

from ..console import live_progress_on
from ..errors import ConfigError, DataError
from .vectors import packed_bytes, quantize

INSTALL_HINT = 'pip install "cosent-tf[ann]"'
ANN_KINDS = ("hnsw", "ivf")
# The settings of each structure, and the one of them a search may change.
SETTINGS = {"hnsw": ("m", "ef_construction", "ef_search"), "ivf": ("nlist", "nprobe")}
SEARCH_SETTINGS = {"hnsw": "ef_search", "ivf": "nprobe"}
# Defaults; benchmarks/ANN.md measures recall, build time and speed around them.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64
IVF_NPROBE = 16
# The largest value of a setting: faiss keeps each in a C int (a larger one overflows in faiss).
SETTING_MOST = 2**31 - 1
# k-means of the IVF lists: vectors drawn to train it, per list (faiss warns below 39).
IVF_TRAIN_PER_LIST = 50
# ... and at most this many in all, held in memory at once whatever --nlist asks for.
IVF_TRAIN_MOST = 1 << 18
# Vectors added to a structure a call at a time: one progress step, and one chunk of a memory
# map read into memory.
ADD_CHUNK = 16384
# Queries searched a call at a time.
QUERY_CHUNK = 4096


def require_faiss() -> Any:
    """The faiss module, or a ConfigError that says how to install it."""
    try:
        return importlib.import_module("faiss")
    except ImportError as error:
        raise ConfigError(
            f"an approximate index (hnsw, ivf) needs faiss, which is not installed ({error}); "
            f"install it with: {INSTALL_HINT}, or use an exact index"
        ) from None


def faiss_available() -> bool:
    """Whether faiss can be imported."""
    try:
        require_faiss()
    except ConfigError:
        return False
    return True


def default_nlist(count: int) -> int:
    """IVF lists for ``count`` vectors: about ``4 * sqrt(count)``, and no more than one per
    :data:`IVF_TRAIN_PER_LIST` vectors, so that k-means has enough of them to place each list.

    Example:
        >>> default_nlist(1_000_000), default_nlist(300)
        (4000, 6)
    """
    return max(1, min(round(4 * math.sqrt(count)), count // IVF_TRAIN_PER_LIST))


def ann_settings(kind: str, count: int, given: Mapping[str, Any]) -> dict[str, int]:
    """The settings of a ``kind`` structure over ``count`` vectors: ``given`` with the defaults
    for the ones it leaves out (None counts as left out).

    Raises:
        ConfigError: a setting of another structure or an unknown one, a value that is not a
            positive integer, ``m`` below 2, or ``nlist`` above ``count``.

    Example:
        >>> ann_settings("hnsw", 1000, {"ef_search": 128})
        {'m': 32, 'ef_construction': 80, 'ef_search': 128}
    """
    given = {name: value for name, value in given.items() if value is not None}
    unknown = sorted(set(given) - set(SETTINGS[kind]))
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)}: not a setting of an {kind} index (its settings: {', '.join(SETTINGS[kind])})"
        )
    defaults = (
        {"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": HNSW_EF_SEARCH}
        if kind == "hnsw"
        else {"nlist": default_nlist(count), "nprobe": IVF_NPROBE}
    )
    settings = {name: check_setting(name, given.get(name, default)) for name, default in defaults.items()}
    if kind == "hnsw" and settings["m"] < 2:
        raise ConfigError(f"m {settings['m']}: an HNSW graph needs at least 2 links a vector")
    if kind == "ivf" and settings["nlist"] > count:
        raise ConfigError(
            f"nlist {settings['nlist']}: more IVF lists than the {count} vectors; leave nlist out for "
            f"about 4 sqrt(count) ({default_nlist(count)} here)"
        )
    return settings


def check_setting(name: str, value: Any) -> int:
    """``value`` as the positive integer (at most :data:`SETTING_MOST`) a setting is, else a
    ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= SETTING_MOST:
        raise ConfigError(f"{name} {value!r}: an index setting is a positive integer of at most {SETTING_MOST}")
    return int(value)


def faiss_width(precision: str, dimension: int) -> int:
    """The ``d`` of the faiss structure: the dimension, or for binary codes its bits rounded up to
    whole bytes."""
    return 8 * packed_bytes(dimension) if precision == "binary" else dimension


def build_ann(
    vectors: np.ndarray,
    precision: str,
    kind: str,
    settings: Mapping[str, int],
    ranges: Optional[np.ndarray] = None,
    show_progress: bool = False,
) -> Any:
    """The faiss structure of ``kind`` over ``vectors`` in ``precision``, built :data:`ADD_CHUNK`
    vectors a call (``vectors`` may be a memory map) with a progress bar on stderr when
    ``show_progress`` and it is a terminal. faiss's threads are left at faiss's default.

    Args:
        vectors: float32 unit rows.
        precision: ``float32``, ``int8`` or ``binary``.
        kind: ``hnsw`` or ``ivf``.
        settings: :func:`ann_settings` of ``kind``.
        ranges: the int8 calibration (:func:`~cosent_tf.inference.vectors.int8_ranges`).
        show_progress: draw the progress of training and adding.

    Returns:
        The faiss index, holding ``len(vectors)`` vectors with ids in row order.

    Raises:
        ConfigError: faiss is not installed.

    Example:
        >>> ann = build_ann(vectors, "binary", "hnsw", ann_settings("hnsw", len(vectors), {}))
    """
    faiss = require_faiss()
    count, dimension = vectors.shape
    width = faiss_width(precision, dimension)
    inner = faiss.METRIC_INNER_PRODUCT
    if kind == "hnsw":
        if precision == "float32":
            ann = faiss.IndexHNSWFlat(width, settings["m"], inner)
        elif precision == "int8":
            ann = faiss.IndexHNSWSQ(width, faiss.ScalarQuantizer.QT_8bit, settings["m"], inner)
            _set_int8_ranges(faiss, faiss.downcast_index(ann.storage), ranges)
            ann.is_trained = True
        else:
            ann = faiss.IndexBinaryHNSW(width, settings["m"])
        ann.hnsw.efConstruction = settings["ef_construction"]
        ann.hnsw.efSearch = settings["ef_search"]
    else:
        nlist = settings["nlist"]
        if precision == "float32":
            ann = faiss.IndexIVFFlat(faiss.IndexFlatIP(width), width, nlist, inner)
        elif precision == "int8":
            ann = faiss.IndexIVFScalarQuantizer(
                faiss.IndexFlatIP(width), width, nlist, faiss.ScalarQuantizer.QT_8bit, inner, False
            )
        else:
            ann = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(width), width, nlist)
        ann.nprobe = settings["nprobe"]
        ann.train(_codes_for_faiss(_training_sample(vectors, nlist), precision))
        if precision == "int8":
            _set_int8_ranges(faiss, ann, ranges)
    drawn = show_progress and live_progress_on(sys.stderr)  # tqdm's stream; a log file would keep every redraw
    with tqdm(total=count, unit="vector", desc=f"indexing ({kind})", disable=not drawn) as bar:
        for start in range(0, count, ADD_CHUNK):
            chunk = _codes_for_faiss(vectors[start : start + ADD_CHUNK], precision)
            ann.add(chunk)
            bar.update(len(chunk))
    return ann


def _set_int8_ranges(faiss: Any, holder: Any, ranges: Optional[np.ndarray]) -> None:
    """Give a scalar quantiser (``holder.sq``) the index's calibration: faiss's 8-bit codes keep
    each dimension's minimum, then its span."""
    if ranges is None:
        raise ValueError("an int8 structure needs the calibration ranges")
    low, high = np.asarray(ranges, dtype=np.float32)
    span = np.where(high > low, high - low, 1.0).astype(np.float32)  # a constant dimension: any span
    faiss.copy_array_to_vector(np.concatenate([low, span]), holder.sq.trained)
    holder.is_trained = True


def _training_sample(vectors: np.ndarray, nlist: int) -> np.ndarray:
    """Up to :data:`IVF_TRAIN_PER_LIST` vectors a list (and :data:`IVF_TRAIN_MOST` in all), drawn
    without replacement with a fixed seed (the same corpus trains the same lists), in row order (a
    memory map is read forwards)."""
    size = min(len(vectors), IVF_TRAIN_PER_LIST * nlist, IVF_TRAIN_MOST)
    if size == len(vectors):
        return np.asarray(vectors[:], dtype=np.float32)
    rows = np.sort(np.random.default_rng(0).choice(len(vectors), size=size, replace=False))
    return np.asarray(vectors[rows], dtype=np.float32)


def _codes_for_faiss(vectors: np.ndarray, precision: str) -> np.ndarray:
    """What a faiss structure of ``precision`` takes: contiguous float32 rows (an int8 structure
    quantises them itself), or packed sign bits."""
    if precision == "binary":
        return quantize(vectors, "binary")
    return np.ascontiguousarray(vectors, dtype=np.float32)


def search_ann(
    ann: Any, queries: np.ndarray, precision: str, kind: str, depth: int, settings: Mapping[str, int]
) -> np.ndarray:
    """The ``depth`` nearest rows to each of float32 unit ``queries`` by the faiss structure
    ``ann``: (queries, depth) int64 row numbers, best first, -1 where it found fewer.

    ``settings``: the structure's settings; ``ef_search`` (hnsw, raised to ``depth`` where lower)
    or ``nprobe`` (ivf) are applied to this search only, so a loaded index may be searched with
    several at once.
    """
    faiss = require_faiss()
    if kind == "hnsw":
        params = faiss.SearchParametersHNSW()
        params.efSearch = max(int(settings["ef_search"]), depth)
    else:
        params = faiss.SearchParametersIVF()
        params.nprobe = int(settings["nprobe"])
    labels = np.full((len(queries), depth), -1, dtype=np.int64)
    for start in range(0, len(queries), QUERY_CHUNK):
        chunk = _codes_for_faiss(queries[start : start + QUERY_CHUNK], precision)
        labels[start : start + len(chunk)] = ann.search(chunk, depth, params=params)[1]
    return labels


def write_ann(ann: Any, precision: str, path: str) -> int:
    """Write ``ann`` to ``path`` (faiss's own format); returns the file's size in bytes, which the
    index records so that a file cut short is found before faiss reads it."""
    faiss = require_faiss()
    (faiss.write_index_binary if precision == "binary" else faiss.write_index)(ann, path)
    return os.path.getsize(path)


# The faiss class of each structure, as read back.
CLASSES = {
    ("float32", "hnsw"): "IndexHNSWFlat",
    ("int8", "hnsw"): "IndexHNSWSQ",
    ("binary", "hnsw"): "IndexBinaryHNSW",
    ("float32", "ivf"): "IndexIVFFlat",
    ("int8", "ivf"): "IndexIVFScalarQuantizer",
    ("binary", "ivf"): "IndexBinaryIVF",
}


def read_ann(
    path: str, precision: str, kind: str, count: int, dimension: int, size: Optional[int], mmap: bool = True
) -> Any:
    """The faiss structure in ``path``, checked against the index that records it.

    Args:
        path: the ``ann.faiss`` file.
        precision, kind: the index's (its ``index.json``).
        count, dimension: the index's vectors.
        size: the file's size in bytes when it was written (None: not recorded, not checked).
        mmap: read it with ``faiss.IO_FLAG_MMAP_IFC`` (mapped, see the module's description).

    Raises:
        ConfigError: faiss is not installed.
        DataError: naming ``path``: a size other than the recorded one (cut short, or another
            index's file), a file faiss cannot read, or a structure of another class, metric,
            width or count than the index's.
    """
    faiss = require_faiss()
    remedy = "rebuild the index (cosent-tf search build)"
    actual = os.path.getsize(path)
    if size is not None and actual != size:
        raise DataError(
            path,
            f"holds {actual} bytes, but the index recorded {size} when it wrote it: the file was cut short or "
            f"replaced by another index's; {remedy}",
        )
    flags = faiss.IO_FLAG_MMAP_IFC if mmap else 0
    try:
        ann = (faiss.read_index_binary if precision == "binary" else faiss.read_index)(path, flags)
    except RuntimeError as error:
        # faiss's message starts with the C++ function and source line; the reason follows "Error: ".
        reason = str(error).strip().rsplit("Error: ", 1)[-1] or type(error).__name__
        raise DataError(path, f"faiss cannot read it ({reason}); {remedy}") from None
    expected = CLASSES[(precision, kind)]
    found = type(ann).__name__  # faiss's reader returns the structure's own class (it owns the object)
    if found != expected:
        raise DataError(
            path, f"holds a faiss {found}, but the index records {precision} {kind} (a {expected}); {remedy}"
        )
    if precision != "binary" and ann.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise DataError(path, f"holds a faiss index that is not searched by inner product; {remedy}")
    if precision == "int8":
        quantizer = faiss.downcast_index(ann.storage).sq if kind == "hnsw" else ann.sq
        if quantizer.qtype != faiss.ScalarQuantizer.QT_8bit:
            raise DataError(path, f"holds a scalar quantiser of another code than 8 bits a dimension; {remedy}")
    width = faiss_width(precision, dimension)
    if ann.d != width or ann.ntotal != count:
        raise DataError(
            path,
            f"holds {ann.ntotal} vectors of width {ann.d}, but the index has {count} of width {width}: it is "
            f"another index's file; {remedy}",
        )
    return ann
