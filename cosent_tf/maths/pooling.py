"""Pooling of transformer outputs into sentence vectors, and the padding mask it reads.

The modes and their inputs are :class:`cosent_tf.layers.Pooling`'s. Everything is computed in
float32, so that pooling is safe under a bfloat16 policy.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .ops import Ops


def masked_mean(ops: Ops, hidden: Any, mask: Any) -> Any:
    """Mean over the tokens whose mask is 1; a row with no such token gives zeros."""
    weights = mask[:, :, None]
    return ops.sum(hidden * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), ops.constant(1.0, hidden))


def pool(ops: Ops, mode: str, inputs: Any, mask: Optional[Any] = None) -> Any:
    """One float32 vector per sentence from ``inputs`` (see :class:`cosent_tf.layers.Pooling`)."""
    if mode == "pooler":
        return ops.cast(inputs, "float32")
    if mode == "first-last-avg":
        first, last = (ops.cast(x, "float32") for x in inputs)
    else:
        last = ops.cast(inputs, "float32")
    if mode == "cls":
        return last[:, 0]
    if mask is None:
        mask = ops.ones(ops.shape(last)[:2], "float32")
    mask = ops.cast(mask, "float32")
    if mode == "last-avg":
        return masked_mean(ops, last, mask)
    if mode == "first-last-avg":
        return (masked_mean(ops, first, mask) + masked_mean(ops, last, mask)) / 2.0
    lowest = ops.constant(np.finfo(np.float32).min, last)
    return ops.max(ops.where(mask[:, :, None] > 0, last, lowest), axis=1)


def padding_mask(ops: Ops, token_ids: Any, padding_id: int = 0) -> Any:
    """1.0 where a token id is not ``padding_id``, else 0.0."""
    return ops.cast(ops.not_equal(ops.cast(token_ids, "int32"), padding_id), "float32")
