"""Encoding on every local device (--strategy mirrored): each replica gets a share of every batch,
and the vectors are one device's.

The CPU is split into two logical devices (COSENT_TF_CPU_DEVICES=2) when cosent_tf is imported, so
the two-device runs happen in a process of their own, one for all of them; the one-device vectors
they are compared with, and the run where mirrored finds one device, come from this process,
which has one CPU device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import PairScorer, SentenceEncoder, VectorIndex
from cosent_tf.backend import tf
from tests.helpers import ROOT, distinct_texts, make_model_dir, write_config

# 10 texts in batches of 3: two replicas share 3 rows as 2 and 1, and the last batch's one row
# leaves the second replica nothing.
TEXTS = distinct_texts(11, 10, shortest=1, longest=12)

MIRRORED = """
import json, sys
import numpy as np
from cosent_tf.cli import main
from cosent_tf.inference.matchers import PairScorer, SentenceEncoder
from cosent_tf.training.distribute import get_strategy

root = sys.argv[1]
main(["encode", f"{root}/model", f"{root}/texts.txt", f"{root}/mirrored.npy", "--strategy", "mirrored",
      "--batch-size", "3"])
main(["encode", f"{root}/model", f"{root}/texts.txt", f"{root}/mirrored8.npy", "--strategy", "mirrored",
      "--batch-size", "3", "--dim", "8"])
main(["search", "build", f"{root}/model", f"{root}/texts.txt", f"{root}/index", "--strategy", "mirrored",
      "--batch-size", "3"])
strategy = get_strategy("mirrored")
texts = open(f"{root}/texts.txt", encoding="utf-8").read().splitlines()
scorer = PairScorer.load(f"{root}/scorer", strategy=strategy)
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "mirrored_variables": type(SentenceEncoder.load(f"{root}/model", strategy=strategy).model.weights[0]).__name__,
    "scores": scorer.similarity(texts, texts[::-1], batch_size=3).tolist(),
}))
"""


@pytest.mark.slow
def test_vectors_encoded_on_two_devices_are_one_devices(tmp_path):
    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "model", config, pooling="last-avg")
    make_model_dir(tmp_path / "scorer", config, kind="interaction")
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    # A process: the two logical CPU devices are made when cosent_tf is imported, and this one has one.
    done = subprocess.run(
        [sys.executable, "-c", MIRRORED, str(tmp_path)],
        env={**os.environ, "COSENT_TF_CPU_DEVICES": "2", "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["replicas"] == 2 and report["mirrored_variables"] == "MirroredVariable"
    # The console says how many devices encode, once per command.
    assert done.stderr.count("encoding on 2 devices (CPU:0, CPU:1), each a share of every batch of 3 texts") == 3

    encoder = SentenceEncoder.load(tmp_path / "model")
    one_device = encoder.encode(TEXTS, batch_size=3)
    np.testing.assert_allclose(np.load(tmp_path / "mirrored.npy"), one_device, atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "mirrored8.npy"), encoder.encode(TEXTS, dim=8), atol=1e-5)
    np.testing.assert_allclose(VectorIndex.load(tmp_path / "index").vectors, one_device, atol=1e-5)
    scores = PairScorer.load(tmp_path / "scorer").similarity(TEXTS, TEXTS[::-1])
    np.testing.assert_allclose(report["scores"], scores, atol=1e-5)


@pytest.mark.slow
def test_one_device_found_by_mirrored_encodes_as_default(tmp_path, monkeypatch, capsys):
    from cosent_tf.cli import main
    from cosent_tf.training import distribute

    make_model_dir(tmp_path / "model", write_config(tmp_path / "config.json"), pooling="last-avg")
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    # In this process, which has the one CPU device (no COSENT_TF_CPU_DEVICES): the strategy is
    # made afresh, as in a process of its own, since it warns when it is made and is kept after.
    assert len(tf.config.list_logical_devices("CPU")) == 1
    monkeypatch.setattr(distribute, "_made", {})
    main(
        ["encode", str(tmp_path / "model"), str(tmp_path / "texts.txt"), str(tmp_path / "v.npy")]
        + ["--strategy", "mirrored"]
    )
    err = capsys.readouterr().err
    assert "--strategy mirrored found one device" in err and "encoding on 1 device (CPU:0)" in err
    np.testing.assert_allclose(
        np.load(tmp_path / "v.npy"), SentenceEncoder.load(tmp_path / "model").encode(TEXTS), atol=1e-6
    )


def test_the_onnx_runtime_takes_no_strategy(tmp_path):
    from cosent_tf.cli import main

    (tmp_path / "t.txt").write_text("你好\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--strategy mirrored shares the batches among TensorFlow's devices; with"):
        main(
            ["encode", str(tmp_path / "export"), str(tmp_path / "t.txt"), str(tmp_path / "v.npy")]
            + ["--runtime", "onnx", "--strategy", "mirrored"]
        )
