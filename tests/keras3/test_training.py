"""``cosent_tf.keras3.train``: a feature model trained on Keras 3 on tiny data learns, writes the
model folder the Keras 2 engine loads (the same vectors), resumes after an interruption to the
weights an uninterrupted run reaches, trains in bf16, and ranks the global batch under
tf.distribute (TensorFlow backend, in a process of its own: the CPU split must precede TensorFlow's start)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cosent_tf.keras3.training import (
    build_loss,
    fit_input,
    pair_batch_order,
    resolve,
    save_model_folder,
    train,
)
from cosent_tf.losses.registry import keras3_losses
from cosent_tf.training.config import RunConfig
from tests.keras3.support import ROOT, SHARED_VOCAB, run_keras2

TINY = {
    "attention_probs_dropout_prob": 0.0,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "hidden_size": 16,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "max_position_embeddings": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "type_vocab_size": 2,
    "vocab_size": 21128,
}
CHARACTERS = (
    "我你他她们的是了在有人这中大为上个国不以会到说时要就出也和地对生能而子那得于着下自之年过"
    "发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心"
)


def pair_files(folder, count=48, seed=0):
    """Graded pairs that only a trained model can rank: the second text replaces each character of
    the first by its fixed partner (a seeded pairing of the characters) with the pair's label as
    probability, else by a random character; the two texts share no characters on purpose, so an
    untrained model's cosines follow no label."""
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
            lines.append(f"{''.join(first)}\t{''.join(second)}\t{label:g}")
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


@pytest.mark.parametrize("loss", keras3_losses())
def test_each_loss_offered_is_built_from_its_table_row_with_the_runs_options(loss):
    """The loss table's row makes the Keras 3 class of the Keras 2 one's name, with the run's settings."""
    import keras

    from cosent_tf.data.tasks import get_task

    built = build_loss(RunConfig(loss=loss, scale=7.0, epsilon=0.25, keras=3), get_task("STS-B"))
    assert isinstance(built, keras.losses.Loss) and type(built).__module__ == "cosent_tf.keras3.losses"
    expected = {"cosent": ("scale", 7.0), "angle": ("scale", 7.0), "mse": ("max_label", 5.0)}
    expected["contrastive"] = ("epsilon", 0.25)
    name, value = expected[loss]
    assert getattr(built, name) == value


def test_each_epoch_is_a_seeded_shuffle_of_whole_batches():
    first, again, other = (pair_batch_order(20, 4, 42, epoch) for epoch in (0, 0, 1))
    assert first.shape == (5, 4) and sorted(first.ravel()) == list(range(20))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert pair_batch_order(10, 4, 42, 0).shape == (2, 4)  # the partial batch is left out


def test_fit_takes_batches_whose_width_changes_after_the_first_two():
    """Keras 3 on TensorFlow fixes a PyDataset's shapes from its first two batches; the STS-B run
    failed on its first batch of another width before fit_input left the width open."""
    import keras

    from cosent_tf.keras3 import CoSENTLoss, build_encoder
    from cosent_tf.keras3.backbones import backbone_from_config

    widths = (8, 8, 24)

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return len(widths)

        def __getitem__(self, index):
            ids = np.full((4, widths[index]), 872, np.int32)
            ids[:, 0], ids[:, -1] = 101, 102
            return ids, np.array([1, 1, 0, 0], np.float32)

    encoder = build_encoder(backbone_from_config(TINY), pooling="cls")
    encoder.compile(optimizer="adam", loss=CoSENTLoss())
    history = encoder.fit(fit_input(keras, Batches()), epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])


def test_a_run_learns_and_its_folder_loads_in_keras2_with_the_same_vectors(tiny_run, tmp_path):
    from cosent_tf.keras3.encoder import SentenceEncoder

    cfg, start = tiny_run
    texts = texts_of(cfg.valid_file)
    labels = np.repeat(np.loadtxt(cfg.valid_file, dtype=str, delimiter="\t")[:, 2].astype(float), 1)
    before = SentenceEncoder.load(start).encode(texts)
    untrained = _spearman(before, labels)

    metrics = train(cfg)

    assert metrics["keras"] == 3 and metrics["steps"] == 2 * 6
    assert metrics["valid"]["spearman"] > untrained + 0.1, (untrained, metrics["history"])
    model_dir = os.path.join(cfg.output_dir, "model")
    assert sorted(os.listdir(model_dir)) == sorted(
        [
            "bert_config.json",
            "bert_model.ckpt.data-00000-of-00001",
            "bert_model.ckpt.index",
            "checkpoint",
            "cosent_model.json",
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
        texts=np.array(texts),
    )["vectors"]
    np.testing.assert_allclose(on_keras3, on_keras2, atol=1e-5)


def _spearman(vectors, labels):
    from scipy import stats

    cosines = np.sum(vectors[0::2] * vectors[1::2], axis=1)
    return stats.spearmanr(cosines, labels).correlation


class _Interrupted(Exception):
    pass


def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(tiny_run, tmp_path):
    import keras

    from cosent_tf.keras3.backbones import load_backbone

    cfg, _ = tiny_run
    whole = train(RunConfig(**{**cfg.__dict__, "output_dir": str(tmp_path / "whole")}))

    class StopAtSecondEpoch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                raise _Interrupted()

    with pytest.raises(_Interrupted):
        train(cfg, callbacks=[StopAtSecondEpoch()])
    assert os.listdir(os.path.join(cfg.output_dir, "backup"))
    assert not os.path.exists(os.path.join(cfg.output_dir, "metrics.json"))
    resumed = train(cfg)

    assert [row["epoch"] for row in resumed["history"]] == [1, 2]
    assert resumed["steps"] == whole["steps"]
    assert resumed["valid"]["spearman"] == pytest.approx(whole["valid"]["spearman"], abs=1e-6)
    arrays = [
        load_backbone(os.path.join(folder, "model")).backbone.get_weights()
        for folder in (cfg.output_dir, str(tmp_path / "whole"))
    ]
    for a, b in zip(*arrays):
        np.testing.assert_allclose(a, b, atol=1e-6)

    with pytest.raises(Exception, match="holds a finished run"):
        train(cfg)


def test_a_bf16_run_trains_and_puts_the_policy_back(tiny_run):
    import keras

    cfg, _ = tiny_run
    metrics = train(RunConfig(**{**cfg.__dict__, "precision": "bf16", "epochs": 1}))
    assert keras.config.dtype_policy().name == "float32"
    assert np.isfinite(metrics["valid"]["spearman"])
    with open(os.path.join(cfg.output_dir, "model", "cosent_model.json"), encoding="utf-8") as f:
        assert json.load(f)["source"]["precision"] == "bf16"


def test_options_keras3_cannot_honour_are_refused_by_name(tiny_run):
    from cosent_tf.errors import ConfigError

    cfg, _ = tiny_run
    for option, named in (
        ({"architecture": "roformer"}, "architecture 'roformer' is on the Keras 2 engine only"),
        ({"loss": "sbert"}, "--loss sbert: not trained on Keras 3 yet"),
        ({"micro_batch_size": 2}, "--micro-batch-size: the gradient cache"),
        ({"eval_every": 3}, "--eval-every"),
        ({"matryoshka_dims": [8]}, "--matryoshka-dims"),
    ):
        with pytest.raises(ConfigError, match=named):
            resolve(RunConfig(**{**cfg.__dict__, **option}))
    assert not os.path.exists(cfg.output_dir)


MIRRORED = """
import os, sys, json
import numpy as np
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)
import cosent_tf, keras
from cosent_tf.keras3.backbones import backbone_from_config
from cosent_tf.keras3.training import compiled_encoder
from cosent_tf.training.config import RunConfig
from cosent_tf.data.tasks import get_task

config = json.loads(sys.argv[1])
cfg = RunConfig(loss="cosent", lr=1e-2, weight_decay=0.0, warmup=0.0, schedule="constant", pooling="last-avg",
                global_batch_loss=sys.argv[2] == "global")
rng = np.random.default_rng(0)
x = rng.integers(1000, 5000, size=(16, 12)).astype("int32")
x[:, 0] = 101
y = np.repeat(rng.uniform(0, 5, size=8), 2).astype("float32")

def one_step(strategy):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        encoder = compiled_encoder(keras, cfg, backbone_from_config(config), get_task("STS-B"), 10)
        # plain SGD at rate 1, so that the step is the gradient itself (Adam's first step is about
        # lr * sign(gradient), which would hide a gradient R times too large)
        encoder.compile(optimizer=keras.optimizers.SGD(1.0), loss=encoder.loss)
    encoder.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=1, verbose=0, shuffle=False)
    return [np.asarray(w) for w in encoder.get_weights()]

mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert mirrored.num_replicas_in_sync == 2
one = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"))
two = one_step(mirrored)
start = [np.asarray(w) for w in (keras.utils.set_random_seed(3), backbone_from_config(config))[1].get_weights()]
moved = max(float(np.max(np.abs(a - s))) for a, s in zip(one, start))
worst = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two))
print(json.dumps({"moved": moved, "worst": worst}))
"""


@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize("loss", ["global", "per-replica"])
def test_mirrored_step_on_the_global_batch_equals_one_devices_step(loss):
    """One process a strategy pair: a second MirroredStrategy in one process mixes up its collectives."""
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(MIRRORED), json.dumps(TINY), loss],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["moved"] > 1.0  # the gradient (the step of SGD at rate 1) is far from 0
    relative = figures["worst"] / figures["moved"]  # float32 sums in another order differ by about 1e-6 of it
    if loss == "global":
        assert relative < 1e-5, figures
    else:  # each replica ranking its own half is another step: the check tells them apart
        assert relative > 1e-2, figures


def test_the_command_trains_on_keras3_on_this_backend(tmp_path):
    """``cosent-tf train --keras 3`` in a process of its own, on the backend KERAS_BACKEND names; on
    TensorFlow under --strategy mirrored over two logical CPUs (COSENT_TF_CPU_DEVICES)."""
    train_file, valid_file = pair_files(str(tmp_path))
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    backend = os.environ["KERAS_BACKEND"]
    mirrored = ["--strategy", "mirrored"] if backend == "tensorflow" else []
    command = [sys.executable, "-m", "cosent_tf.cli", "train", "--keras", "3", "--train", train_file]
    command += ["--valid", valid_file, "--config", str(config), "--vocab", SHARED_VOCAB, "--epochs", "1"]
    command += ["--batch-size", "8", "--maxlen", "32", "--output-dir", str(tmp_path / "run"), *mirrored]
    env = {**os.environ, "COSENT_TF_CPU_DEVICES": "2"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads(done.stdout)  # the one line on stdout
    assert metrics["backend"] == backend and metrics["replicas"] == (2 if mirrored else 1)
    assert metrics["steps"] == 6 and np.isfinite(metrics["test"]["spearman"])
    with open(tmp_path / "run" / "model" / "cosent_model.json", encoding="utf-8") as f:
        assert json.load(f)["source"]["backend"] == backend
    with open(tmp_path / "run" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["keras"] == 3
