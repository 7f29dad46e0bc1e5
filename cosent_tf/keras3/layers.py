"""The pooling layers under their Keras 3 names: :class:`~cosent_tf.layers.Pooling` and
:class:`~cosent_tf.layers.PaddingMask`, written once over this process's Keras
(:mod:`cosent_tf.process_keras`) and so Keras 3 layers here."""

from __future__ import annotations

from ..layers import PaddingMask, Pooling

__all__ = ["PaddingMask", "Pooling"]
