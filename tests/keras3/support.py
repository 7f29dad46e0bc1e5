"""What the Keras 3 tests share: the data paths, and the Keras 2 engine run in a subprocess.

Nothing here imports the Keras 2 engine: a Keras 3 process must not (cosent_tf.keras3.runtime).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np

from tests.reference_cache import cached, contents, interpreter, package_sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.environ.get("COSENT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
SHARED_VOCAB = os.path.join(SHARED_DATA, "vocab", "bert-base-chinese-vocab.txt")


def tiny_bert_config(**changes):
    """The suite's tiny random BERT (the shared vocabulary's 21,128 ids, width 16, two heads, two blocks,
    no dropout) with ``changes``: one config for every test that needs a small model of its own."""
    return {
        "vocab_size": 21128,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "hidden_act": "gelu",
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        **changes,
    }


def run_keras2(code, tmp_path, timeout=600, reads=(), writes=False, **inputs):
    """Run ``code`` in a fresh Keras 2 process and return the arrays it saved.

    ``code`` sees ``inputs`` (arrays, saved to and loaded from an npz: name -> array), a dict
    ``outputs`` to fill with arrays, and ``tmp`` (a folder); ``import cosent_tf`` is done.

    The outputs are cached (tests/reference_cache.py) by the code, the inputs, cosent_tf's sources
    and this environment, so that the Keras 3 suite's second backend and a rerun reuse them:
    ``reads`` names the files and folders the code reads (their content joins the key, and their
    paths in ``code`` are left out of it, being tmp ones), and ``writes`` keeps what the code writes
    to ``tmp`` with the outputs, for a test that reads it afterwards.
    """
    tmp_path = os.fspath(tmp_path)
    in_path, out_path = os.path.join(tmp_path, "keras2-in.npz"), os.path.join(tmp_path, "keras2-out.npz")

    def produce():
        np.savez(in_path, **inputs)
        script = (
            "import numpy as np, cosent_tf\n"
            f"inputs = dict(np.load({in_path!r}))\n"
            f"tmp = {tmp_path!r}\n"
            "outputs = {}\n" + textwrap.dedent(code) + f"\nnp.savez({out_path!r}, **outputs)\n"
        )
        env = {key: value for key, value in os.environ.items() if key not in ("KERAS_BACKEND",)}
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"the Keras 2 process failed:\n{done.stderr[-4000:]}"
        return dict(np.load(out_path))

    keyed_code = textwrap.dedent(code)
    for index, path in enumerate(reads):
        keyed_code = keyed_code.replace(os.fspath(path), f"<read {index}>")
    key = [
        keyed_code,
        {name: np.asarray(value) for name, value in inputs.items()},
        [contents(path) for path in reads],
        writes,
        package_sources(),
        interpreter(sys.executable),
    ]
    return cached("keras2", key, produce, folder=tmp_path if writes else None)
