"""tests/training/test_gradient_cache.py in a Keras 3 process (this process's backend): the same bodies
show a step in micro-batches making the update of the whole batch, with dropout off and on; CI runs
the cases that body marks with ``ci_backend`` (the rest here: make test-full).

Its one body of its own: a run in micro-batches learns. It starts from the Keras 3 suite's
``tiny_run`` (a seeded random start written as a model folder, on pairs only a trained model ranks),
which tests/fixtures.py has no Keras-neutral twin of; tf-keras's runs in micro-batches are checked by
the engine's own tests (test_in_batch_runs, test_resume).
"""

import numpy as np
import pytest

from tests.keras3.test_training import _spearman, texts_of, tiny_run  # noqa: F401  (tiny_run: a fixture)
from tests.training.test_gradient_cache import *  # noqa: F403  (its tests, collected here)


@pytest.mark.heavy
# CI runs it on TensorFlow (on JAX in make test-full): JAX's step is shown equal to the whole batch's above,
# and a run compiles it again for each shape, several times this module's other tests
@pytest.mark.ci_backend("tensorflow")
def test_a_run_in_micro_batches_learns(tiny_run):  # noqa: F811  (the fixture imported above)
    from cosent_tf.keras3 import train
    from cosent_tf.keras3.encoder import SentenceEncoder
    from cosent_tf.training.config import RunConfig

    cfg, start = tiny_run
    texts = texts_of(cfg.valid_file)
    labels = np.loadtxt(cfg.valid_file, dtype=str, delimiter="\t")[:, 2].astype(float)
    untrained = _spearman(SentenceEncoder.load(start).encode(texts), labels)
    metrics = train(RunConfig(**{**cfg.__dict__, "micro_batch_size": 3}))
    assert metrics["steps"] == 2 * 6
    assert metrics["valid"]["spearman"] > untrained + 0.1, untrained
