"""One Keras per process: each route refuses to load beside the other, by name, and nothing the
Keras 3 route imports loads the Keras 2 engine (whose bert4keras points ``keras`` at tf-keras)."""

import os
import subprocess
import sys

import pytest

from tests.keras3.support import ROOT

# The refusals come before Keras 3 is imported, or at the Keras 2 engine's import, or name the
# backend the test sets itself: what they check is the same on every backend, so one backend's run
# checks it (the route's own imports, which do differ by backend, are checked on both below).
BEFORE_THE_BACKEND = pytest.mark.backends("tensorflow")


def run(code):
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300
    )


@BEFORE_THE_BACKEND
def test_the_keras3_route_is_refused_after_the_keras2_engine():
    done = run("import cosent_tf.backend\nimport cosent_tf.keras3")
    assert done.returncode != 0
    assert "cosent_tf.keras3 needs Keras 3, but cosent_tf's Keras 2 engine was imported first" in done.stderr
    assert "use one Keras per process" in done.stderr


@BEFORE_THE_BACKEND
def test_the_keras3_route_is_refused_after_bert4keras():
    done = run("import os\nos.environ['TF_KERAS'] = '1'\nimport bert4keras.backend\nimport cosent_tf.keras3")
    assert done.returncode != 0
    assert "but bert4keras was imported first" in done.stderr


@BEFORE_THE_BACKEND
def test_the_keras2_engine_is_refused_after_the_keras3_route():
    done = run("import cosent_tf.keras3\nimport cosent_tf.backend")
    assert done.returncode != 0
    assert (
        "this process uses cosent_tf.keras3; cosent_tf's Keras 2 engine would point `keras` at tf-keras" in done.stderr
    )


@BEFORE_THE_BACKEND
def test_a_backend_the_route_is_not_tested_on_is_refused():
    done = subprocess.run(
        [sys.executable, "-c", "from cosent_tf.keras3.runtime import backend_name\nbackend_name()"],
        cwd=ROOT,
        env={**os.environ, "KERAS_BACKEND": "numpy"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "Keras 3 runs on its numpy backend here (KERAS_BACKEND)" in done.stderr
    assert "set KERAS_BACKEND to tensorflow or jax" in done.stderr


def test_every_module_of_the_route_leaves_keras_3_in_place():
    code = (
        "import sys\n"
        "import cosent_tf.keras3.losses, cosent_tf.keras3.layers, cosent_tf.keras3.backbones\n"
        "import cosent_tf.keras3.encoder, cosent_tf.keras3.training, cosent_tf.keras3.export\n"
        "from cosent_tf.models.tokenization import SentenceTokenizer\n"
        "loaded = ('cosent_tf.backend' in sys.modules, 'bert4keras.backend' in sys.modules)\n"
        "backend = sys.modules.get('tensorflow.keras.backend')\n"
        "assert backend is None or 'tf_keras' not in backend.__name__, backend\n"
        "print(*loaded, sys.modules['keras'].__version__)"
    )
    done = run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    backend_loaded, bert4keras_backend_loaded, version = done.stdout.split()
    assert (backend_loaded, bert4keras_backend_loaded) == ("False", "False") and version.startswith("3.")


@pytest.mark.parametrize("first", ["import keras", "import keras_hub"])
def test_the_tokenizer_imported_after_keras_3_alone_keeps_it(first):
    """A Keras 3 program that imports the tokenizer before cosent_tf.keras3 gets it beside Keras 3, not
    the Keras 2 engine (which would take ``keras`` from it); the route still loads afterwards."""
    code = (
        f"{first}\nimport sys\n"
        "from cosent_tf.models.tokenization import SentenceTokenizer\n"
        "import cosent_tf.keras3\n"
        "print('cosent_tf.backend' in sys.modules, sys.modules['keras'].__version__)"
    )
    done = run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    backend_loaded, version = done.stdout.split()
    assert backend_loaded == "False" and version.startswith("3.")


def test_the_package_losses_and_layers_are_keras_3_classes_here_and_the_keras3_names_are_them():
    import keras

    from cosent_tf import layers, losses, process_keras
    from cosent_tf.keras3 import layers as keras3_layers
    from cosent_tf.keras3 import losses as keras3_losses
    from cosent_tf.losses.registry import LOSSES

    assert (process_keras.KERAS_MAJOR, process_keras.keras) == (3, keras)
    for name in losses.CLASSES:
        assert getattr(keras3_losses, name) is getattr(losses, name)
        base = keras.layers.Layer if name == "SentenceBertHead" else keras.losses.Loss
        assert issubclass(getattr(losses, name), base), name
    for name in ("Pooling", "PaddingMask"):
        assert getattr(keras3_layers, name) is getattr(layers, name)
        assert issubclass(getattr(layers, name), keras.layers.Layer)
    built = LOSSES["feature", "cosent"].build(scale=7.0, epsilon=0.5, max_label=1.0, positive_above=0.5)
    assert isinstance(built, keras.losses.Loss) and built.scale == 7.0
