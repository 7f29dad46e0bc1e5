"""Smaller sentence vectors: cut to their first dimensions (Matryoshka widths), and stored in int8
or in one bit a dimension.

Plain NumPy, no TensorFlow: an index is searched with it, and a service that only reads vectors
needs nothing else.

* **Width.** A vector cut to its first ``dim`` dimensions is renormalised to unit length, so that
  a dot product is still a cosine. A model trained with ``--matryoshka-dims`` records its widths
  (``ModelSpec.matryoshka_dims``); cutting another model, or to another width, works but loses
  more (see the width table in ``benchmarks/MATRYOSHKA.md``).
* **int8.** Each dimension is scaled into 256 steps between a calibration set's minimum and
  maximum of it (the corpus's own vectors, by default) and stored as ``code - 128`` in int8: 4
  times smaller. Scores are asymmetric: the float32 query against the corpus codes turned back
  into floats (each within half a step of the vector it came from).
* **binary.** One bit a dimension, set where the value is above 0, packed eight to a byte
  (``numpy.packbits``, the first dimension in the highest bit): 32 times smaller. Scored by the
  Hamming distance of the query's bits: ``1 - 2 * distance / dim``, the cosine of the two sign
  vectors.

A search over int8 or binary vectors takes more candidates than it returns and re-scores them with
the float32 vectors (:mod:`cosent_tf.inference.index`, ``rescore_multiplier``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Optional

import numpy as np

from ..choices import VECTOR_PRECISIONS
from ..errors import ConfigError

logger = logging.getLogger("cosent_tf")

INT8_STEPS = 255  # int8 codes span 256 values: -128 .. 127
# Rows read at a time where the vectors may be a memory map larger than memory.
BLOCK_ROWS = 65536


def packed_bytes(dim: int) -> int:
    """The bytes of one binary vector of ``dim`` dimensions: a bit each, eight to a byte, the last
    byte padded.

    Example:
        >>> packed_bytes(128), packed_bytes(130)
        (16, 17)
    """
    return -(-dim // 8)


def check_dim(dim: Optional[int], width: int, trained_dims: Optional[Sequence[int]], where: str) -> Optional[int]:
    """``dim`` checked against a model whose vectors have ``width`` dimensions: a ConfigError when it
    is not a width the vectors have, a logged warning when the model was not trained for it. None
    (and ``width`` itself) means the full vectors and returns None.

    Args:
        dim: the width asked for (``--dim``), or None.
        width: the model's vector width.
        trained_dims: the widths its loss trained (``ModelSpec.matryoshka_dims``); None: the full
            width only.
        where: the model, named in the message.

    Returns:
        ``dim``, or None for the full width.

    Raises:
        ConfigError: ``dim`` below 1 or above ``width``.

    Example:
        >>> check_dim(128, 768, [768, 256, 128], "model")
        128
    """
    if dim is None:
        return None
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ConfigError(f"--dim {dim!r}: a width is a positive integer")
    if dim == width:
        if trained_dims and width not in trained_dims:
            logger.warning(
                "--dim %d: %s was trained for the widths %s (--matryoshka-dims) and not its full width %d, whose "
                "vectors are not what its loss trained",
                dim,
                where,
                ", ".join(map(str, sorted(trained_dims, reverse=True))),
                width,
            )
        return None
    if dim > width:
        raise ConfigError(f"--dim {dim}: {where} makes vectors of {width} dimensions; ask for at most {width}")
    trained = sorted(trained_dims or [width], reverse=True)
    if int(dim) not in trained:
        logger.warning(
            "--dim %d: %s was trained for %s (%s); vectors cut to another width lose more of their quality%s",
            dim,
            where,
            "the widths " + ", ".join(map(str, trained)) if trained_dims else f"its full width {width} only",
            "--matryoshka-dims" if trained_dims else "no --matryoshka-dims",
            "" if trained_dims else " (train with --matryoshka-dims to cut it)",
        )
    return int(dim)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero): the vectors both Kerases' encoders return."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def row_cosines(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The cosine of each row of ``first`` with the same row of ``second`` (0 where either is a zero
    row), in their dtype: a feature model's score of each pair, on either Keras."""
    return np.sum(l2_normalize(first) * l2_normalize(second), axis=1)


def truncate(vectors: np.ndarray, dim: Optional[int]) -> np.ndarray:
    """The first ``dim`` dimensions of each row, renormalised to unit length (float32); ``vectors``
    as float32 when ``dim`` is None. A row of zeros stays zeros.

    Raises:
        ValueError: ``dim`` is not between 1 and the vectors' width.

    Example:
        >>> truncate(np.array([[3.0, 4.0, 12.0]]), 2)
        array([[0.6, 0.8]], dtype=float32)
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    if dim is None:
        return vectors
    if not 1 <= dim <= vectors.shape[1]:
        raise ValueError(f"cannot cut vectors of {vectors.shape[1]} dimensions to {dim}")
    cut = vectors[:, :dim]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return (cut / np.maximum(norms, np.finfo(np.float32).tiny)).astype(np.float32)


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`~cosent_tf.choices.VECTOR_PRECISIONS`, else a ConfigError."""
    if precision not in VECTOR_PRECISIONS:
        raise ConfigError(f"unknown vector precision {precision!r}; choose one of {', '.join(VECTOR_PRECISIONS)}")
    return precision


def int8_ranges(vectors: np.ndarray) -> np.ndarray:
    """The calibration of int8 codes: each dimension's minimum (row 0) and maximum (row 1) over
    ``vectors``, float32 of shape (2, dim); read in blocks, so ``vectors`` may be a memory map.

    Raises:
        ValueError: no vectors, or a value that is not finite.

    Example:
        >>> int8_ranges(np.array([[0.6, -0.8], [-1.0, 0.0]]))
        array([[-1. , -0.8],
               [ 0.6,  0. ]], dtype=float32)
    """
    if len(vectors) == 0:
        raise ValueError("int8 calibration needs at least one vector")
    low = np.full(vectors.shape[1], np.inf, dtype=np.float32)
    high = np.full(vectors.shape[1], -np.inf, dtype=np.float32)
    for start in range(0, len(vectors), BLOCK_ROWS):
        block = np.asarray(vectors[start : start + BLOCK_ROWS], dtype=np.float32)
        low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError("int8 calibration: the vectors hold NaN or infinite values")
    return np.stack([low, high])


def _steps(ranges: np.ndarray) -> np.ndarray:
    """Each dimension's step; a dimension that never changes gets a step of 1 (every code the same)."""
    span = ranges[1] - ranges[0]
    return np.where(span > 0, span / INT8_STEPS, 1.0).astype(np.float32)


def quantize(vectors: np.ndarray, precision: str, ranges: Optional[np.ndarray] = None) -> np.ndarray:
    """``vectors`` in ``precision``: float32 as they are; int8 codes (rows of ``dim`` int8) in the
    calibration ``ranges`` (:func:`int8_ranges`; a value outside them is clipped to the nearest
    end); binary, the sign bits packed (rows of ``ceil(dim / 8)`` uint8). Codes are made
    :data:`BLOCK_ROWS` rows at a time, so ``vectors`` may be a memory map larger than memory.

    Raises:
        ConfigError: an unknown precision.
        ValueError: int8 without ``ranges``, ranges of another width, or a vector that holds NaN
            or infinite values (it has no code).

    Example:
        >>> quantize(np.array([[0.5, -0.5, 0.1]]), "binary")
        array([[160]], dtype=uint8)
    """
    check_precision(precision)
    if precision == "float32":
        return np.asarray(vectors, dtype=np.float32)
    if not isinstance(vectors, np.ndarray):  # a memory map stays one: it is read a block at a time
        vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"vectors of shape {vectors.shape} are not a matrix")
    count, width = vectors.shape
    if precision == "binary":
        bits = np.empty((count, packed_bytes(width)), dtype=np.uint8)
        for start, block in _finite_blocks(vectors):
            bits[start : start + len(block)] = np.packbits(block > 0, axis=1)
        return bits
    if ranges is None:
        raise ValueError("int8 vectors need the calibration ranges (int8_ranges of the corpus)")
    ranges = np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, width):
        raise ValueError(f"int8 ranges of shape {ranges.shape} do not fit vectors of {width} dimensions")
    steps = _steps(ranges)
    codes = np.empty((count, width), dtype=np.int8)
    for start, block in _finite_blocks(vectors):
        steps_from_low = np.rint((block - ranges[0]) / steps)
        codes[start : start + len(block)] = np.clip(steps_from_low, 0, INT8_STEPS) - 128
    return codes


def _finite_blocks(vectors: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, float32 block) of :data:`BLOCK_ROWS` rows at a time; ValueError at a row that is
    not finite (it has no code)."""
    for start in range(0, len(vectors), BLOCK_ROWS):
        block = np.asarray(vectors[start : start + BLOCK_ROWS], dtype=np.float32)
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            raise ValueError(f"vector {start + int(np.argmin(finite))} holds NaN or infinite values: it has no code")
        yield start, block


def dequantize_int8(codes: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """The float32 vectors int8 ``codes`` stand for: each within half a step of the vector it came
    from (where that lay inside the ranges)."""
    return (ranges[0] + (np.asarray(codes, dtype=np.float32) + 128) * _steps(ranges)).astype(np.float32)


def hamming_scores(query_bits: np.ndarray, corpus_bits: np.ndarray, dim: int) -> np.ndarray:
    """``1 - 2 * hamming / dim`` for every (query, corpus) pair of packed sign bits, (queries,
    corpus) float32: the cosine of the two sign vectors (1 when every sign agrees).

    Computed as the dot product of the +1/-1 sign vectors over ``dim`` (exact: the sums are small
    integers), so memory is that of the two sign matrices and the result, and the product is a
    matrix multiplication; the padding bits past ``dim`` are left out.

    Raises:
        ValueError: bits of a width that does not hold ``dim`` dimensions.

    Example:
        >>> hamming_scores(np.array([[0b10100000]], np.uint8), np.array([[0b10000000]], np.uint8), 3)
        array([[0.33333334]], dtype=float32)
    """
    query_signs, corpus_signs = _signs(query_bits, dim), _signs(corpus_bits, dim)
    return np.divide(query_signs @ corpus_signs.T, np.float32(dim), dtype=np.float32)


def _signs(bits: np.ndarray, dim: int) -> np.ndarray:
    """Packed sign bits as float32 +1 (bit set) / -1 rows of ``dim``."""
    bits = np.asarray(bits, dtype=np.uint8)
    if bits.ndim != 2 or bits.shape[1] != packed_bytes(dim):
        raise ValueError(
            f"packed bits of shape {bits.shape} do not hold {dim} dimensions ({packed_bytes(dim)} bytes a row)"
        )
    signs = np.unpackbits(bits, axis=1, count=dim).astype(np.float32)
    signs *= 2  # in place: a block of the corpus is as large as its float32 vectors
    signs -= 1
    return signs


def approximate_scores(
    queries: np.ndarray, codes: np.ndarray, precision: str, ranges: Optional[np.ndarray] = None
) -> np.ndarray:
    """The first-stage scores of float32 unit ``queries`` against a block of corpus ``codes`` in
    ``precision``: (queries, codes) float32, higher is closer. float32 and int8: the dot product with
    the (dequantised) vectors; binary: :func:`hamming_scores` of the queries' sign bits."""
    check_precision(precision)
    if precision == "float32":
        return queries @ np.asarray(codes, dtype=np.float32).T
    if precision == "int8":
        if ranges is None:
            raise ValueError("int8 scores need the calibration ranges")
        return queries @ dequantize_int8(codes, ranges).T
    return hamming_scores(quantize(queries, "binary"), np.asarray(codes), queries.shape[1])
