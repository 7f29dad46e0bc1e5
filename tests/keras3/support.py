"""What the Keras 3 tests share: the data paths, and the Keras 2 engine run in a subprocess.

Nothing here imports the Keras 2 engine: a Keras 3 process must not (cosent_tf.keras3.runtime).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DATA = os.environ.get("COSENT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
SHARED_VOCAB = os.path.join(SHARED_DATA, "vocab", "bert-base-chinese-vocab.txt")


def run_keras2(code, tmp_path, timeout=600, **inputs):
    """Run ``code`` in a fresh Keras 2 process and return the arrays it saved.

    ``code`` sees ``inputs`` (arrays, saved to and loaded from an npz: name -> array), a dict
    ``outputs`` to fill with arrays, and ``tmp`` (a folder); ``import cosent_tf`` is done.
    """
    tmp_path = os.fspath(tmp_path)
    in_path, out_path = os.path.join(tmp_path, "keras2-in.npz"), os.path.join(tmp_path, "keras2-out.npz")
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
