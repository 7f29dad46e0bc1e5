"""Matryoshka representation learning (Kusupati et al., NeurIPS 2022): one feature loss on the
leading dimensions of the sentence vectors at several widths::

    loss = sum_i weight_i * inner(y_true, y_pred[:, :dim_i])

The inner losses compare vectors by cosine, which normalises them, so the cut vectors need no
renormalising; the vectors are computed once and sliced.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

from .ops import Ops


def check_dims(dims: Sequence[Any], weights: Optional[Sequence[Any]] = None) -> tuple[list[int], list[float]]:
    """``(dims, weights)`` as lists, or a ValueError naming what is wrong: each width a distinct
    positive integer, one weight per width (default 1 each), finite, none negative, not all 0.

    Example:
        >>> check_dims([256, 64], [1, 0.5])
        ([256, 64], [1.0, 0.5])
    """
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
        raise ValueError(f"matryoshka dims: give a list of widths, got {dims!r}")
    dims = list(dims)
    if not dims:
        raise ValueError("matryoshka dims: give at least one width")
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise ValueError(f"matryoshka dims: each width must be a positive integer, got {dim!r}")
    dims = [int(dim) for dim in dims]
    if len(set(dims)) != len(dims):
        raise ValueError(f"matryoshka dims: {dims} names a width twice")
    if weights is None:
        weights = [1.0] * len(dims)
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Iterable):
        raise ValueError(f"matryoshka weights: give a list of weights, got {weights!r}")
    try:
        weights = [float(weight) for weight in weights]
    except (TypeError, ValueError):
        raise ValueError(f"matryoshka weights: each must be a number, got {list(weights)}") from None
    if len(weights) != len(dims):
        raise ValueError(f"matryoshka weights: {len(weights)} weights for {len(dims)} widths {dims}; give one each")
    if any(not (math.isfinite(weight) and weight >= 0) for weight in weights):
        raise ValueError(f"matryoshka weights: each must be a finite number of at least 0, got {weights}")
    if not any(weights):
        raise ValueError("matryoshka weights: every weight is 0, so the loss is 0: give one a weight")
    return dims, weights


def matryoshka(
    ops: Ops,
    inner: Callable[[Any, Any], Any],
    y_true: Any,
    y_pred: Any,
    dims: Sequence[int],
    weights: Sequence[float],
) -> Any:
    """The weighted sum of ``inner(y_true, vectors cut to each width)``; a width of weight 0 is
    not computed. ValueError when a width is above the vectors' (when the width is static)."""
    vectors = ops.convert_to_tensor(y_pred)
    width = vectors.shape[-1]
    if width is not None and max(dims) > width:
        raise ValueError(f"matryoshka dims {list(dims)}: the vectors have {width} dimensions, fewer than {max(dims)}")
    total = None
    for dim, weight in zip(dims, weights):
        if weight:
            term = inner(y_true, vectors[:, :dim])
            term = ops.constant(weight, term) * term
            total = term if total is None else total + term
    return total
