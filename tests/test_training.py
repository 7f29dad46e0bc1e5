import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import DataError
from cosent_tf.training import RunConfig, main, train_feature_model

from conftest import ROOT, write_config

CHARACTERS = "我你他她们是的不了在有人这中大为上个国和地到以说时要就出会可也"


def write_tiny_task(folder, task, seed=0, pairs=(48, 24, 24), scores=False):
    """A task whose label is how many characters the two sentences share (learnable)."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder / task, exist_ok=True)
    for split, count in zip(("train", "valid", "test"), pairs):
        lines = []
        for _ in range(count):
            first = "".join(rng.choice(list(CHARACTERS), 6))
            shared = int(rng.integers(0, 6))
            second = first[:shared] + "".join(rng.choice(list(CHARACTERS), 6 - shared))
            label = shared if scores else int(shared >= 3)
            lines.append(f"{first}\t{second}\t{label}")
        (folder / task / f"{task}.{split}.data").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def tiny_setup(tmp_path):
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARACTERS)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = write_config(tmp_path / "config.json", vocab_size=len(vocab), hidden=16, layers=1)
    write_tiny_task(tmp_path / "data", "BQ")
    write_tiny_task(tmp_path / "data", "STS-B", seed=1, scores=True)
    return tmp_path, ["--data-dir", str(tmp_path / "data"), "--config", config,
                      "--vocab", str(tmp_path / "vocab.txt"), "--batch-size", "8", "--lr", "1e-3"]


@pytest.mark.parametrize("loss,task", [("cosent", "BQ"), ("sbert", "STS-B"), ("mse", "STS-B"),
                                       ("contrastive", "BQ")])
def test_every_feature_loss_trains_end_to_end(loss, task, tiny_setup):
    tmp_path, options = tiny_setup
    out = tmp_path / f"run-{loss}"
    metrics = main([task, "--loss", loss, "--epochs", "2", "--output-dir", str(out)] + options)
    assert sorted(os.listdir(out)) == ["best.weights.h5", "config.json", "history.json", "metrics.json"]
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test"]["spearman"] == pytest.approx(metrics["test"]["spearman"])
    assert -1 <= saved["test"]["spearman"] <= 1 and saved["best_epoch"] in (1, 2)
    history = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2]
    assert saved["valid"]["spearman"] == max(h["spearman"] for h in history)
    assert json.loads((out / "config.json").read_text())["loss"] == loss


def test_same_seed_same_result(tiny_setup):
    tmp_path, options = tiny_setup
    first = main(["BQ", "--epochs", "1", "--output-dir", str(tmp_path / "a")] + options)
    second = main(["BQ", "--epochs", "1", "--output-dir", str(tmp_path / "b")] + options)
    assert first["test"] == second["test"]


def test_missing_train_split_is_named(tiny_setup):
    tmp_path, _ = tiny_setup
    (tmp_path / "data" / "BQ" / "BQ.train.data").unlink()
    cfg = RunConfig(task="BQ", data_dir=str(tmp_path / "data"), config=str(tmp_path / "config.json"),
                    vocab=str(tmp_path / "vocab.txt"), output_dir=str(tmp_path / "run"))
    with pytest.raises(DataError, match=r"BQ/BQ.train.data: the BQ train split is not here"):
        train_feature_model(cfg)


def test_script_runs_as_a_command(tiny_setup):
    tmp_path, options = tiny_setup
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", "--epochs", "1",
         "--max-train-pairs", "16", "--output-dir", str(tmp_path / "cli")] + options,
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(last) == {"valid", "test", "best_epoch", "wall_seconds"}
    assert json.loads((tmp_path / "cli" / "metrics.json").read_text())["train_pairs"] == 16


def test_mixed_bfloat16_training_runs(tiny_setup):
    tmp_path, options = tiny_setup
    metrics = main(["BQ", "--epochs", "1", "--precision", "bf16", "--output-dir", str(tmp_path / "bf16")] + options)
    assert np.isfinite(metrics["test"]["spearman"])
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["precision"] == "bf16"


@pytest.mark.parametrize("as_prefix", [False, True], ids=["folder", "prefix"])
def test_trains_from_a_checkpoint_with_its_config_and_vocab(tiny_setup, as_prefix):
    from cosent_tf import build_encoder, save_checkpoint

    tmp_path, _ = tiny_setup
    config, vocab = str(tmp_path / "config.json"), str(tmp_path / "vocab.txt")
    save_checkpoint(build_encoder(config), tmp_path / "ckpt", config, vocab_path=vocab)
    checkpoint = str(tmp_path / "ckpt" / "bert_model.ckpt") if as_prefix else str(tmp_path / "ckpt")
    main(["BQ", "--epochs", "1", "--data-dir", str(tmp_path / "data"), "--checkpoint", checkpoint,
          "--batch-size", "8", "--output-dir", str(tmp_path / "from-ckpt")])
    used = json.loads((tmp_path / "from-ckpt" / "config.json").read_text())
    assert used["config"] == str(tmp_path / "ckpt" / "bert_config.json")
    assert used["vocab"] == str(tmp_path / "ckpt" / "vocab.txt")
