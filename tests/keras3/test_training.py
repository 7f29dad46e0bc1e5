"""``cosent_tf.keras3.train``: a feature model trained on Keras 3 on tiny data learns, writes the
model folder the Keras 2 engine loads (the same vectors), resumes after an interruption to the
weights an uninterrupted run reaches, and ranks the global batch under
tf.distribute (TensorFlow backend, in a process of its own: the CPU split must precede TensorFlow's start)."""

import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cosent_tf.calibration import format_threshold, majority_said
from cosent_tf.io import read_history
from cosent_tf.keras3.training import resolve, save_model_folder, train
from cosent_tf.training.config import RunConfig
from tests.helpers import read_until_closed  # Keras-free at import, as support.py is
from tests.keras3.support import ROOT, SHARED_VOCAB, run_keras2, tiny_bert_config

TINY = tiny_bert_config(num_hidden_layers=1, max_position_embeddings=32)
CHARACTERS = (
    "我你他她们的是了在有人这中大为上个国不以会到说时要就出也和地对生能而子那得于着下自之年过"
    "发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心"
)


def pair_files(folder, count=48, seed=0, binary=False):
    """Graded pairs that only a trained model can rank: the second text replaces each character of
    the first by its fixed partner (a seeded pairing of the characters) with the pair's label as
    probability, else by a random character; the two texts share no characters on purpose, so an
    untrained model's cosines follow no label. ``binary``: the labels written are 1 for a
    probability of 0.5 and above, else 0."""
    rng = np.random.default_rng(seed)
    characters = list(CHARACTERS)
    partner = dict(zip(characters, rng.permutation(characters)))
    paths = []
    for name, n in (("train", count), ("valid", count // 2)):
        lines = []
        for i in range(n):
            label = (i % 5) / 4
            first = rng.choice(characters, rng.integers(6, 11))
            second = [partner[c] if rng.random() < label else rng.choice(characters) for c in first]
            written = int(label >= 0.5) if binary else label
            lines.append(f"{''.join(first)}\t{''.join(second)}\t{written:g}")
        path = os.path.join(folder, f"{name}.tsv")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        paths.append(path)
    return paths


@pytest.fixture
def tiny_run(tmp_path):
    """(a RunConfig on tiny pair files from a seeded random start written as a model folder, that folder)."""
    import keras

    from cosent_tf.keras3.backbones import backbone_from_config

    keras.utils.set_random_seed(7)
    start = str(tmp_path / "start")
    save_model_folder(
        start, backbone_from_config(TINY), "bert", TINY, SHARED_VOCAB, pooling="last-avg", maxlen=32, do_lower_case=True
    )
    train_file, _ = pair_files(str(tmp_path))
    valid_file = train_file  # learning is fitting these pairs' ranking, which an untrained model lacks
    cfg = RunConfig(
        task="tiny",
        train_file=train_file,
        valid_file=valid_file,
        test_file=valid_file,
        checkpoint=start,
        keras=3,
        epochs=2,
        batch_size=8,
        lr=1e-2,
        maxlen=32,
        pooling="last-avg",
        output_dir=str(tmp_path / "run"),
    )
    return cfg, start


def texts_of(path):
    with open(path, encoding="utf-8") as f:
        return [text for line in f for text in line.split("\t")[:2]]


def test_a_run_learns_and_its_folder_loads_in_keras2_with_the_same_vectors(tiny_run, tmp_path):
    from cosent_tf.keras3.encoder import SentenceEncoder

    cfg, start = tiny_run
    texts = texts_of(cfg.valid_file)
    labels = np.repeat(np.loadtxt(cfg.valid_file, dtype=str, delimiter="\t")[:, 2].astype(float), 1)
    before = SentenceEncoder.load(start).encode(texts)
    untrained = _spearman(before, labels)

    metrics = train(cfg)

    assert metrics["keras"] == 3 and metrics["steps"] == 2 * 6
    assert metrics["valid"]["spearman"] > untrained + 0.1, untrained
    model_dir = os.path.join(cfg.output_dir, "model")
    assert sorted(os.listdir(model_dir)) == sorted(
        [
            "bert_config.json",
            "bert_model.ckpt.data-00000-of-00001",
            "bert_model.ckpt.index",
            "checkpoint",
            "cosent_model.json",
            "decision.json",
            "vocab.txt",
        ]
    )
    with open(os.path.join(model_dir, "cosent_model.json"), encoding="utf-8") as f:
        spec = json.load(f)
    assert spec["source"]["backend"] == os.environ["KERAS_BACKEND"] and spec["source"]["keras"].startswith("3.")
    assert spec["pooling"] == "last-avg" and spec["maxlen"] == 32
    assert not os.path.exists(os.path.join(cfg.output_dir, "backup"))

    on_keras3 = SentenceEncoder.load(model_dir).encode(texts)
    assert _spearman(on_keras3, labels) == pytest.approx(metrics["valid"]["spearman"], abs=1e-6)
    on_keras2 = run_keras2(
        f"""
        from cosent_tf import SentenceEncoder
        outputs["vectors"] = SentenceEncoder.load({model_dir!r}).encode(list(inputs["texts"]))
        """,
        tmp_path,
        reads=[model_dir],
        texts=np.array(texts),
    )["vectors"]
    np.testing.assert_allclose(on_keras3, on_keras2, atol=1e-5)


def _spearman(vectors, labels):
    from scipy import stats

    cosines = np.sum(vectors[0::2] * vectors[1::2], axis=1)
    return stats.spearmanr(cosines, labels).correlation


def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(tiny_run, tmp_path):
    """SIGTERM within the second epoch stops the run after the current step, saying where it saved the
    state; run again, it resumes at that step to the weights of an uninterrupted run, from the record of
    the validations that an earlier Keras 3 trainer kept (validation.json, since valid_metrics.csv) too."""
    import signal

    import keras

    from cosent_tf.errors import TrainingInterrupted
    from cosent_tf.io import write_json
    from cosent_tf.models.checkpoint_files import read_checkpoint_arrays

    cfg, _ = tiny_run
    whole = train(RunConfig(**{**cfg.__dict__, "output_dir": str(tmp_path / "whole")}))

    class TerminatedInSecondEpoch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if (self.epoch, batch) == (1, 1):
                os.kill(os.getpid(), signal.SIGTERM)

    backup = os.path.join(cfg.output_dir, "backup")
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(cfg, callbacks=[TerminatedInSecondEpoch()])
    assert str(stopped.value) == (
        f"SIGTERM received: training state saved after step 8 in {backup}; "
        "run the same command again to resume from there"
    )
    assert signal.getsignal(signal.SIGTERM) is handler
    assert os.listdir(backup)
    assert not os.path.exists(os.path.join(cfg.output_dir, "metrics.json"))
    assert os.path.exists(os.path.join(cfg.output_dir, ".cosent-run"))  # the Keras 2 engine's run marker
    with open(cfg.train_file, encoding="utf-8") as f:
        original = f.read()
    with open(cfg.train_file, "a", encoding="utf-8") as f:
        f.write("我\t你\t1\n")
    with pytest.raises(Exception, match="input files differ now"):  # its fingerprint in the marker
        train(cfg)
    with open(cfg.train_file, "w", encoding="utf-8") as f:
        f.write(original)
    csv_path, record_path = (os.path.join(cfg.output_dir, name) for name in ("valid_metrics.csv", "validation.json"))
    (first,) = read_history(csv_path)
    # the earlier trainer's record of that epoch, in place of the file it did not write
    write_json(record_path, {"best_epoch": 1, "best": first["spearman"], "history": [{**first, "loss": 0.25}]})
    os.remove(csv_path)
    resumed = train(cfg)

    history = read_history(csv_path)
    assert [(row["epoch"], row["step"]) for row in history] == [(1, 6), (2, 12)]
    assert {key: history[0][key] for key in first} == first
    assert not os.path.exists(record_path)
    assert (resumed["steps"], resumed["best_epoch"]) == (whole["steps"], whole["best_epoch"])
    assert resumed["valid"]["spearman"] == pytest.approx(whole["valid"]["spearman"], abs=1e-6)
    arrays = [
        read_checkpoint_arrays(os.path.join(folder, "model", "bert_model.ckpt"))
        for folder in (cfg.output_dir, str(tmp_path / "whole"))
    ]
    assert arrays[0].keys() == arrays[1].keys()
    for name in arrays[0]:
        np.testing.assert_allclose(arrays[0][name], arrays[1][name], atol=1e-6, err_msg=name)

    with pytest.raises(Exception, match="holds a finished run"):
        train(cfg)


@pytest.mark.backends("tensorflow")  # the command's handling, before and after any backend's work
def test_the_command_stopped_by_a_signal_says_so_and_exits_as_the_keras2_engines_does(monkeypatch, capsys):
    import signal

    from cosent_tf.errors import TrainingInterrupted
    from cosent_tf.experiments import scripts
    from cosent_tf.training import engine

    def stopped(*args):
        raise TrainingInterrupted(signal.SIGTERM, "SIGTERM received: training stopped after step 8; ...")

    monkeypatch.setattr(engine, "train", stopped)
    with pytest.raises(SystemExit) as exited:
        scripts.run_training(RunConfig(task="tiny", keras=3), overwrite=False)
    assert exited.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "stopped: SIGTERM received: training stopped after step 8; ...\n"


def test_on_a_terminal_a_progress_bar_is_redrawn_and_each_validation_line_starts_a_line_of_its_own(
    tiny_run, monkeypatch
):
    """Keras's output and the log on a terminal, as `cosent-tf train --keras 3` run from one shows them."""
    import pty
    import threading

    from cosent_tf.console import console_logging

    cfg, _ = tiny_run
    terminal, process_side = pty.openpty()
    shown = []

    reader = threading.Thread(target=read_until_closed, args=(terminal, shown), daemon=True)
    reader.start()
    try:
        with open(process_side, "w", encoding="utf-8", buffering=1) as shown_on:
            monkeypatch.setattr(sys, "stdout", shown_on)
            monkeypatch.setattr(sys, "stderr", shown_on)
            with console_logging():
                train(cfg)
            monkeypatch.undo()
        reader.join(timeout=60)
    finally:
        os.close(terminal)
    text = b"".join(shown).decode("utf-8")
    # a bar redrawn in place: a carriage return that ends no line (the terminal ends lines with "\r\n")
    assert re.search("\r(?!\n)", text) and "━" in text and "Epoch 2/2" in text, text[-2000:]
    lines = re.findall(r"(.?)(epoch \d+ valid:)", text, flags=re.DOTALL)
    assert len(lines) == 2 and all(before == "\n" for before, _ in lines), lines


@pytest.mark.backends("tensorflow")  # XLA's CPU matrix products take no float16: JAX refuses it (keras_support)
def test_an_fp16_run_trains_with_loss_scaling_and_puts_the_policy_back(tiny_run):
    check_mixed_precision_run(tiny_run, "fp16")


def check_mixed_precision_run(tiny_run, precision):
    import keras

    cfg, _ = tiny_run
    metrics = train(RunConfig(**{**cfg.__dict__, "precision": precision, "epochs": 1}))
    assert keras.config.dtype_policy().name == "float32"
    assert np.isfinite(metrics["valid"]["spearman"])
    with open(os.path.join(cfg.output_dir, "model", "cosent_model.json"), encoding="utf-8") as f:
        assert json.load(f)["source"]["precision"] == precision


def test_options_keras3_cannot_honour_are_refused_by_name(tiny_run):
    from cosent_tf.errors import ConfigError

    cfg, _ = tiny_run
    for option, named in (
        ({"architecture": "roformer"}, "architecture 'roformer' is on the Keras 2 engine only"),
        ({"keras": 2}, "--keras 2: this process holds Keras 3"),
    ):
        with pytest.raises(ConfigError, match=named):
            resolve(RunConfig(**{**cfg.__dict__, **option}))
    assert not os.path.exists(cfg.output_dir)


# One run of each kind of batch the engine makes, on this backend: in-batch groups (mnrl), a training
# head (sbert), Matryoshka widths with validation within the epoch picking by a retrieval figure, and
# an interaction model's concatenated pairs. (option name, value) pairs on top of the tiny run's.
EVERY_BATCH = {
    "mnrl": (("loss", "mnrl"),),
    "sbert": (("loss", "sbert"),),
    "matryoshka": (("matryoshka_dims", [16, 8]), ("eval_every", 3), ("best_metric", "mrr@10")),
    "interaction": (("kind", "interaction"), ("loss", "cosent")),
}


# CI runs each kind on one backend, two on each (both in make test-full): a run costs as much again per
# backend, and what the backend changes, the maths' ops, the loss and layer tests check on both
CI_BACKEND_OF_BATCH = {"interaction": "tensorflow", "matryoshka": "tensorflow", "mnrl": "jax", "sbert": "jax"}


@pytest.mark.heavy
@pytest.mark.parametrize(
    "batches",
    [pytest.param(name, marks=pytest.mark.ci_backend(CI_BACKEND_OF_BATCH[name])) for name in sorted(EVERY_BATCH)],
)
def test_every_kind_of_batch_trains_on_keras3_and_its_folder_scores_alike_on_keras2(batches, tiny_run, tmp_path):
    """The one engine runs each kind of batch on Keras 3 (what the Keras 3 route refused before): the
    run learns or at least finishes with finite figures, validates as asked, and its model folder,
    loaded by the Keras 2 engine, scores the valid pairs as the run did (its valid Spearman)."""
    from scipy import stats

    cfg, _ = tiny_run
    binary = tmp_path / "binary"
    binary.mkdir()
    train_file, valid_file = pair_files(str(binary), binary=True)
    options = dict(EVERY_BATCH[batches])
    if options.get("kind") == "interaction":
        options["checkpoint"] = None  # the start folder is a sentence encoder's
        options["config"], options["vocab"] = str(tmp_path / "tiny.json"), SHARED_VOCAB
        (tmp_path / "tiny.json").write_text(json.dumps(TINY), encoding="utf-8")
        options["pooling"] = None
    files = {"train_file": train_file, "valid_file": valid_file, "test_file": valid_file}
    run = RunConfig(**{**cfg.__dict__, **files, "epochs": 1, **options})
    metrics = train(run)

    assert metrics["keras"] == 3 and metrics["loss"] == run.loss and metrics["kind"] == run.kind
    assert np.isfinite(metrics["valid"]["spearman"]) and np.isfinite(metrics["test"]["spearman"])
    history = read_history(os.path.join(run.output_dir, "valid_metrics.csv"))
    if run.eval_every:
        assert [row["step"] for row in history] == [3, 6] and metrics["best_metric"] == "mrr@10"
        assert all("mrr@10" in row for row in history)
    model_dir = os.path.join(run.output_dir, "model")
    with open(os.path.join(model_dir, "cosent_model.json"), encoding="utf-8") as f:
        spec = json.load(f)
    assert spec["kind"] == run.kind and spec["source"]["keras"].startswith("3.")
    if run.matryoshka_dims:
        assert spec["matryoshka_dims"] == [16, 8]
    texts = np.loadtxt(valid_file, dtype=str, delimiter="\t", comments=None)
    on_keras2 = run_keras2(
        f"""
        from cosent_tf import load_matcher
        matcher = load_matcher({model_dir!r})
        outputs["scores"] = np.asarray(matcher.similarity(list(inputs["a"]), list(inputs["b"])), np.float64)
        """,
        tmp_path,
        reads=[model_dir],
        a=texts[:, 0],
        b=texts[:, 1],
    )["scores"]
    labels = texts[:, 2].astype(float)
    assert stats.spearmanr(on_keras2, labels).correlation == pytest.approx(metrics["valid"]["spearman"], abs=1e-5)


def test_valid_and_test_files_labelled_otherwise_than_train_are_refused_before_anything_is_written(tiny_run, tmp_path):
    """The Keras 2 engine's loader (training.run_data) reads the files: graded valid pairs beside
    binary train pairs would pick the best epoch, and fit the decision, on another scale."""
    from cosent_tf.errors import DataError

    cfg, _ = tiny_run
    binary = tmp_path / "binary"
    binary.mkdir()
    train_file, _ = pair_files(str(binary), binary=True)
    with pytest.raises(DataError) as refused:
        train(dataclasses.replace(cfg, train_file=train_file))
    assert str(refused.value) == (
        f"{cfg.valid_file}: its labels are graded but those of the train file {train_file} are binary: the files "
        "must label pairs the same way"
    )
    assert not os.path.exists(cfg.output_dir)


def test_a_run_from_a_sentence_transformers_folder_takes_its_length_and_pooling_unless_given(tmp_path, caplog):
    from cosent_tf import huggingface

    folder = tmp_path / "st"  # its JSON files are all the settings are read from
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(huggingface.hf_config(TINY)), encoding="utf-8")
    huggingface.write_sentence_transformers_modules(folder, "max", TINY["hidden_size"], 24, True)
    # A folder without a vocabulary of its own is given one, as the model source it is opened as needs
    given = RunConfig(
        task="tiny", train_file=str(tmp_path / "train.tsv"), keras=3, checkpoint=str(folder), vocab=SHARED_VOCAB
    )
    with caplog.at_level(logging.INFO, "cosent_tf.training.config"):
        cfg = resolve(given)
    assert (cfg.maxlen, cfg.pooling) == (24, "max")  # not the task's 64, nor a pooling left to the load
    assert caplog.messages == [
        "--maxlen 24: the --checkpoint folder's max_seq_length 24",
        "--pooling max: the --checkpoint folder's pooling max",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, "cosent_tf.training.config"):
        cfg = resolve(dataclasses.replace(given, maxlen=16))
    assert (cfg.maxlen, cfg.pooling) == (16, "max")
    assert caplog.messages[0] == (
        "NOTE: --maxlen 16 overrides the --checkpoint folder's max_seq_length 24: the trained model and its exports "
        "will cut texts at 16 tokens"
    )


MIRRORED = """
import os, sys, json
import numpy as np
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)
import cosent_tf, keras
from cosent_tf.keras3 import build_encoder
from cosent_tf.keras3.backbones import backbone_from_config
from cosent_tf.losses import get_loss

config = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
x = rng.integers(1000, 5000, size=(16, 12)).astype("int32")
x[:, 0] = 101
y = np.repeat(rng.uniform(0, 5, size=8), 2).astype("float32")

def one_step(strategy, loss):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        encoder = build_encoder(backbone_from_config(config), "last-avg")
        # plain SGD at rate 1, so that the step is the gradient itself (Adam's first step is about
        # lr * sign(gradient), which would hide a gradient R times too large)
        ranking = get_loss("feature", "cosent").build(scale=20.0, global_batch=loss == "global")
        encoder.compile(optimizer=keras.optimizers.SGD(1.0), loss=ranking)
    encoder.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=1, verbose=0, shuffle=False)
    return [np.asarray(w) for w in encoder.get_weights()]

one_device, mirrored = tf.distribute.OneDeviceStrategy("/cpu:0"), tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert mirrored.num_replicas_in_sync == 2
start = [np.asarray(w) for w in (keras.utils.set_random_seed(3), backbone_from_config(config))[1].get_weights()]
figures = {}
for loss in sys.argv[2:]:
    one, two = one_step(one_device, loss), one_step(mirrored, loss)
    moved = max(float(np.max(np.abs(a - s))) for a, s in zip(one, start))
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two))
    figures[loss] = {"moved": moved, "worst": worst}
print(json.dumps(figures))
"""
MIRRORED_LOSSES = ["global", "per-replica"]


@pytest.fixture(scope="module")
def mirrored_steps():
    """loss -> the step's figures, from one process for both losses (two logical CPUs are set before
    TensorFlow starts): each loss's model takes a step on one device and under one MirroredStrategy,
    the same two strategies for both (a second MirroredStrategy in one process mixes up its collectives)."""
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(MIRRORED), json.dumps(TINY), *MIRRORED_LOSSES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize("loss", MIRRORED_LOSSES)
def test_mirrored_step_on_the_global_batch_equals_one_devices_step(loss, mirrored_steps):
    figures = mirrored_steps[loss]
    assert figures["moved"] > 1.0  # the gradient (the step of SGD at rate 1) is far from 0
    relative = figures["worst"] / figures["moved"]  # float32 sums in another order differ by about 1e-6 of it
    if loss == "global":
        assert relative < 1e-5, figures
    else:  # each replica ranking its own half is another step: the check tells them apart
        assert relative > 1e-2, figures


# The options of the command's run, from random weights (a --config, no --checkpoint); the Keras 2
# engine's run of the same options is what the command's outputs are compared with.
COMMAND_OPTIONS = ["--epochs", "1", "--batch-size", "8", "--maxlen", "32"]


@pytest.fixture(scope="module")
def command_run(tmp_path_factory):
    """``cosent-tf train --keras 3`` on binary pair files, finished: (its folder, the train, valid and
    config files, its stdout, its stderr). In a process of its own, as a user runs it (what it prints
    at TensorFlow's start is the process's first lines), on the backend KERAS_BACKEND names; on
    TensorFlow under --strategy mirrored over two logical CPUs (COSENT_TF_CPU_DEVICES)."""
    folder = tmp_path_factory.mktemp("command")
    train_file, valid_file = pair_files(str(folder), binary=True)
    config = folder / "tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    mirrored = ["--strategy", "mirrored"] if os.environ["KERAS_BACKEND"] == "tensorflow" else []
    command = [sys.executable, "-m", "cosent_tf.cli", "train", "--keras", "3", "--train", train_file]
    command += ["--valid", valid_file, "--config", str(config), "--vocab", SHARED_VOCAB, *COMMAND_OPTIONS]
    command += ["--output-dir", str(folder / "run"), *mirrored]
    env = {**os.environ, "COSENT_TF_CPU_DEVICES": "2"}
    env.pop("COSENT_TF_VERBOSE", None)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "run", (train_file, valid_file, str(config)), done.stdout, done.stderr


def read_json_file(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_the_command_trains_on_keras3_on_this_backend(command_run):
    run, _, _, _ = command_run
    backend = os.environ["KERAS_BACKEND"]
    metrics = read_json_file(run / "metrics.json")
    assert metrics["backend"] == backend and metrics["replicas"] == (2 if backend == "tensorflow" else 1)
    assert metrics["steps"] == 6 and np.isfinite(metrics["test"]["spearman"])
    assert read_json_file(run / "model" / "cosent_model.json")["source"]["backend"] == backend
    assert read_json_file(run / "config.json")["keras"] == 3


def test_the_command_prints_its_results_and_sums_them_up_last_as_the_keras2_engine_does(command_run):
    """stdout: the Keras 2 engine's JSON line; stderr: the random-weights note, a validation line an
    epoch, none of TensorFlow's start-up lines, and last the summary with the model's path."""
    from cosent_tf.console import TENSORFLOW_STARTUP_LINES
    from cosent_tf.training.run_results import RANDOM_WEIGHTS_NOTE

    run, _, stdout, stderr = command_run
    metrics = read_json_file(run / "metrics.json")
    test, valid = metrics["test"], metrics["valid"]
    assert stdout.count("\n") == 1
    assert json.loads(stdout) == {name: metrics[name] for name in ("valid", "test", "best_epoch", "wall_seconds")}
    assert not TENSORFLOW_STARTUP_LINES.search(stderr), stderr[:2000]
    lines = stderr.splitlines()
    assert f"NOTE: {RANDOM_WEIGHTS_NOTE}" in lines
    assert f"epoch 1 valid: spearman {valid['spearman']:.4f}, pearson {valid['pearson']:.4f}  (best so far)" in lines
    assert lines[-1] == (
        f"train feature cosent: test spearman {test['spearman']:.4f}, accuracy {test['accuracy']:.4f} at threshold "
        f"{format_threshold(test['threshold'])} ({majority_said(test)}) (best valid spearman {valid['spearman']:.4f} "
        f"at epoch 1); model in {run / 'model'} (from random weights: not for use)"
    )


def test_the_command_writes_the_fields_and_files_of_the_keras2_engines_run(command_run, tmp_path):
    """The Keras 2 engine's run of the same options and files: the same fields in metrics.json (and
    under test, and under test.retrieval), the same files in the model folder; Keras 3 adds its
    ``keras``, ``backend`` and ``history``."""
    run, (train_file, valid_file, config), _, _ = command_run
    keras2 = run_keras2(
        f"""
        import os
        from cosent_tf.training import RunConfig, train
        run = os.path.join(tmp, "run")
        metrics = train(RunConfig(task="train", train_file={train_file!r}, valid_file={valid_file!r}, config={config!r},
                                  vocab={SHARED_VOCAB!r}, epochs=1, batch_size=8, maxlen=32, output_dir=run))
        outputs["metrics"] = np.array(sorted(metrics))
        outputs["test"] = np.array(sorted(metrics["test"]))
        outputs["retrieval"] = np.array(sorted(metrics["test"]["retrieval"]))
        outputs["model"] = np.array(sorted(os.listdir(os.path.join(run, "model"))))
        """,
        tmp_path,
        reads=[train_file, valid_file, config],
    )
    metrics = read_json_file(run / "metrics.json")
    assert sorted(metrics) == list(keras2["metrics"])
    assert sorted(metrics["test"]) == list(keras2["test"])
    assert sorted(metrics["test"]["retrieval"]) == list(keras2["retrieval"])
    assert sorted(os.listdir(run / "model")) == list(keras2["model"])


def test_overwrite_removes_only_a_runs_own_outputs_and_refuses_a_folder_of_the_users(tiny_run, tmp_path):
    """A folder with a config.json is not a run (a Hugging Face folder has one): --overwrite refuses
    it and removes nothing; a run's folder gets the Keras 2 engine's marker, and --overwrite there
    refuses a file the run did not write, before removing anything."""
    from cosent_tf.errors import ConfigError

    cfg, _ = tiny_run
    users = tmp_path / "users"
    users.mkdir()
    (users / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (users / "model.safetensors").write_text("weights", encoding="utf-8")
    with pytest.raises(ConfigError, match="does not look like a cosent-tf training run"):
        train(RunConfig(**{**cfg.__dict__, "output_dir": str(users)}), overwrite=True)
    assert sorted(os.listdir(users)) == ["config.json", "model.safetensors"]

    train(RunConfig(**{**cfg.__dict__, "epochs": 1}))
    assert ".cosent-run" in os.listdir(cfg.output_dir)
    with open(os.path.join(cfg.output_dir, "notes.txt"), "w", encoding="utf-8") as f:
        f.write("mine")
    with pytest.raises(ConfigError, match="not a cosent-tf training run"):
        train(RunConfig(**{**cfg.__dict__, "epochs": 1}), overwrite=True)
    assert os.path.exists(os.path.join(cfg.output_dir, "metrics.json"))


def test_a_batch_the_loss_cannot_learn_from_is_refused_by_name_before_anything_is_written(tiny_run):
    from cosent_tf.errors import ConfigError

    cfg, _ = tiny_run
    with pytest.raises(ConfigError, match="--batch-size 1: the cosent loss"):
        train(RunConfig(**{**cfg.__dict__, "batch_size": 1}))
    assert not os.path.exists(cfg.output_dir)


def test_a_run_from_a_config_with_cls_pooling_ships_no_random_pooler(tiny_run, tmp_path):
    from cosent_tf.keras3.backbones import load_backbone

    cfg, _ = tiny_run
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    values = {**cfg.__dict__, "checkpoint": None, "config": str(config), "vocab": SHARED_VOCAB}
    train(RunConfig(**{**values, "pooling": "cls", "epochs": 1}))
    assert load_backbone(os.path.join(cfg.output_dir, "model")).has_pooler is False


DECAY_RULE_ON_KERAS2 = """
import re
from cosent_tf.models.architectures import transformer_class
from cosent_tf.optimizers import NOT_DECAYED
names, decayed = [], []
for architecture, config in ({architectures}):
    config = dict(config, max_position=32, segment_vocab_size=2, dropout_rate=0.0, attention_dropout_rate=0.0,
                  with_pool=True)
    transformer = transformer_class(architecture)(**config)
    transformer.build(**config)
    for layer, google in transformer.variable_mapping().items():
        if layer not in transformer.layers:  # BERT's mapping names an Embedding-Mapping it has only when
            continue  # embedding_size differs from hidden_size (as bert4keras's loader skips it)
        for weight, name in zip(transformer.layers[layer].trainable_weights, google):
            names.append(name)
            decayed.append(not any(re.search(pattern, weight.name) for pattern in NOT_DECAYED))
outputs["names"], outputs["decayed"] = np.array(names), np.array(decayed)
"""


def test_weight_decay_skips_what_the_keras2_engine_skips_albert_embedding_mapping_included(tmp_path):
    """The Keras 3 rule over Google names and the Keras 2 rule over bert4keras names are one rule:
    compared on every weight of a BERT and an ALBERT, and applied to the Keras 3 encoder's variables."""
    from cosent_tf.keras3 import build_encoder
    from cosent_tf.keras3.backbones import backbone_from_config, weight_table
    from cosent_tf.keras3.models import not_decayed_variables
    from cosent_tf.weight_decay import decayed

    albert = {**TINY, "embedding_size": 8}
    keras2 = run_keras2(
        DECAY_RULE_ON_KERAS2.format(architectures=f"('bert', {TINY!r}), ('albert', {albert!r})"), tmp_path
    )
    rule = dict(zip(keras2["names"].tolist(), keras2["decayed"].tolist()))
    assert (
        "bert/encoder/embedding_hidden_mapping_in/kernel" in rule
        and not rule["bert/encoder/embedding_hidden_mapping_in/kernel"]
    )
    assert {name: decayed(name) for name in rule} == rule
    for architecture, config in (("bert", TINY), ("albert", albert)):
        backbone = backbone_from_config(config, architecture)
        table = weight_table(backbone)
        assert {name for name, _, _ in table} <= set(rule)
        encoder = build_encoder(backbone, pooling="cls")
        trained = {id(v) for v in encoder.trainable_variables}
        skipped = {id(v) for v in not_decayed_variables(encoder)}
        assert {name for name, v, _ in table if id(v) in skipped} == {
            name for name, v, _ in table if id(v) in trained and not rule[name]
        }
