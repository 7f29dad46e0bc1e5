"""The independent side of the loss parity tests; runs in the reference environment.

Imports torch and sentence-transformers, never cosent_tf or TensorFlow: the tests
(tests/losses/test_mnrl.py, tests/losses/test_angle.py) call it with ``COSENT_REFERENCE_PYTHON``.

    loss_reference.py CASES.json INPUTS.npz OUT.npz

CASES.json is a list of cases, each ``{"name", "loss": "mnrl" | "angle", "scale", ...}``, with
``group_size``, ``directions`` and ``partition_mode`` for "mnrl". INPUTS.npz holds each case's
``NAME.vectors`` (rows, d) in the loss's row layout and, for "angle", ``NAME.labels`` (one per
pair). OUT.npz gets ``NAME.loss`` and ``NAME.gradient`` (d loss / d vectors, the rows' shape),
both float64, computed by sentence-transformers' own ``compute_loss_from_embeddings``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import torch
from sentence_transformers.sentence_transformer.losses import AnglELoss, MultipleNegativesRankingLoss


def _mnrl(case: dict, vectors: torch.Tensor) -> torch.Tensor:
    # The loss never calls the model when given embeddings, so it needs none.
    loss = MultipleNegativesRankingLoss(
        None,
        scale=case["scale"],
        directions=tuple(case["directions"]),
        partition_mode=case["partition_mode"],
    )
    group_size = case["group_size"]
    columns = [vectors[column::group_size] for column in range(group_size)]
    return loss.compute_loss_from_embeddings(columns, None)


def _angle(case: dict, vectors: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    loss = AnglELoss(None, scale=case["scale"])
    return loss.compute_loss_from_embeddings([vectors[0::2], vectors[1::2]], labels)


def main(cases_path: str, inputs_path: str, output_path: str) -> None:
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    inputs = np.load(inputs_path)
    results: dict[str, Any] = {}
    for case in cases:
        name = case["name"]
        # float64 so that the reference's own rounding stays far below the tolerance
        vectors = torch.tensor(inputs[f"{name}.vectors"], dtype=torch.float64, requires_grad=True)
        if case["loss"] == "mnrl":
            value = _mnrl(case, vectors)
        elif case["loss"] == "angle":
            value = _angle(case, vectors, torch.tensor(inputs[f"{name}.labels"], dtype=torch.float64))
        else:
            raise ValueError(f"unknown loss {case['loss']!r} in case {name}")
        (gradient,) = torch.autograd.grad(value, vectors)
        results[f"{name}.loss"] = np.asarray(value.item(), dtype=np.float64)
        results[f"{name}.gradient"] = gradient.numpy()
    np.savez(output_path, **results)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
