"""Fixtures and hooks of the whole suite; helpers that tests import are in tests/helpers.py."""

import os

from . import workers  # sizes the thread pools before TensorFlow starts them

# isort: split
import pytest

import cosent_tf  # noqa: F401  (sets up Keras 2 before TensorFlow is imported anywhere)
from cosent_tf.backend import keras

from .fixtures import tiny_setup  # noqa: F401  (shared with the Keras 3 suite's conftest)
from .helpers import SHARED_DATA, make_model_dir, write_config
from .zoo import built_once, changed_folders

_UMASK = pytest.StashKey[int]()

# The Keras 3 suite runs in processes of its own (tests/keras3/conftest.py; `make test` runs it once
# per backend): this process holds Keras 2.
collect_ignore = ["keras3"]


def pytest_collection_modifyitems(config, items):
    elsewhere = [
        item for item in items if (marker := item.get_closest_marker("backends")) and "tensorflow" not in marker.args
    ]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if item not in elsewhere]


def pytest_collection_finish(session):
    workers.collect_garbage_less_often()


def pytest_configure(config):
    # the tests written once over both Kerases (tests/backend_maths.py) name what only TensorFlow
    # does; this suite's Keras 2 runs on TensorFlow alone, so every such test runs here
    config.addinivalue_line("markers", "backends(*names): runs only on these backends (Keras 2: tensorflow)")
    # The usual umask of a server's machine, whatever the developer's: the outputs the suite
    # writes (the zoo, tests/zoo.py) are checked readable by others under it.
    config.stash[_UMASK] = os.umask(0o022)
    # Outside CI the data-dependent tests skip, saying why; in CI a skip would hide them.
    if os.environ.get("CI", "").lower() in ("1", "true") and not os.path.isdir(SHARED_DATA):
        raise pytest.UsageError(
            f"CI is set but the shared data folder {SHARED_DATA} is missing: the tests that "
            "need it would be skipped; set COSENT_SHARED_DATA or put ../shared beside the clone"
        )


def pytest_unconfigure(config):
    if _UMASK in config.stash:
        os.umask(config.stash[_UMASK])


@pytest.fixture
def tiny_config(tmp_path):
    return write_config(tmp_path / "tiny_config.json")


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts seeded, and fails if it leaves a dtype policy other than float32 behind:
    every function of the library that sets one must restore it."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(1234)
    yield
    leaked = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy("float32")  # so that one leak does not fail every later test
    assert leaked == "float32", f"the test left the global dtype policy {leaked!r} set"
    changed = changed_folders()
    assert not changed, f"the test changed the zoo's {changed}: a test that writes takes tests.zoo.copy_of(folder)"


@pytest.fixture(scope="session")
def mining_models(tmp_path_factory):
    """Model folders of the mining and rerank tests: ``encoder`` and ``other``, two feature models,
    and ``scorer``, an interaction model; small and random."""

    def build(root):
        config = write_config(root / "config.json")
        # Mean pooling: a random model's [CLS] vectors are all nearly the same, which would rank nothing.
        make_model_dir(root / "encoder", config, pooling="last-avg", maxlen=16)
        make_model_dir(root / "scorer", config, kind="interaction", maxlen=32)
        make_model_dir(root / "other", config, pooling="last-avg", maxlen=16)

    return built_once(tmp_path_factory, "mining-models", build)
