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
