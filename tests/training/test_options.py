"""Each run option reaches the model, and missing or bad inputs stop a run before it reads data.

The bodies are written over the process's Keras (tests/keras3/test_options.py runs them on Keras 3):
they spy on the engine's Matcher and datasets, read what a run wrote, and load its model with either
Keras's encoder (tests/either_keras.py)."""

import json
import logging
import os

import numpy as np
import pytest

from cosent_tf.data.benchmarks import nli_files
from cosent_tf.errors import ConfigError, DataError
from cosent_tf.experiments.scripts import train_main
from cosent_tf.models.checkpoint_files import read_checkpoint_arrays
from cosent_tf.training import engine as training
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import train
from cosent_tf.training.run_data import load_run_data
from tests.either_keras import sentence_encoder, write_random_checkpoint
from tests.training.run_helpers import tiny_run, tiny_run_config


@pytest.fixture
def spy(monkeypatch):
    """Records what the engine fits: the Keras model, loss and labels, and the dataset options."""
    seen = {}
    original = training.Matcher.training_model

    def training_model(self, train):
        seen["model"], seen["loss"], seen["labels"] = result = original(self, train)
        seen["raw_labels"] = np.asarray(train.labels)
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


@pytest.mark.backends("tensorflow")  # JAX's mirrored strategy is one program over the global batch (keras_support)
def test_the_per_replica_loss_under_a_strategy_of_replicas_reaches_the_fitted_model(tiny_setup, spy):
    """--per-replica-loss under a strategy of replicas (one device's mirrored here); the default,
    the global batch's loss: the bf16 run of the test below."""
    from cosent_tf.losses import CoSENTLoss

    tiny_run(tiny_setup, "per-replica", task="BQ", global_batch_loss=False, strategy="mirrored")
    assert isinstance(spy["loss"], CoSENTLoss) and spy["loss"].global_batch is False


@pytest.mark.heavy
def test_loss_options_and_label_handling_reach_the_fitted_model(tiny_setup, spy):
    from cosent_tf.losses import CosineMSELoss, SentenceBertSoftmaxLoss, ThresholdContrastiveLoss

    # CoSENT's scale: the bf16 run of the test below
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


def _generators():
    """A draw from each generator a run seeds and must put back: Python's and NumPy's, and on Keras 2
    TensorFlow's global one (Keras 3's seeding leaves TensorFlow's global seed at the run's seed, as
    cosent_tf.process_keras.random_seed says)."""
    import random

    from cosent_tf.process_keras import KERAS_MAJOR, tf

    draws = (random.random(), np.random.random())
    return draws + ((float(tf.random.uniform([])),) if KERAS_MAJOR == 2 else ())


def _seed_generators(seed):
    import random

    from cosent_tf.process_keras import tf

    random.seed(seed), np.random.seed(seed), tf.random.set_seed(seed)


@pytest.mark.heavy
def test_precision_pooling_and_scale_reach_the_model_and_the_run_leaves_policy_and_generators_as_they_were(
    tiny_setup, spy
):
    """train() sets the dtype policy and seeds every generator, yet leaves both as they were: the
    bf16 run is the one that shows it (a CoSENT run, with its scale given)."""
    from cosent_tf.losses import CoSENTLoss
    from cosent_tf.process_keras import keras

    tmp_path, _ = tiny_setup
    _seed_generators(5)
    expected = _generators()
    _seed_generators(5)
    metrics = tiny_run(tiny_setup, "bf16", task="BQ", precision="bf16", pooling="last-avg", scale=7.0)
    assert isinstance(spy["loss"], CoSENTLoss) and spy["loss"].scale == 7.0
    assert spy["loss"].global_batch is True  # by default the loss ranks the global batch
    assert spy["pair_dataset"]["group_by_length"] is True
    assert _generators() == expected
    assert keras.mixed_precision.global_policy().name == "float32"
    assert np.isfinite(metrics["test"]["spearman"])
    weighted = [layer for layer in spy["model"].layers if layer.weights]
    assert weighted and {layer.dtype_policy.name for layer in weighted} == {"mixed_bfloat16"}
    (pooling,) = [layer for layer in spy["model"].layers if type(layer).__name__ == "Pooling"]
    assert pooling.mode == "last-avg"
    spec = json.loads((tmp_path / "bf16" / "model" / "cosent_model.json").read_text())
    assert (spec["pooling"], spec["source"]["precision"]) == ("last-avg", "bf16")


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
    """A run from a checkpoint starts from its weights: with lr 1e-12 the trained model is the checkpoint."""
    tmp_path, _ = tiny_setup
    write_random_checkpoint(tmp_path / "ckpt", tmp_path / "config.json", tmp_path / "vocab.txt")
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
            "--lr",
            "1e-12",
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
    started = read_checkpoint_arrays(str(tmp_path / "ckpt" / "bert_model.ckpt"))
    trained = read_checkpoint_arrays(str(tmp_path / "from-ckpt" / "model" / "bert_model.ckpt"))
    # the transformer's every weight, and BERT's pooler where the model folder keeps it (Keras 3's
    # keeps none that pooling does not use), each as the checkpoint holds it
    assert {name for name in started if not name.startswith("bert/pooler/")} <= set(trained) <= set(started)
    for name, array in trained.items():
        np.testing.assert_allclose(array, started[name], atol=1e-6, err_msg=name)


def test_a_run_from_random_weights_says_so_and_so_does_its_model(bq_run, tmp_path, caplog, capsys):
    """The zoo's BQ run is one from random weights (no --checkpoint)."""
    assert bq_run.stderr.splitlines()[0].startswith("NOTE: no --checkpoint: the model starts from random weights")
    assert json.loads((bq_run.run / "metrics.json").read_text())["random_weights"] is True
    source = json.loads((bq_run.run / "model" / "cosent_model.json").read_text())["source"]
    assert (source["random_weights"], source["checkpoint"]) == (True, None)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        sentence_encoder(bq_run.run / "model")
    assert "this model was trained from random weights (no --checkpoint)" in caplog.text
    # fine-tuning that model keeps saying so
    data_dir_and_batching = bq_run.options[:2] + bq_run.options[6:]
    train_main(
        ["BQ", "--epochs", "1", "--checkpoint", str(bq_run.run / "model"), "--output-dir", str(tmp_path / "again")]
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


def test_maxlen_beyond_the_position_embeddings_stops_before_training(tiny_setup):
    tmp_path, options = tiny_setup
    with pytest.raises(SystemExit, match="maxlen 300 is longer than the model's 256 position embeddings"):
        train_main(["BQ", "--maxlen", "300", "--output-dir", str(tmp_path / "long")] + options)
    assert not (tmp_path / "long" / "backup").exists()


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
