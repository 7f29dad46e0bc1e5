"""The process environment TensorFlow must find when it is first imported (see
:mod:`cosent_tf.backend` for why each variable is set). Imports nothing heavy, so that
``import cosent_tf`` can set it up before the user's ``import tensorflow``."""

import os
import sys

# TensorFlow resolves tf.keras (and bert4keras's Keras) at its own import: imported before
# cosent_tf without TF_USE_LEGACY_KERAS=1, it has Keras 3, and models fail much later.
if "tensorflow" in sys.modules and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    raise ImportError(
        "tensorflow was imported before cosent_tf, so it set up Keras 3, which bert4keras cannot use: "
        "import cosent_tf first (it sets up Keras 2), or set TF_USE_LEGACY_KERAS=1 before importing tensorflow"
    )

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")

# When it is set, TensorFlow's fused oneDNN matmuls reorder their weights once, on first use, and
# keep that copy: a model trained in the process would go on computing with its first weights.
# TensorFlow reads it once a process, so its value when cosent_tf was imported counts too
# (:func:`cosent_tf.backend.weights_assumed_frozen`).
FROZEN_WEIGHTS_VARIABLE = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"
FROZEN_WEIGHTS_AT_IMPORT = os.environ.get(FROZEN_WEIGHTS_VARIABLE)


def cpu_flags(cpuinfo="/proc/cpuinfo") -> frozenset:
    """The instruction-set extensions this CPU has, as Linux's ``cpuinfo`` names them
    (``amx_bf16``, ``avx512_bf16``, ...); empty where that file is missing."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1] for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return frozenset(flags.split())
