"""The Keras 3 suite: run in processes of its own, one per backend (``make test`` runs it twice,
side by side, with ``KERAS_BACKEND=tensorflow`` and ``KERAS_BACKEND=jax``, and ``--confcutdir
tests/keras3`` so that the Keras 2 suite's conftest is not loaded). What it compares with the Keras 2 engine comes
from Keras 2 subprocesses (:func:`tests.keras3.support.run_keras2`).

``@pytest.mark.keras2_only(reason=...)`` marks a test of a body written once over both Kerases
(a Keras 2 suite module that a module here star-imports) that only the Keras 2 engine can pass; it
is skipped here with its reason, which the summary counts (``-rs`` shows it).

``pytestmark = pytest.mark.ci_backend("jax")`` in a module that star-imports an engine feature module
of the Keras 2 suite: CI runs those bodies on that one backend, since each is a training run that
costs as much again per backend and what the backend changes (the maths' ops) the loss and layer
tests check on both; on the other backend the tests are marked ``full``, which ``make test-full``
runs. ``ci_backend()``, with no backend, on a body or a case: CI runs it on tf-keras only, and
both Keras 3 backends' runs are ``full`` (it is registered in pyproject.toml, as the Keras 2 suite
collects the bodies that carry it).

``@pytest.mark.backends("tensorflow")`` marks a test of what only that backend does
(tf.distribute, SavedModel export), or of what happens before a backend is chosen (a refusal at
import), which one backend's run checks for all; on another backend it is deselected, and the
run's summary counts it.
"""

import os

import tests.workers as workers  # sizes the thread pools before Keras 3's backend starts them

# isort: split
import pytest

from cosent_tf.keras3.runtime import backend_name
from tests.fixtures import bq_run, tiny_setup  # noqa: F401  (the fixtures of the bodies written once)

BACKENDS = ("tensorflow", "jax")


def pytest_collection_finish(session):
    workers.collect_garbage_less_often()


def pytest_configure(config):
    config.addinivalue_line("markers", "backends(*names): runs only on these Keras 3 backends")
    wanted = os.environ.get("KERAS_BACKEND")
    if wanted not in BACKENDS:
        raise pytest.UsageError(f"run the Keras 3 suite with KERAS_BACKEND set to one of {', '.join(BACKENDS)}")
    if backend_name() != wanted:
        raise pytest.UsageError(f"KERAS_BACKEND={wanted}, but Keras 3 runs on {backend_name()}")
    if os.environ.get("CI", "").lower() in ("1", "true"):
        from tests.keras3.support import SHARED_DATA

        if not os.path.isdir(SHARED_DATA):
            raise pytest.UsageError(f"CI is set but the shared data folder {SHARED_DATA} is missing")


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m "not full"
def pytest_collection_modifyitems(config, items):
    here = backend_name()
    kept, deselected = [], []
    for item in items:
        ci_backend = item.get_closest_marker("ci_backend")
        if ci_backend is not None and here not in ci_backend.args:
            item.add_marker(pytest.mark.full)
        keras2_only = item.get_closest_marker("keras2_only")
        if keras2_only is not None:  # a body of the Keras 2 suite's, star-imported here
            item.add_marker(pytest.mark.skip(reason=f"Keras 2 only: {keras2_only.kwargs['reason']}"))
        marker = item.get_closest_marker("backends")
        (kept if marker is None or here in marker.args else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts seeded, and fails if it leaves a dtype policy other than float32 behind."""
    import keras

    # free_memory=False: a full garbage collection before every test cost more than most tests
    # (docs/testing.md); Python's own collector still runs
    keras.utils.clear_session(free_memory=False)
    keras.utils.set_random_seed(1234)
    yield
    leaked = keras.config.dtype_policy().name
    keras.config.set_dtype_policy("float32")
    assert leaked == "float32", f"the test left the global dtype policy {leaked!r} set"
