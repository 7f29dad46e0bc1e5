"""The training tests' zoo: finished runs that several tests only read (see tests/zoo.py); the
fixtures themselves are in tests/fixtures.py, which the Keras 3 suite's conftest offers too."""

from tests.fixtures import bq_run  # noqa: F401  (a fixture of every training test)
