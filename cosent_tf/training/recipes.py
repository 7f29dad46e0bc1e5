"""Training recipes: the settings one ``--recipe`` stands for. Each setting is overridden by
its own option (``--recipe paper --epochs 2`` trains 2 epochs); ``None`` means the task's or the
loss's default (:mod:`cosent_tf.data.tasks`, :mod:`cosent_tf.losses.registry`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import lookup


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    title: str
    lr: float
    weight_decay: float
    warmup: float
    schedule: str
    pooling: str
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    nli_batch_size: Optional[int] = None


RECIPES = {
    "blog": Recipe(
        "blog",
        "the blog posts' scripts: Adam 2e-5, [CLS] pooling, the task's batch size and epochs",
        lr=2e-5,
        weight_decay=0.0,
        warmup=0.0,
        schedule="constant",
        pooling="cls",
    ),
    "paper": Recipe(
        "paper",
        "the journal paper (TASLP 2024): AdamW 2e-5 with weight decay 0.01, linear warm-up over 10% of the "
        "steps then linear decay, 4 epochs, batch 16 (64 for NLI), mean pooling",
        lr=2e-5,
        weight_decay=0.01,
        warmup=0.1,
        schedule="linear",
        pooling="last-avg",
        epochs=4,
        batch_size=16,
        nli_batch_size=64,
    ),
}


def get_recipe(name: str) -> Recipe:
    return lookup(RECIPES, name, "recipe")
