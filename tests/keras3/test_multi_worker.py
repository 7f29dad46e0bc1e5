"""``--strategy multi-worker`` on Keras 3's TensorFlow backend: two workers of a localhost cluster
train as one process does on their global batch (the Keras 2 engine's own test of it is
tests/training/test_distribute.py::test_two_workers_train_as_one_process_with_their_global_batch)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import localhost_workers
from tests.keras3.support import ROOT, SHARED_VOCAB
from tests.keras3.test_training import TINY, pair_files


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.backends("tensorflow")
def test_two_workers_train_as_one_process_with_their_global_batch(tmp_path):
    """Each worker trains on its 4 pairs of each batch of 8 and CoSENT ranks the 8: the 6 steps of
    Adam at --lr 1e-3 (each moving a weight by about 1e-3) end within 1e-6 of one process's in
    every weight, the float32 rounding of summing the gradient in two halves; a worker ranking or
    stepping on its half alone would be off by about the step itself."""
    import tensorflow as tf

    train_file, valid_file = pair_files(str(tmp_path))
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    # last-avg: a random BERT's [CLS] vectors are nearly equal, and float32 rounding would then
    # decide the gradients (see tests/training/test_distribute.py)
    command = [sys.executable, "-m", "cosent_tf.cli", "train", "--keras", "3", "--train", train_file]
    command += ["--valid", valid_file, "--config", str(config), "--vocab", SHARED_VOCAB, "--epochs", "1"]
    command += ["--batch-size", "8", "--maxlen", "32", "--pooling", "last-avg", "--lr", "1e-3"]
    # The reference starts from a fresh TensorFlow, as each worker does; the workers are processes,
    # each reading its own TF_CONFIG when its cluster starts.
    single = subprocess.run(
        command + ["--output-dir", str(tmp_path / "single")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert single.returncode == 0, single.stderr[-3000:]
    workers = [
        subprocess.Popen(
            command + ["--output-dir", str(tmp_path / "two"), "--strategy", "multi-worker"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env in localhost_workers(2)
    ]
    logs = [worker.communicate(timeout=300)[1] for worker in workers]
    for worker, log in zip(workers, logs):
        assert worker.returncode == 0, log[-3000:]
    assert "2 replicas (--strategy multi-worker), 4 pairs each a step; CoSENT ranks the global batch" in logs[0]
    two, one = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("two", "single"))
    assert (two["replicas"], two["steps"], one["steps"]) == (2, 6, 6)
    trained, reference = (
        tf.train.load_checkpoint(str(tmp_path / run / "model" / "bert_model.ckpt")) for run in ("two", "single")
    )
    names = sorted(reference.get_variable_to_shape_map())
    assert names == sorted(trained.get_variable_to_shape_map())
    for name in names:
        np.testing.assert_allclose(trained.get_tensor(name), reference.get_tensor(name), atol=1e-6, err_msg=name)
