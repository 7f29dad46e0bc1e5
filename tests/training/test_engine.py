import csv
import json
import logging
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from cosent_tf import (
    ConfigError,
    DataError,
    PairScorer,
    SentenceEncoder,
    build_encoder,
    read_senteval,
    save_checkpoint,
    training,
)
from cosent_tf.backend import TENSORFLOW_STARTUP_LINES
from cosent_tf.cli import train_main
from cosent_tf.data.benchmarks import nli_files
from cosent_tf.io import folder_lock
from cosent_tf.optimizers import build_optimizer
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import train
from cosent_tf.training.run_data import load_run_data
from cosent_tf.training.run_folder import RUN_MARKER, RUN_OUTPUTS
from tests.helpers import CHARACTERS, ROOT, make_tiny_setup, run_until, tiny_pairs, write_config, write_tiny_data

RUN_FILES = [
    ".cosent-run",
    ".lock",
    "best.weights.h5",
    "config.json",
    "metrics.json",
    "model",
    "test_scores.npz",
    "valid_curve.png",
    "valid_metrics.csv",
]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


SCRIPTS = [
    ("cosent.py", "BQ"),
    ("cosent.py", "STS-B", "--loss", "mse"),
    ("cosent.py", "BQ", "--loss", "contrastive", "--epsilon", "0.2"),
    ("sbert.py", "STS-B"),
    ("cosent_nli.py",),
    ("sbert_nli.py",),
    ("interact.py", "BQ"),
    ("interact_cosent.py", "PAWSX"),
]


# What each script hands the engine: (kind, loss, task fixed by the script).
SCRIPT_ENTRIES = {
    "cosent.py": ("feature", "cosent", None),
    "sbert.py": ("feature", "sbert", None),
    "cosent_nli.py": ("feature", "cosent", "NLI"),
    "sbert_nli.py": ("feature", "sbert", "NLI"),
    "interact.py": ("interaction", "ce", None),
    "interact_cosent.py": ("interaction", "cosent", None),
}


@pytest.mark.parametrize("script", sorted(SCRIPT_ENTRIES))
def test_each_script_hands_the_engine_its_kind_loss_and_task(script, monkeypatch):
    import runpy

    from cosent_tf.experiments import scripts

    called = {}
    monkeypatch.setattr(
        scripts,
        "train_main",
        lambda argv=None, kind=None, loss=None, task=None: called.update(kind=kind, loss=loss, task=task),
    )
    runpy.run_path(os.path.join(ROOT, "scripts", script), run_name="__main__")
    assert (called["kind"], called["loss"], called["task"]) == SCRIPT_ENTRIES[script]


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=[pytest.mark.slow] if c == SCRIPTS[0] else []) for c in SCRIPTS],
    ids=[" ".join(c) for c in SCRIPTS],
)
def test_every_script_runs_end_to_end(command, tiny_setup):
    """The first one runs as a process (the scripts' entry point), the others in this one."""
    tmp_path, options = tiny_setup
    out = tmp_path / "run"
    extra = ["--steps-per-epoch", "3", "--max-eval-pairs", "12"] if command[0].endswith("_nli.py") else []
    argv = [*command[1:], "--epochs", "2", "--output-dir", str(out), *options, *extra]
    if command == SCRIPTS[0]:
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", command[0]), *argv],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        kind, loss, task = SCRIPT_ENTRIES[command[0]]
        train_main(argv, kind=kind, loss=loss, task=task)
    assert sorted(os.listdir(out)) == RUN_FILES  # the backup is gone once the run has finished
    metrics = json.loads((out / "metrics.json").read_text())
    assert -1 <= metrics["test"]["spearman"] <= 1 and metrics["best_epoch"] in (1, 2)
    assert metrics["comparable"] is True
    task = metrics["task"]
    if task == "NLI":
        assert sorted(metrics["tasks"]) == ["ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"]
        expected = np.mean([m["test"]["spearman"] for m in metrics["tasks"].values()])
        assert metrics["test"]["spearman"] == pytest.approx(expected)
        assert metrics["train_pairs"] == 40
    if task in ("BQ", "PAWSX"):
        assert 0 <= metrics["test"]["accuracy"] <= 1 and "threshold" in metrics["test"]
    if task == "STS-B":
        assert "accuracy" not in metrics["test"]
    rows = read_csv(out / "valid_metrics.csv")
    assert [(r["epoch"], r["end_of_epoch"]) for r in rows] == [("1", "True"), ("2", "True")]
    best_row = rows[metrics["best_epoch"] - 1]
    assert float(best_row["spearman"]) == pytest.approx(max(float(r["spearman"]) for r in rows))
    with open(out / "valid_curve.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    scores = np.load(out / "test_scores.npz")
    for name, result_of_task in metrics["tasks"].items():  # test Spearman and Pearson of the saved scores
        saved, labels = scores[f"{name}.scores"], scores[f"{name}.labels"]
        assert len(saved) > 0 and result_of_task["test"]["pearson"] == pytest.approx(stats.pearsonr(saved, labels)[0])
        assert result_of_task["test"]["spearman"] == pytest.approx(stats.spearmanr(saved, labels).correlation)
    if command == SCRIPTS[0]:  # the process printed the final metrics, and nothing else, on stdout
        assert json.loads(result.stdout)["test"] == metrics["test"] and result.stdout.count("\n") == 1
    if task != "NLI":  # the model folder reproduces the run's test scores and carries its threshold
        matcher = (PairScorer if metrics["kind"] == "interaction" else SentenceEncoder).load(out / "model")
        test = read_senteval(tmp_path / "data" / "senteval_cn" / task / f"{task}.test.data")
        np.testing.assert_allclose(matcher.similarity(test.texts_a, test.texts_b), scores[f"{task}.scores"], atol=1e-5)
        assert matcher.threshold == metrics["test"].get("threshold")


def test_same_seed_same_result_and_periodic_validation(tiny_setup):
    tmp_path, options = tiny_setup
    first = train_main(["BQ", "--epochs", "1", "--eval-every", "2", "--output-dir", str(tmp_path / "a")] + options)
    second = train_main(["BQ", "--epochs", "1", "--output-dir", str(tmp_path / "b")] + options)
    assert first["test"] == second["test"]
    rows = read_csv(tmp_path / "a" / "valid_metrics.csv")
    # 48 pairs / 8 = 6 steps: in-epoch validations at steps 2 and 4, then the epoch end at 6.
    assert [(r["step"], r["end_of_epoch"]) for r in rows] == [("2", "False"), ("4", "False"), ("6", "True")]


def tiny_run_config(tmp_path, task):
    """A run of ``task`` on tiny_setup's data, config and vocabulary, into tmp_path/run."""
    return RunConfig(
        task=task,
        data_dir=str(tmp_path / "data"),
        config=str(tmp_path / "config.json"),
        vocab=str(tmp_path / "vocab.txt"),
        output_dir=str(tmp_path / "run"),
    )


def test_missing_train_split_is_named_unless_carving_from_valid(tiny_setup):
    tmp_path, options = tiny_setup
    (tmp_path / "data" / "senteval_cn" / "LCQMC" / "LCQMC.train.data").unlink()
    cfg = tiny_run_config(tmp_path, "LCQMC")
    with pytest.raises(DataError, match=r"LCQMC/LCQMC.train.data: the LCQMC train split is not here"):
        train(cfg)
    metrics = train_main(
        ["LCQMC", "--epochs", "1", "--train-from-valid", "0.5", "--output-dir", str(tmp_path / "carved")] + options
    )
    assert metrics["comparable"] is False and "NOT comparable" in metrics["notes"][0]
    assert metrics["train_pairs"] == 12


def test_a_run_is_refused_before_it_reads_anything_where_weights_count_as_frozen(tiny_setup, monkeypatch):
    """TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 makes TensorFlow keep a fused Dense's first weights
    (tests/test_backend.py shows it); a run says so at once, with no run folder made."""
    tmp_path, _ = tiny_setup
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "1")  # read here only: nothing runs a matmul
    cfg = tiny_run_config(tmp_path, "BQ")
    with pytest.raises(ConfigError, match="TF_ONEDNN_ASSUME_FROZEN_WEIGHTS is set in this process"):
        train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("as_prefix", [False, True], ids=["folder", "prefix"])
def test_trains_from_a_checkpoint_with_its_config_and_vocab(tiny_setup, as_prefix):
    tmp_path, _ = tiny_setup
    config, vocab = str(tmp_path / "config.json"), str(tmp_path / "vocab.txt")
    save_checkpoint(build_encoder(config), tmp_path / "ckpt", config, vocab_path=vocab)
    checkpoint = str(tmp_path / "ckpt" / "bert_model.ckpt") if as_prefix else str(tmp_path / "ckpt")
    train_main(
        [
            "BQ",
            "--epochs",
            "1",
            "--data-dir",
            str(tmp_path / "data"),
            "--checkpoint",
            checkpoint,
            "--batch-size",
            "8",
            "--output-dir",
            str(tmp_path / "from-ckpt"),
        ]
    )
    used = json.loads((tmp_path / "from-ckpt" / "config.json").read_text())
    assert used["config"] == str(tmp_path / "ckpt" / "bert_config.json")
    assert used["vocab"] == str(tmp_path / "ckpt" / "vocab.txt")
    assert json.loads((tmp_path / "from-ckpt" / "metrics.json").read_text())["random_weights"] is False
    source = json.loads((tmp_path / "from-ckpt" / "model" / "cosent_model.json").read_text())["source"]
    assert (source["random_weights"], source["checkpoint"]) == (False, os.path.abspath(checkpoint))


def test_a_run_from_random_weights_says_so_and_so_does_its_model(tiny_setup, caplog, capsys):
    tmp_path, options = tiny_setup
    train_main(["BQ", "--epochs", "1", "--output-dir", str(tmp_path / "random")] + options)
    warnings = capsys.readouterr().err.splitlines()
    assert warnings[0].startswith("NOTE: no --checkpoint: the model starts from random weights")
    assert json.loads((tmp_path / "random" / "metrics.json").read_text())["random_weights"] is True
    source = json.loads((tmp_path / "random" / "model" / "cosent_model.json").read_text())["source"]
    assert (source["random_weights"], source["checkpoint"]) == (True, None)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        SentenceEncoder.load(str(tmp_path / "random" / "model"))
    assert "this model was trained from random weights (no --checkpoint)" in caplog.text
    # fine-tuning that model keeps saying so
    model_dir, data_dir_and_batching = str(tmp_path / "random" / "model"), options[:2] + options[6:]
    train_main(
        ["BQ", "--epochs", "1", "--checkpoint", model_dir, "--output-dir", str(tmp_path / "again")]
        + data_dir_and_batching
    )
    assert capsys.readouterr().err.startswith("NOTE: the --checkpoint model folder was itself trained from random")
    assert json.loads((tmp_path / "again" / "metrics.json").read_text())["random_weights"] is True


@pytest.mark.parametrize(
    "change, message",
    [
        ({"--data-dir": "nowhere"}, "nowhere (from CWD): data folder not found; pass --data-dir"),
        ({"--vocab": "missing.txt"}, "missing.txt (from CWD): vocabulary not found; pass --vocab"),
        ({"--config": "missing.json"}, "missing.json (from CWD): cannot read the model config"),
        ({"--checkpoint": "checkpoints/mine/absent"}, "checkpoints/mine/absent (from CWD): checkpoint not found"),
        ({"--checkpoint": "hfl/absent"}, "hfl/absent (from CWD): no such folder here, and it reads as a Hugging Face"),
    ],
)
def test_missing_inputs_stop_the_run_before_any_data_is_read(change, message, tiny_setup, monkeypatch):
    tmp_path, options = tiny_setup
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(training, "load_run_data", lambda cfg: pytest.fail("the data was read"))
    arguments = list(options)
    for flag, value in change.items():
        if flag in arguments:
            arguments[arguments.index(flag) + 1] = value
        else:
            arguments += [flag, value]
    with pytest.raises(SystemExit) as stopped:
        train_main(["BQ", "--output-dir", "run"] + arguments)
    assert message.replace("CWD", str(tmp_path)) in str(stopped.value)
    assert not (tmp_path / "run").exists()


def test_the_default_vocabulary_stays_the_shared_one_wherever_data_dir_points(tmp_path, monkeypatch):
    (tmp_path / "senteval_cn").mkdir()
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "bert-base-chinese-vocab.txt").write_text("[PAD]\n")
    wanted = str(tmp_path / "vocab" / "bert-base-chinese-vocab.txt")
    assert RunConfig(data_dir=str(tmp_path)).resolved().vocab == wanted
    assert RunConfig(data_dir=str(tmp_path / "senteval_cn")).resolved().vocab == wanted
    # other pair files: the default data root's vocabulary
    monkeypatch.setattr(RunConfig, "data_dir", str(tmp_path))
    (tmp_path / "mine").mkdir()
    assert RunConfig(data_dir=str(tmp_path / "mine")).resolved().vocab == wanted
    monkeypatch.setattr(RunConfig, "data_dir", str(tmp_path / "elsewhere"))  # none exists: the run's checks name this
    assert RunConfig(data_dir=str(tmp_path / "mine")).resolved().vocab == str(
        tmp_path / "mine" / "vocab" / "bert-base-chinese-vocab.txt"
    )


def test_a_bf16_run_leaves_the_process_as_it_found_it(tiny_setup):
    """train() sets the dtype policy and seeds every generator; afterwards both are as before."""
    import random

    from cosent_tf.backend import keras, tf

    tmp_path, options = tiny_setup
    random.seed(5), np.random.seed(5), tf.random.set_seed(5)
    expected = (random.random(), np.random.random(), float(tf.random.uniform([])))
    random.seed(5), np.random.seed(5), tf.random.set_seed(5)
    metrics = train_main(
        ["BQ", "--epochs", "1", "--precision", "bf16", "--output-dir", str(tmp_path / "bf16")] + options
    )
    assert np.isfinite(metrics["test"]["spearman"])
    assert (random.random(), np.random.random(), float(tf.random.uniform([]))) == expected
    assert keras.mixed_precision.global_policy().name == "float32"
    encoder = build_encoder(options[options.index("--config") + 1])
    assert {weight.dtype for weight in encoder.weights} == {tf.float32}
    assert encoder.get_layer("Embedding-Token").compute_dtype == "float32"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(the tiny set-up, the resume tests' command, its uninterrupted run's folder), made once."""
    tmp_path, options = make_tiny_setup(tmp_path_factory.mktemp("resume"))
    # 2 epochs of 12 steps; validation every 3 steps; state saved every 3 steps (and on SIGTERM); AdamW
    # with a warm-up over the first 12 steps then linear decay, so a stop at step 6 is mid-warm-up.
    command = [
        sys.executable,
        os.path.join(ROOT, "scripts", "cosent.py"),
        "BQ",
        "--epochs",
        "2",
        "--steps-per-epoch",
        "12",
        "--eval-every",
        "3",
        "--backup-every",
        "3",
        "--weight-decay",
        "0.01",
        "--warmup",
        "0.5",
        "--schedule",
        "linear",
        *options,
    ]
    reference = subprocess.run(
        command + ["--output-dir", str(tmp_path / "whole")], capture_output=True, text=True, timeout=600
    )
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert not TENSORFLOW_STARTUP_LINES.search(reference.stderr), reference.stderr[:1000]
    return tmp_path, command


@pytest.mark.slow
@pytest.mark.parametrize(
    "send, when",
    [
        (signal.SIGKILL, "step 6 valid"),
        (signal.SIGTERM, "step 6 valid"),
        (signal.SIGINT, "step 6 valid"),
        (signal.SIGTERM, "epoch 1 valid"),
    ],
    ids=["SIGKILL", "SIGTERM", "SIGINT", "SIGTERM at the epoch's end"],
)
def test_interrupted_run_resumes_mid_epoch_with_the_same_result(send, when, uninterrupted):
    tmp_path, command = uninterrupted
    out = tmp_path / f"interrupted-{send.name}-{when.split()[0]}"
    # By the time step 6's validation is printed, step 3's state is on disk.
    code, stderr = run_until(command + ["--output-dir", str(out)], when, send)
    assert not (out / "metrics.json").exists()
    if send == signal.SIGKILL:
        assert code == -signal.SIGKILL
        saved_at = None
    else:  # 143 for SIGTERM, 130 for SIGINT, and the step the state was saved after
        assert code == 128 + send and "Traceback" not in stderr
        saved_at = int(re.search(rf"{send.name} received: training state saved after step (\d+)", stderr).group(1))
        assert saved_at >= (12 if when.startswith("epoch") else 6)

    resumed = subprocess.run(command + ["--output-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step = int(re.search(r"resumed at step (\d+)", resumed.stderr).group(1))
    assert 3 <= step < 24 and step % 12 != 0 or send != signal.SIGKILL
    assert saved_at in (None, step)
    whole_rows, rows = read_csv(tmp_path / "whole" / "valid_metrics.csv"), read_csv(out / "valid_metrics.csv")
    assert [(r["epoch"], r["step"]) for r in rows] == [(r["epoch"], r["step"]) for r in whole_rows]
    for got, expected in zip(rows, whole_rows):
        assert float(got["spearman"]) == pytest.approx(float(expected["spearman"]), abs=1e-6)
    whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    again = json.loads((out / "metrics.json").read_text())
    assert again["best_epoch"] == whole["best_epoch"]
    assert again["test"]["spearman"] == pytest.approx(whole["test"]["spearman"], abs=1e-6)
    assert not (out / "backup").exists()


@pytest.mark.slow
def test_a_run_in_micro_batches_with_dropout_resumes_to_the_uninterrupted_result(tiny_setup):
    tmp_path, options = tiny_setup
    # dropout on: a resumed run must draw the masks an uninterrupted one draws (keyed by the step)
    dropout = write_config(
        tmp_path / "dropout.json", vocab_size=135, hidden=16, layers=1, max_position=256, hidden_dropout_prob=0.1
    )
    command = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", *options, "--config", dropout]
    command += ["--epochs", "2", "--eval-every", "2", "--backup-every", "2", "--micro-batch-size", "3"]
    whole = subprocess.run(command + ["--output-dir", str(tmp_path / "whole")], capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert "the gradient of each batch is computed 3 pairs at a time" in whole.stderr
    out = tmp_path / "killed"  # 6 steps an epoch: by the time step 8 is validated, step 6 is saved
    code, _ = run_until(command + ["--output-dir", str(out)], "step 8 valid", signal.SIGKILL)
    assert code == -signal.SIGKILL and not (out / "metrics.json").exists()
    resumed = subprocess.run(command + ["--output-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert int(re.search(r"resumed at step (\d+)", resumed.stderr).group(1)) in (6, 8)
    expected, again = read_csv(tmp_path / "whole" / "valid_metrics.csv"), read_csv(out / "valid_metrics.csv")
    assert [float(r["spearman"]) for r in again] == pytest.approx([float(r["spearman"]) for r in expected], abs=1e-6)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["spearman"] == pytest.approx(
        json.loads((tmp_path / "whole" / "metrics.json").read_text())["test"]["spearman"], abs=1e-6
    )


@pytest.mark.slow
def test_a_run_killed_after_training_finishes_without_training_again(uninterrupted):
    tmp_path, command = uninterrupted  # 2 epochs of 12 steps; "whole" is the same run, uninterrupted
    out = tmp_path / "killed"
    code, _ = run_until(command + ["--output-dir", str(out)], "training done", signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert (out / "backup").is_dir() and not (out / "metrics.json").exists()  # the state outlives fit
    rerun = subprocess.run(command + ["--output-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed at step 24" in rerun.stderr and "epoch 1 valid" not in rerun.stderr  # no epoch trained again
    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["best_epoch"] == expected["best_epoch"] and metrics["steps"] == 24
    assert metrics["test"]["spearman"] == pytest.approx(expected["test"]["spearman"], abs=1e-6)
    assert sorted(os.listdir(out)) == RUN_FILES


def test_output_folder_rules_keep_finished_runs_and_other_files(tiny_setup):
    tmp_path, options = tiny_setup
    out = tmp_path / "run"
    first = train_main(["BQ", "--epochs", "1", "--output-dir", str(out)] + options)
    finished = {name: (out / name).read_text() for name in ("config.json", "metrics.json")}

    def refused(argv, message):
        with pytest.raises(SystemExit, match=message):
            train_main(argv)

    refused(
        ["BQ", "--epochs", "1", "--output-dir", str(out)] + options,
        r"holds a finished run \(metrics.json\); nothing was written: pass --overwrite",
    )
    refused(
        ["BQ", "--epochs", "1", "--output-dir", str(out)] + options + ["--data-dir", str(tmp_path / "nowhere")],
        "nowhere: data folder not found",
    )  # inputs are read before the folder is touched
    assert {name: (out / name).read_text() for name in finished} == finished

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    refused(
        ["BQ", "--output-dir", str(mine)] + options,
        r"mine: already exists and is not a cosent-tf training run \(it holds notes.txt\)",
    )
    assert os.listdir(mine) == ["notes.txt"]  # not even a lock file

    (tmp_path / "a-file").write_text("keep me")
    refused(["BQ", "--output-dir", str(tmp_path / "a-file")] + options, "a-file: exists and is not a folder")
    assert (tmp_path / "a-file").read_text() == "keep me"

    with folder_lock(tmp_path / "busy"):
        refused(
            ["BQ", "--output-dir", str(tmp_path / "busy")] + options,
            f"busy: in use by another training run \\(process {os.getpid()}\\)",
        )

    refused(
        [
            "BQ",
            "--checkpoint",
            str(out / "model"),
            "--data-dir",
            str(tmp_path / "data"),
            "--batch-size",
            "8",
            "--output-dir",
            str(out),
            "--overwrite",
        ],
        "holds the run's input",
    )
    again = train_main(["BQ", "--epochs", "1", "--seed", "7", "--output-dir", str(out), "--overwrite"] + options)
    assert json.loads((out / "config.json").read_text())["seed"] == 7
    assert json.loads((out / "metrics.json").read_text())["test"] == again["test"] != first["test"]


def test_an_unfinished_run_resumes_only_with_its_own_settings(tiny_setup):
    tmp_path, options = tiny_setup
    out = tmp_path / "run"
    train_main(["BQ", "--epochs", "2", "--output-dir", str(out)] + options)
    (out / "metrics.json").unlink()  # as if stopped before the end, with training state saved
    (out / "backup").mkdir()
    (out / "backup" / "state").write_text("")
    saved = (out / "config.json").read_text()
    for extra, difference in [
        (["--lr", "5e-2"], "lr 0.001 there, 0.05 now"),
        (["--batch-size", "16"], "batch_size 8 there, 16 now"),
        (["--epochs", "1"], r"epochs 2 there, 1 now \(may only grow\)"),
        # the strategy may change (see test_distribute), but not while each replica ranks its own pairs
        (
            ["--per-replica-loss", "--strategy", "mirrored"],
            "global_batch_loss True there, False now; strategy 'default' there, 'mirrored' now",
        ),
    ]:
        with pytest.raises(
            SystemExit,
            match=f"holds an unfinished run with other settings \\({difference}\\); "
            "nothing was written: resume it with its own settings",
        ):
            train_main(["BQ", "--epochs", "2", "--output-dir", str(out)] + options + extra)
    assert (out / "config.json").read_text() == saved


@pytest.mark.slow
def test_script_reports_a_diverged_run_without_a_traceback(tiny_setup):
    tmp_path, options = tiny_setup
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "cosent.py"),
            "BQ",
            "--loss",
            "mse",
            "--epochs",
            "2",
            "--output-dir",
            str(tmp_path / "nan"),
            *options,
            "--lr",
            "1e30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "error: the training loss became nan at step" in result.stderr
    assert "Nothing was saved yet" in result.stderr and "Traceback" not in result.stderr


def test_maxlen_beyond_the_position_embeddings_stops_before_training(tiny_setup):
    tmp_path, options = tiny_setup
    with pytest.raises(SystemExit, match="maxlen 300 is longer than the model's 256 position embeddings"):
        train_main(["BQ", "--maxlen", "300", "--output-dir", str(tmp_path / "long")] + options)
    assert not (tmp_path / "long" / "backup").exists()


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--batch-size", "0", "must be at least 1, got 0"),
        ("--epochs", "0", "must be at least 1, got 0"),
        ("--max-train-pairs", "-5", "must be at least 1, got -5"),
        ("--lr", "0", "must be above 0, got 0"),
        ("--lr", "nan", "must be above 0, got nan"),
        ("--train-from-valid", "1.5", "must be above 0 and at most 1"),
        ("--maxlen", "two", "'two' is not an integer"),
        ("--eval-every", "-1", "must be at least 0, got -1"),
    ],
)
def test_numbers_from_the_command_line_are_checked(option, value, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        train_main(["BQ", option, value])
    assert stopped.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "split, message",
    [
        ("train", "all 48 pairs \\(after any sampling\\) have the label 1: CoSENT ranks pairs by their labels"),
        ("valid", "all 24 pairs \\(after any sampling\\) have the label 1: Spearman is undefined on them"),
    ],
)
def test_a_split_whose_labels_are_all_equal_is_refused(split, message, tiny_setup):
    tmp_path, options = tiny_setup
    path = tmp_path / "data" / "senteval_cn" / "BQ" / f"BQ.{split}.data"
    lines = [line.rsplit("\t", 1)[0] + "\t1" for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=f"BQ.{split}.data: {message}"):
        train_main(["BQ", "--output-dir", str(tmp_path / "run")] + options)
    assert not (tmp_path / "run").exists()


def test_sigint_while_reading_data_stops_without_a_traceback(tiny_setup, monkeypatch, capsys):
    tmp_path, options = tiny_setup

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "load_run_data", interrupted)
    with pytest.raises(SystemExit) as stopped:
        train_main(["BQ", "--output-dir", str(tmp_path / "run")] + options)
    assert stopped.value.code == 128 + signal.SIGINT
    assert "stopped: SIGINT received; run the same command again" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_nli_files_are_read_once_through_links_back_up_the_tree(tiny_setup):
    tmp_path, _ = tiny_setup
    data = tmp_path / "data"
    for link, target in [(data / "loop", "."), (data / "cnsd" / "again", "."), (data / "up", "..")]:
        os.symlink(target, link)
    assert nli_files(str(data)) == [str(data / "cnsd" / "cnsd-snli" / "dev.jsonl")]
    cfg = RunConfig(
        task="NLI", data_dir=str(data), config=str(tmp_path / "config.json"), vocab=str(tmp_path / "vocab.txt")
    ).resolved()
    train_pairs = load_run_data(cfg).train
    assert len(train_pairs) == 40


def test_strict_turns_a_skipped_line_into_an_error(tiny_setup):
    tmp_path, options = tiny_setup
    train = tmp_path / "data" / "senteval_cn" / "BQ" / "BQ.train.data"
    train.write_text(train.read_text(encoding="utf-8") + "only one field\n", encoding="utf-8")
    bad_line = len(train.read_text(encoding="utf-8").splitlines())
    with pytest.raises(SystemExit, match=f"BQ.train.data, line {bad_line}: without exactly 3 tab-separated fields"):
        train_main(["BQ", "--strict", "--epochs", "1", "--output-dir", str(tmp_path / "strict")] + options)


def write_own_files(folder, rng, count):
    """The same kind of pairs as a TSV (with a header), a CSV (quoted commas) and a JSONL file."""
    rows = tiny_pairs(rng, count, scores=False)
    rows = [(a + "，" if i % 5 == 0 else a, b, label) for i, (a, b, label) in enumerate(rows)]
    folder.mkdir(exist_ok=True)
    (folder / "pairs.tsv").write_text(
        "text_a\ttext_b\tlabel\n" + "".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows), encoding="utf-8"
    )
    with open(folder / "pairs.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["q1", "q2", "same"])
        writer.writerows(rows)
    (folder / "pairs.jsonl").write_text(
        "".join(
            json.dumps({"sentence1": a, "sentence2": b, "label": label}, ensure_ascii=False) + "\n"
            for a, b, label in rows
        ),
        encoding="utf-8",
    )
    return rows


def brute_force_retrieval(query_vectors, corpus_vectors, relevant):
    """Recall@1/5/10, MRR@10, nDCG@10 from a full similarity matrix and a stable sort."""
    order = np.argsort(-(query_vectors @ corpus_vectors.T), axis=1, kind="stable")
    recall = {k: [] for k in (1, 5, 10)}
    mrr, ndcg = [], []
    for ranking, wanted in zip(order, relevant):
        hits = [int(i) in wanted for i in ranking[:10]]
        for k in recall:
            recall[k].append(sum(hits[:k]) / len(wanted))
        mrr.append(next((1 / (r + 1) for r, hit in enumerate(hits) if hit), 0.0))
        dcg = sum(1 / np.log2(r + 2) for r, hit in enumerate(hits) if hit)
        ndcg.append(dcg / sum(1 / np.log2(r + 2) for r in range(min(len(wanted), 10))))
    return {**{f"recall@{k}": np.mean(v) for k, v in recall.items()}, "mrr@10": np.mean(mrr), "ndcg@10": np.mean(ndcg)}


@pytest.mark.slow
def test_own_files_train_from_the_command_line_resume_and_evaluate(tiny_setup):
    from cosent_tf.evaluation import pair_retrieval_sets

    tmp_path, options = tiny_setup
    options = [o for i, o in enumerate(options) if "--data-dir" not in options[max(i - 1, 0) : i + 1]]
    rng = np.random.default_rng(5)
    write_own_files(tmp_path / "train", rng, 96)
    test_rows = write_own_files(tmp_path / "test", rng, 40)
    cli = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    fields = {"csv": ["--text-a-field", "q1", "--text-b-field", "q2", "--label-field", "same"], "jsonl": [], "tsv": []}
    results = {}
    for extension, extra in fields.items():
        out = tmp_path / f"run-{extension}"
        command = [
            cli,
            "train",
            "--train",
            str(tmp_path / "train" / f"pairs.{extension}"),
            "--test",
            str(tmp_path / "test" / f"pairs.{extension}"),
            "--epochs",
            "2",
            "--eval-every",
            "3",
            "--backup-every",
            "3",
            *extra,
            *options,
            "--output-dir",
            str(out),
        ]
        if extension == "tsv":  # killed mid-run, then resumed by the same command
            code, _ = run_until(command, "step 6 valid", signal.SIGKILL)
            assert code == -signal.SIGKILL and not (out / "metrics.json").exists()
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert extension != "tsv" or "resumed at step" in result.stderr
        assert "no --valid file: a seeded 10% of" in result.stderr  # the held-out valid is said
        results[extension] = json.loads((out / "metrics.json").read_text())

    # The three formats hold the same pairs, so the runs are the same run.
    def flat(test):
        return {**{k: v for k, v in test.items() if k != "retrieval"}, **test["retrieval"]}

    assert flat(results["csv"]["test"]) == pytest.approx(flat(results["tsv"]["test"]))
    assert flat(results["jsonl"]["test"]) == pytest.approx(flat(results["tsv"]["test"]))
    metrics = results["tsv"]
    assert metrics["train_pairs"] == 96 - 10 and "accuracy" in metrics["test"] and not metrics["comparable"]
    assert metrics["notes"][0].startswith("no --valid file: a seeded 10% of")

    # evaluate the model folder: the same test metrics, and retrieval as brute force on the same vectors
    model_dir = tmp_path / "run-tsv" / "model"
    result = subprocess.run(
        [
            cli,
            "evaluate",
            str(model_dir),
            str(tmp_path / "test" / "pairs.tsv"),
            "--retrieval",
            "--output",
            str(tmp_path / "eval"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    for key in ("spearman", "pearson", "accuracy", "threshold"):
        assert evaluated[key] == pytest.approx(metrics["test"][key], abs=1e-6)
    assert evaluated["retrieval"] == pytest.approx(metrics["test"]["retrieval"], abs=1e-6)
    encoder = SentenceEncoder.load(model_dir)
    texts_a = [a for a, _, _ in test_rows]
    queries, corpus, relevant = pair_retrieval_sets(
        texts_a, [b for _, b, _ in test_rows], [label == 1 for _, _, label in test_rows]
    )
    expected = brute_force_retrieval(encoder.encode(queries), encoder.encode(corpus), relevant)
    for key, value in expected.items():
        assert evaluated["retrieval"][key] == pytest.approx(value, abs=1e-6), key
    assert (evaluated["retrieval"]["queries"], evaluated["retrieval"]["corpus"]) == (len(queries), len(corpus))
    scored = (tmp_path / "eval.tsv").read_text(encoding="utf-8").splitlines()
    assert len(scored) == 40 and scored[0].split("\t")[:3] == [str(v) for v in test_rows[0]]


def test_own_files_that_cannot_train_are_refused_before_anything_is_written(tiny_setup):
    from cosent_tf.cli import main as cosent_tf

    tmp_path, options = tiny_setup
    options = [o for i, o in enumerate(options) if "--data-dir" not in options[max(i - 1, 0) : i + 1]]
    rng = np.random.default_rng(2)
    rows = tiny_pairs(rng, 40, scores=False)
    (tmp_path / "train.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows), encoding="utf-8")
    (tmp_path / "graded.tsv").write_text("".join(f"{a}\t{b}\t{y * 2.5}\n" for a, b, y in rows), encoding="utf-8")
    (tmp_path / "words.tsv").write_text("".join(f"{a}\t{b}\tneutral\n" for a, b, y in rows), encoding="utf-8")
    (tmp_path / "ones.tsv").write_text("".join(f"{a}\t{b}\t1\n" for a, b, y in rows), encoding="utf-8")
    out = tmp_path / "run"

    def refused(arguments, message):
        with pytest.raises(SystemExit, match=message):
            cosent_tf(["train", *arguments, "--epochs", "1", *options, "--output-dir", str(out)])
        assert not out.exists()

    refused(
        ["--train", str(tmp_path / "train.tsv"), "--valid", str(tmp_path / "graded.tsv")],
        r"graded.tsv: its labels are graded but those of the train file .*train.tsv are binary",
    )
    refused(
        ["--train", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "words.tsv")],
        r"words.tsv: its labels are nli but those of the train file .* are binary",
    )
    refused(
        ["--train", str(tmp_path / "ones.tsv"), "--valid", str(tmp_path / "train.tsv")],
        r"ones.tsv: all 40 pairs \(after any sampling\) have the label 1: there is nothing to rank.*"
        r"--allow-single-label",
    )
    refused(
        ["--train", str(tmp_path / "train.tsv"), "--kind", "interaction", "--loss", "mse"],
        r"unknown interaction loss 'mse'; choose one of ce, cosent",
    )
    metrics = cosent_tf(
        [
            "train",
            "--train",
            str(tmp_path / "ones.tsv"),
            "--valid",
            str(tmp_path / "train.tsv"),
            "--allow-single-label",
            "--epochs",
            "1",
            *options,
            "--output-dir",
            str(out),
        ]
    )
    assert metrics == 0 and (out / "metrics.json").exists()
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["task"] == "ones" and saved["notes"] == [
        "no --test file: the test metrics are the valid ones, measured on the data the best epoch (and the "
        "threshold) were chosen on, so they flatter the model"
    ]
    assert saved["test"]["spearman"] == saved["valid"]["spearman"]


# ---------------------------------------------------------------- runs that must learn

SYNONYMS = dict(zip(CHARACTERS[:15], CHARACTERS[15:30])) | dict(zip(CHARACTERS[15:30], CHARACTERS[:15]))


def synonym_pairs(rng, count, graded):
    """Pairs whose label is how many of 5 positions hold a character's synonym: no characters
    are shared, so an untrained encoder cannot tell them apart and a trained one can."""
    characters, rows = list(CHARACTERS[:30]), []
    for _ in range(count):
        first = "".join(rng.choice(characters, 5))
        same = set(rng.choice(5, int(rng.integers(0, 6)), replace=False).tolist())
        second = "".join(
            SYNONYMS[c] if i in same else rng.choice([o for o in characters if o not in (c, SYNONYMS[c])])
            for i, c in enumerate(first)
        )
        rows.append((first, second, len(same) if graded else int(len(same) >= 3)))
    return rows


def write_task(root, task, rows_of_split):
    os.makedirs(root / "senteval_cn" / task, exist_ok=True)
    for split, rows in rows_of_split.items():
        lines = "".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows)
        (root / "senteval_cn" / task / f"{task}.{split}.data").write_text(lines, encoding="utf-8")


@pytest.mark.parametrize("kind, task", [("feature", "STS-B"), ("interaction", "BQ")])
def test_training_learns_what_the_untrained_model_cannot(kind, task, tiny_setup):
    """A correct loss and wiring lift valid Spearman well above the same run left at
    initialisation (lr 1e-12); a loss of the wrong sign, or labels paired with the wrong
    pairs, cannot."""
    tmp_path, _ = tiny_setup
    rng = np.random.default_rng(0)
    if kind == "feature":  # no shared characters: only training finds the synonyms
        rows = {
            split: synonym_pairs(rng, n, task == "STS-B")
            for split, n in (("train", 512), ("valid", 128), ("test", 128))
        }
    else:  # a cross-encoder learns to count the characters the two texts share
        rows = {
            split: tiny_pairs(rng, n, scores=False) for split, n in (("train", 1024), ("valid", 128), ("test", 128))
        }
    write_task(tmp_path / "learn", task, rows)
    vocab_size = len((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
    config = write_config(
        tmp_path / "c64.json", vocab_size=vocab_size, hidden=64, layers=2, heads=2, intermediate=128, max_position=256
    )
    settings = dict(
        task=task,
        kind=kind,
        data_dir=str(tmp_path / "learn"),
        config=config,
        vocab=str(tmp_path / "vocab.txt"),
        batch_size=16,
        epochs=6,
    )
    untrained = train(RunConfig(lr=1e-12, output_dir=str(tmp_path / "untrained"), **settings))
    trained = train(RunConfig(lr=1e-3, output_dir=str(tmp_path / "trained"), **settings))
    for split in ("valid", "test"):  # measured here: feature 0.60 over 0.03, interaction 0.60 over -0.04 (valid)
        assert trained[split]["spearman"] > untrained[split]["spearman"] + 0.3, (split, trained, untrained)


# ---------------------------------------------------------------- options that reach the model


@pytest.fixture
def spy(monkeypatch):
    """Records what the engine fits: the Keras model, loss and labels, and the dataset options."""
    from cosent_tf.training import engine as training

    seen = {}
    original = training.Matcher.training_model

    def training_model(self, labels):
        seen["model"], seen["loss"], seen["labels"] = result = original(self, labels)
        seen["raw_labels"] = np.asarray(labels)
        return result

    def dataset_spy(name, function):
        def wrapped(*args, **kwargs):
            seen[name] = kwargs
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(training.Matcher, "training_model", training_model)
    monkeypatch.setattr(training, "pair_dataset", dataset_spy("pair_dataset", training.pair_dataset))
    monkeypatch.setattr(
        training, "interaction_dataset", dataset_spy("interaction_dataset", training.interaction_dataset)
    )
    return seen


def tiny_run(tiny_setup, name, **settings):
    tmp_path, _ = tiny_setup
    base = dict(
        data_dir=str(tmp_path / "data"),
        config=str(tmp_path / "config.json"),
        vocab=str(tmp_path / "vocab.txt"),
        batch_size=8,
        epochs=1,
        lr=1e-3,
        output_dir=str(tmp_path / name),
    )
    return train(RunConfig(**{**base, **settings}))


def test_loss_options_and_label_handling_reach_the_fitted_model(tiny_setup, spy):
    from cosent_tf.losses import CoSENTLoss, CosineMSELoss, SentenceBertSoftmaxLoss, ThresholdContrastiveLoss

    tiny_run(tiny_setup, "scale", task="BQ", scale=7.0)
    assert isinstance(spy["loss"], CoSENTLoss) and spy["loss"].scale == 7.0 and spy["loss"].global_batch
    tiny_run(tiny_setup, "per-replica", task="BQ", global_batch_loss=False)
    assert spy["loss"].global_batch is False
    assert spy["pair_dataset"]["group_by_length"] is True
    tiny_run(tiny_setup, "contrastive", task="STS-B", loss="contrastive", epsilon=0.3, group_by_length=False)
    assert isinstance(spy["loss"], ThresholdContrastiveLoss)
    assert (spy["loss"].epsilon, spy["loss"].positive_above) == (0.3, 2.5)
    assert spy["pair_dataset"]["group_by_length"] is False
    tiny_run(tiny_setup, "mse", task="STS-B", loss="mse")
    assert isinstance(spy["loss"], CosineMSELoss) and spy["loss"].max_label == 5.0
    tiny_run(tiny_setup, "sbert", task="STS-B", loss="sbert")  # STS-B scores become classes above 2.5
    assert isinstance(spy["loss"], SentenceBertSoftmaxLoss) and spy["model"].output_shape == (None, 2)
    np.testing.assert_array_equal(spy["labels"], (spy["raw_labels"] > 2.5).astype(np.float32))
    assert set(np.unique(spy["raw_labels"])) - {0.0, 1.0}  # the raw labels were graded
    tiny_run(tiny_setup, "ce", task="BQ", kind="interaction", loss="ce", group_by_length=False)
    assert spy["model"].output_shape == (None, 2) and spy["interaction_dataset"]["group_by_length"] is False


def test_precision_pooling_and_checkpoint_reach_the_model(tiny_setup, spy):
    tmp_path, _ = tiny_setup
    tiny_run(tiny_setup, "bf16", task="BQ", precision="bf16", pooling="last-avg")
    assert spy["model"].get_layer("Embedding-Token").dtype_policy.name == "mixed_bfloat16"
    assert spy["model"].get_layer("Pooling").mode == "last-avg"
    assert json.loads((tmp_path / "bf16" / "model" / "cosent_model.json").read_text())["pooling"] == "last-avg"
    tiny_run(tiny_setup, "f32", task="BQ")
    assert spy["model"].get_layer("Embedding-Token").dtype_policy.name == "float32"

    # A run from a checkpoint starts from its weights: with lr 1e-12 the trained model is the checkpoint.
    keras_seed_model = build_encoder(str(tmp_path / "config.json"))
    save_checkpoint(
        keras_seed_model, tmp_path / "ckpt", str(tmp_path / "config.json"), vocab_path=str(tmp_path / "vocab.txt")
    )
    tiny_run(tiny_setup, "from-ckpt", task="BQ", checkpoint=str(tmp_path / "ckpt"), config=None, vocab=None, lr=1e-12)
    texts = ["我们是", "他在这", "你"]
    from_checkpoint = SentenceEncoder.load(tmp_path / "from-ckpt" / "model").encode(texts, normalize=False)
    tokenizer = SentenceEncoder.load(tmp_path / "from-ckpt" / "model").tokenizer
    ids = [np.asarray(tokenizer.encode(t))[None] for t in texts]
    expected = np.concatenate([keras_seed_model([i, np.zeros_like(i)]).numpy() for i in ids])
    np.testing.assert_allclose(from_checkpoint, expected, atol=1e-5)


def test_the_threshold_is_tuned_on_valid_not_on_test(tiny_setup):
    from cosent_tf.data.benchmarks import load_task
    from cosent_tf.evaluation import best_threshold

    tmp_path, _ = tiny_setup
    metrics = tiny_run(tiny_setup, "threshold", task="BQ")
    encoder = SentenceEncoder.load(tmp_path / "threshold" / "model")
    folder = tmp_path / "data" / "senteval_cn"
    valid, test = load_task(folder, "BQ", "valid"), load_task(folder, "BQ", "test")
    on_valid = best_threshold(encoder.similarity(valid.texts_a, valid.texts_b), valid.labels)[0]
    on_test = best_threshold(encoder.similarity(test.texts_a, test.texts_b), test.labels)[0]
    assert metrics["test"]["threshold"] == pytest.approx(on_valid, abs=1e-7) == encoder.threshold
    assert on_test != on_valid  # the two splits give different thresholds, so the test can tell them apart


def test_a_nan_after_a_saved_epoch_stops_and_the_same_command_resumes(tiny_setup, monkeypatch, capsys):
    from cosent_tf.backend import tf
    from cosent_tf.losses import CoSENTLoss, registry

    tmp_path, options = tiny_setup
    out = tmp_path / "nan"
    argv = ["BQ", "--epochs", "2", "--output-dir", str(out), *options]  # 6 steps an epoch
    calls = tf.Variable(0)

    class NanFromStepEight(CoSENTLoss):
        def call(self, y_true, y_pred):
            calls.assign_add(1)
            return tf.where(calls > 7, tf.constant(float("nan")), super().call(y_true, y_pred))

    monkeypatch.setattr(registry, "CoSENTLoss", NanFromStepEight)
    with pytest.raises(
        SystemExit,
        match=r"the training loss became nan at step 8 \(batch 2 of the epoch\); training "
        r"stopped\. the best weights so far: .*; the last saved training state: ",
    ):
        train_main(argv)
    monkeypatch.undo()
    assert (out / "backup").is_dir() and (out / "best.weights.h5").exists() and not (out / "metrics.json").exists()
    capsys.readouterr()
    metrics = train_main(argv)  # the same command, now with a finite loss
    assert "resumed at step 6: best valid spearman so far" in capsys.readouterr().err
    assert metrics["steps"] == 12 and [r["epoch"] for r in read_csv(out / "valid_metrics.csv")] == ["1", "2"]
    assert not (out / "backup").exists()


def test_every_output_of_a_run_arrives_whole_by_rename(tiny_setup, monkeypatch):
    """Each output is written under a temporary name and renamed into place, so a process
    killed while writing it leaves the previous file (or none), never a partial one."""
    tmp_path, options = tiny_setup
    renamed, real_replace = [], os.replace

    def replace(source, target):
        renamed.append((os.path.basename(source), os.path.basename(target)))
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "run"
    train_main(["BQ", "--epochs", "2", "--output-dir", str(out), *options])
    monkeypatch.undo()
    assert renamed[0][1] == RUN_MARKER  # first: the folder is a run's before it holds anything else
    targets = {target: source for source, target in renamed}
    for name in set(RUN_OUTPUTS) - {"backup"}:  # the training state is a folder Keras writes and removes
        assert name in targets and targets[name].startswith(".tmp-"), (name, renamed)
    assert not [name for name in os.listdir(out) if name.startswith((".tmp-", ".old-"))]


@pytest.mark.slow
@pytest.mark.parametrize("every", ["0", "2"], ids=["at epoch ends", "within epochs"])
def test_on_a_terminal_every_validation_line_starts_a_line_of_its_own(every, tiny_setup):
    import pty

    tmp_path, options = tiny_setup
    command = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", "--epochs", "2", "--eval-every", every]
    terminal, process_side = pty.openpty()  # stderr, where the progress bar and the log go
    process = subprocess.Popen(
        command + ["--output-dir", str(tmp_path / "run"), *options], stdout=subprocess.PIPE, stderr=process_side
    )
    os.close(process_side)
    shown = b""
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the process has closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    text = shown.decode("utf-8")
    assert process.wait(timeout=300) == 0, text[-2000:]
    assert json.loads(process.stdout.read())["best_epoch"] in (1, 2)  # stdout: the metrics alone
    assert "\r" in text and "Epoch 2/2" in text  # a live progress bar was drawn
    lines = re.findall(r"(.?)((?:step|epoch) \d+ valid:)", text, flags=re.DOTALL)
    assert len(lines) >= 2 and all(before == "\n" for before, _ in lines), lines


def test_recipes_fill_what_is_not_set_and_each_option_overrides_them():
    blog = RunConfig(task="BQ").resolved()
    assert (blog.lr, blog.weight_decay, blog.warmup, blog.schedule, blog.pooling) == (2e-5, 0.0, 0.0, "constant", "cls")
    assert (blog.epochs, blog.batch_size) == (5, 32)
    paper = RunConfig(task="BQ", recipe="paper").resolved()
    assert (paper.lr, paper.weight_decay, paper.warmup, paper.schedule) == (2e-5, 0.01, 0.1, "linear")
    assert (paper.epochs, paper.batch_size, paper.pooling) == (4, 16, "last-avg")
    assert RunConfig(task="NLI", recipe="paper").resolved().batch_size == 64
    mine = RunConfig(task="BQ", recipe="paper", epochs=2, weight_decay=0.0, pooling="cls", lr=1e-4).resolved()
    assert (mine.epochs, mine.weight_decay, mine.pooling, mine.lr, mine.warmup) == (2, 0.0, "cls", 1e-4, 0.1)


def test_the_recipe_and_optimizer_options_reach_the_optimizer(tiny_setup, monkeypatch):
    seen = {}

    def recording(lr, total_steps, weight_decay, warmup, schedule, loss_scaling):
        seen.update(lr=lr, total_steps=total_steps, weight_decay=weight_decay, warmup=warmup, schedule=schedule)
        seen.update(loss_scaling=loss_scaling)
        return build_optimizer(lr, total_steps, weight_decay, warmup, schedule, loss_scaling)

    monkeypatch.setattr(training, "build_optimizer", recording)
    tmp_path, options = tiny_setup
    train_main(["BQ", "--recipe", "paper", "--epochs", "1", "--output-dir", str(tmp_path / "paper")] + options)
    # 48 train pairs in batches of 8 (the option beats the recipe's 16): 6 steps, 1 epoch
    assert seen == dict(lr=1e-3, total_steps=6, weight_decay=0.01, warmup=0.1, schedule="linear", loss_scaling=False)
    recorded = json.loads((tmp_path / "paper" / "config.json").read_text())
    assert (recorded["recipe"], recorded["pooling"], recorded["batch_size"]) == ("paper", "last-avg", 8)
    # float16 trains with loss scaling
    train_main(["BQ", "--precision", "fp16", "--epochs", "1", "--output-dir", str(tmp_path / "fp16")] + options)
    assert seen["loss_scaling"] is True


def test_a_run_trains_first_on_the_first_batch_of_its_stream(tiny_setup):
    """The batch stream starts at the step fit starts from (read once training has begun), not
    at whatever the step counter says when tf.data's thread first pulls a batch."""
    from cosent_tf.backend import random_seed

    tiny_run(tiny_setup, "one-step", task="BQ", steps_per_epoch=1, pooling="last-avg")
    trained = SentenceEncoder.load(str(tiny_setup[0] / "one-step" / "model")).model.get_weights()
    cfg = RunConfig(**json.loads((tiny_setup[0] / "one-step" / "config.json").read_text()))
    data = load_run_data(cfg)
    with random_seed(cfg.seed):
        matcher = training.Matcher(cfg, data.task)
        model, loss, labels = matcher.training_model(data.train.labels)
        model.compile(optimizer=build_optimizer(cfg.lr, 1), loss=loss)
    first_batch = matcher.dataset(matcher.prepare(data.train), labels, 0).take(1)
    model.fit(first_batch, epochs=1, verbose=0)
    for expected, actual in zip(matcher.model.get_weights(), trained):
        np.testing.assert_allclose(actual, expected, atol=1e-6)


@pytest.mark.slow
def test_float16_training_with_loss_scaling_ends_near_float32(tiny_setup):
    tmp_path, _ = tiny_setup
    write_tiny_data(tmp_path / "more", counts=(400, 200, 200))  # enough test pairs for a steady Spearman
    settings = dict(task="BQ", data_dir=str(tmp_path / "more"), batch_size=16, epochs=3, pooling="last-avg")
    runs = {
        precision: tiny_run(tiny_setup, precision, precision=precision, **settings) for precision in ("float32", "fp16")
    }
    assert runs["fp16"]["test"]["spearman"] == pytest.approx(runs["float32"]["test"]["spearman"], abs=0.01)
    assert runs["float32"]["test"]["spearman"] > 0.5  # both learned
    config = json.loads((tmp_path / "fp16" / "config.json").read_text())
    assert config["precision"] == "fp16"
