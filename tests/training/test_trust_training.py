"""Issue 33's faults of the training run and its folder: a folder of the user's is never taken
for a run, a resume never mixes changed inputs, and a run that can learn nothing says so."""

import json
import math
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, build_encoder, save_checkpoint
from cosent_tf.errors import NonFiniteLossError
from cosent_tf.losses import LOSSES, get_loss
from cosent_tf.models.sources import ModelSource
from cosent_tf.training import engine as training
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import train
from cosent_tf.training.run_data import load_run_data, run_inputs
from cosent_tf.training.run_folder import RUN_MARKER, RUN_OUTPUTS, check_run_folder, fingerprints, prepare_run_folder
from tests.helpers import tiny_pairs, write_config
from tests.training import run_helpers

SETTINGS = {
    **json.loads(json.dumps(vars(RunConfig(task="BQ", output_dir="x")))),
    "batch_size": 8,
    "epochs": 2,
    "lr": 1e-3,
}


def tiny_config(tmp_path, **settings):
    """A BQ run of tiny_setup's data, config and vocabulary into tmp_path/run."""
    return run_helpers.tiny_config(tmp_path, **{"task": "BQ", **settings})


def contents(folder):
    """{relative path: content} of every file under ``folder`` but a run's lock, links not followed."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            if name == ".lock" and root == str(folder):
                continue
            path = os.path.join(root, name)
            if os.path.islink(path):
                found[os.path.relpath(path, folder)] = "-> " + os.readlink(path)
            else:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = f.read()
    return found


# ---------------------------------------------------------------- E-1: a folder proves it is a run


def users_folder(folder, config):
    folder.mkdir()
    (folder / "config.json").write_text(config)
    (folder / "model").mkdir()
    (folder / "model" / "weights.bin").write_text("the user's")
    (folder / "metrics.json").write_text("{}")


@pytest.mark.parametrize(
    "config",
    ['{"learning_rate": 0.1}', "[1, 2]", "not json", json.dumps({**SETTINGS, "mine": 1})],
    ids=["a config of the user's", "a list", "not JSON", "run settings and more"],
)
@pytest.mark.parametrize("linked", [False, True], ids=["folder", "linked --output-dir"])
def test_a_folder_with_a_config_json_but_no_marker_is_refused_and_kept(tmp_path, config, linked):
    users_folder(tmp_path / "mine", config)
    out = tmp_path / "mine"
    if linked:
        os.symlink(tmp_path / "mine", tmp_path / "link")
        out = tmp_path / "link"
    before = contents(tmp_path / "mine")
    message = r"does not look like a cosent-tf training run \(it holds config.json, metrics.json, model but no "
    for attempt in (
        lambda: check_run_folder(str(out), settings=SETTINGS),
        lambda: prepare_run_folder(str(out), SETTINGS, overwrite=True),
        lambda: prepare_run_folder(str(out), SETTINGS),
    ):
        with pytest.raises(ConfigError, match=message + r"\.cosent-run, which every run writes first\); nothing was"):
            attempt()
        assert contents(tmp_path / "mine") == before


def test_training_with_overwrite_into_a_users_folder_is_refused_and_removes_nothing(tiny_setup):
    from cosent_tf.cli import train_main

    tmp_path, options = tiny_setup
    users_folder(tmp_path / "mine", json.dumps({"hidden_size": 16}))
    os.symlink(tmp_path / "mine", tmp_path / "link")
    before = contents(tmp_path / "mine")
    for out in ("mine", "link"):
        with pytest.raises(SystemExit, match=f"error: .*{out}: does not look like a cosent-tf training run"):
            train_main(["BQ", "--epochs", "1", "--output-dir", str(tmp_path / out), "--overwrite", *options])
        assert contents(tmp_path / "mine") == before and not (tmp_path / "mine" / ".lock").exists()


def marked_run(folder, finished=True):
    folder.mkdir(exist_ok=True)
    (folder / RUN_MARKER).write_text(json.dumps({"format": "cosent-tf-run", "inputs": {}}))
    (folder / "config.json").write_text(json.dumps(SETTINGS))
    (folder / "valid_metrics.csv").write_text("epoch,step\n")
    (folder / "backup").mkdir()
    (folder / "backup" / "state").write_text("saved")
    if finished:
        (folder / "model").mkdir()
        for name in ("cosent_model.json", "bert_config.json", "vocab.txt", "bert_model.ckpt.index"):
            (folder / "model" / name).write_text("run's")
        (folder / "metrics.json").write_text("{}")


@pytest.mark.parametrize("output", ["model", "backup"])
def test_overwrite_removes_a_link_among_the_outputs_never_what_it_points_to(tmp_path, output):
    marked_run(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("the user's")
    path = tmp_path / "run" / output
    for inside in sorted(path.iterdir()):
        inside.unlink()
    path.rmdir()
    os.symlink(elsewhere, path)
    assert prepare_run_folder(str(tmp_path / "run"), SETTINGS, overwrite=True).startswith("--overwrite")
    assert sorted(os.listdir(tmp_path / "run")) == [RUN_MARKER]
    assert contents(elsewhere) == {"keep.txt": b"the user's"}


@pytest.mark.parametrize(
    "foreign", ["notes.txt", "weights/", "bert_model.ckpt.data/"], ids=["a file", "a folder", "a folder named as ours"]
)
def test_overwrite_refuses_a_model_folder_holding_what_a_run_does_not_write(tmp_path, foreign):
    marked_run(tmp_path / "run")
    mine = tmp_path / "run" / "model" / foreign.rstrip("/")
    if foreign.endswith("/"):
        mine.mkdir()
        (mine / "inside.txt").write_text("the user's")
    else:
        mine.write_text("the user's")
    before = contents(tmp_path / "run")
    with pytest.raises(
        ConfigError,
        match=rf"run/model: holds {foreign.rstrip('/')}, which a run does not write; nothing was removed: move them",
    ):
        prepare_run_folder(str(tmp_path / "run"), SETTINGS, overwrite=True)
    assert contents(tmp_path / "run") == before


def test_overwrite_refuses_a_folder_where_a_run_writes_a_file(tmp_path):
    marked_run(tmp_path / "run")
    (tmp_path / "run" / "best.weights.h5").mkdir()
    (tmp_path / "run" / "best.weights.h5" / "mine.txt").write_text("the user's")
    before = contents(tmp_path / "run")
    with pytest.raises(ConfigError, match=r"best.weights.h5: is a folder, which a run does not write there; nothing"):
        prepare_run_folder(str(tmp_path / "run"), SETTINGS, overwrite=True)
    assert contents(tmp_path / "run") == before


def test_a_new_run_writes_its_marker_before_anything_else(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("")
    assert prepare_run_folder(str(out), SETTINGS, inputs={"/data/x": "abc"}) is None
    assert sorted(os.listdir(out)) == [RUN_MARKER, ".lock"]
    assert json.loads((out / RUN_MARKER).read_text())["inputs"] == {"/data/x": "abc"}
    assert RUN_MARKER in RUN_OUTPUTS


def earlier_version_run(folder, finished):
    """A run folder as cosent-tf 0.3 wrote it: no marker, "model" for "architecture"."""
    old = {k: v for k, v in SETTINGS.items() if k not in ("architecture", "worker_timeout")}
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**old, "model": "bert"}))
    (folder / "valid_metrics.csv").write_text("epoch,step\n")
    if finished:
        (folder / "model").mkdir()
        (folder / "model" / "cosent_model.json").write_text("{}")
        (folder / "metrics.json").write_text("{}")
    else:
        (folder / "backup").mkdir()
        (folder / "backup" / "state").write_text("saved")


def test_a_finished_run_of_the_earlier_version_is_recognised_and_an_unfinished_one_refused(tmp_path):
    earlier_version_run(tmp_path / "finished", finished=True)
    check_run_folder(str(tmp_path / "finished"), settings=SETTINGS)
    with pytest.raises(ConfigError, match=r"holds a finished run \(metrics.json\); nothing was written"):
        prepare_run_folder(str(tmp_path / "finished"), SETTINGS)
    assert prepare_run_folder(str(tmp_path / "finished"), SETTINGS, overwrite=True).startswith("--overwrite")
    assert os.listdir(tmp_path / "finished") == [RUN_MARKER]

    earlier_version_run(tmp_path / "unfinished", finished=False)
    before = contents(tmp_path / "unfinished")
    for overwrite in (False, True):
        with pytest.raises(
            ConfigError,
            match=r"unfinished: holds an unfinished run of an earlier cosent-tf version \(no \.cosent-run\), which "
            "this version does not resume; nothing was written",
        ):
            prepare_run_folder(str(tmp_path / "unfinished"), SETTINGS, overwrite=overwrite)
    assert contents(tmp_path / "unfinished") == before


# ---------------------------------------------------------------- C-6: the saved settings are read as JSON


@pytest.mark.parametrize(
    "saved, message",
    [
        ("[1, 2]", r"config.json: the run's settings \(config.json\) must be a JSON object, not array"),
        ('"BQ"', r"config.json: the run's settings \(config.json\) must be a JSON object, not string"),
        ("{", r"config.json, line 1: the run's settings \(config.json\) is not valid JSON"),
    ],
)
def test_an_unfinished_run_whose_config_json_is_not_settings_is_a_config_error(tmp_path, saved, message):
    marked_run(tmp_path, finished=False)
    (tmp_path / "config.json").write_text(saved)
    before = contents(tmp_path)
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path)) + "/" + message):
        prepare_run_folder(str(tmp_path), SETTINGS)
    assert contents(tmp_path) == before


# ---------------------------------------------------------------- D-1: a resume reads the inputs it started with


def test_every_file_a_run_reads_is_fingerprinted(tiny_setup):
    tmp_path, _ = tiny_setup
    benchmark = tiny_config(tmp_path).resolved()
    senteval = tmp_path / "data" / "senteval_cn" / "BQ"
    expected = [senteval / f"BQ.{split}.data" for split in ("valid", "test", "train")]
    expected += [tmp_path / "config.json", tmp_path / "vocab.txt"]
    assert run_inputs(benchmark, load_run_data(benchmark)) == [str(p) for p in expected]

    nli = tiny_config(tmp_path, task="NLI").resolved()
    paths = run_inputs(nli, load_run_data(nli))
    assert paths[0] == str(tmp_path / "data" / "cnsd" / "cnsd-snli" / "dev.jsonl") and len(paths) == 1 + 10 + 2

    rows = tiny_pairs(np.random.default_rng(0), 40, scores=False)
    for name in ("train", "valid", "test"):
        (tmp_path / f"{name}.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows), encoding="utf-8")
    own = {f"{name}_file": str(tmp_path / f"{name}.tsv") for name in ("train", "valid", "test")}
    save_checkpoint(
        build_encoder(str(tmp_path / "config.json")),
        tmp_path / "ckpt",
        str(tmp_path / "config.json"),
        vocab_path=str(tmp_path / "vocab.txt"),
    )
    cfg = tiny_config(tmp_path, task="own", checkpoint=str(tmp_path / "ckpt"), config=None, vocab=None, **own)
    cfg = cfg.resolved()
    weights = sorted(str(p) for p in (tmp_path / "ckpt").glob("bert_model.ckpt.*"))
    assert len(weights) >= 2  # the index and the data
    assert run_inputs(cfg, load_run_data(cfg)) == [*own.values(), cfg.config, cfg.vocab, *weights]
    assert cfg.config == str(tmp_path / "ckpt" / "bert_config.json")


def test_a_hugging_face_checkpoint_is_fingerprinted_by_the_weights_it_is_read_from(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5"):
        (folder / name).write_text("{}")
    cfg = SimpleNamespace(config=str(folder / "config.json"), vocab=str(folder / "vocab.txt"), checkpoint=str(folder))
    data = SimpleNamespace(files=["train.tsv"])
    # The folder's files are stand-ins: its source is made here, not opened (which would read them).
    source = ModelSource(str(folder), "huggingface", cfg.config, {}, cfg.vocab, str(folder))
    assert run_inputs(cfg, data, source) == ["train.tsv", cfg.config, cfg.vocab, str(folder / "model.safetensors")]
    (folder / "model.safetensors").unlink()
    for name in (
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ):
        (folder / name).write_text("{}")
    shards = [str(folder / f"model-0000{i}-of-00002.safetensors") for i in (1, 2)]
    assert run_inputs(cfg, data, source)[3:] == [str(folder / "model.safetensors.index.json"), *shards]
    for name in ("model.safetensors.index.json", *shards):
        os.remove(folder / name)
    assert run_inputs(cfg, data, source)[3:] == [str(folder / "pytorch_model.bin")]


def test_fingerprints_are_of_the_content_and_refuse_a_pipe(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    first = fingerprints([str(tmp_path / "a.txt")])
    assert first == fingerprints([str(tmp_path / "." / "a.txt")])  # spelled otherwise, the same file
    (tmp_path / "a.txt").write_text("two")
    assert fingerprints([str(tmp_path / "a.txt")]) != first
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(DataError, match="pipe: not a regular file"):
        fingerprints([str(tmp_path / "pipe")])


def test_an_unfinished_run_is_not_resumed_once_an_input_changed(tmp_path):
    marked_run(tmp_path / "run", finished=False)
    (tmp_path / "train.tsv").write_text("a\tb\t1\n")
    (tmp_path / "config.json").write_text("{}")
    paths = [str(tmp_path / "train.tsv"), str(tmp_path / "config.json")]
    marker = tmp_path / "run" / RUN_MARKER
    marker.write_text(json.dumps({"format": "cosent-tf-run", "inputs": fingerprints(paths)}))
    before = contents(tmp_path / "run")
    assert prepare_run_folder(str(tmp_path / "run"), SETTINGS, inputs=fingerprints(paths)).startswith("resuming")
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 3}')
    with pytest.raises(
        ConfigError,
        match=r"run: holds an unfinished run whose input files differ now \("
        + re.escape(str(tmp_path / "config.json"))
        + r": changed since "
        r"the run started\); nothing was written: put them back as they were to resume it, or pass --overwrite",
    ):
        prepare_run_folder(str(tmp_path / "run"), SETTINGS, inputs=fingerprints(paths))
    (tmp_path / "extra.tsv").write_text("a\tb\t0\n")
    with pytest.raises(ConfigError, match="extra.tsv: not read when the run started"):
        prepare_run_folder(str(tmp_path / "run"), SETTINGS, inputs=fingerprints(paths + [str(tmp_path / "extra.tsv")]))
    assert contents(tmp_path / "run") == before


@pytest.mark.parametrize(
    "change",
    ["train split", "valid split", "model config", "vocabulary"],
)
def test_a_run_interrupted_then_rerun_after_an_input_changed_in_place_is_refused(change, tiny_setup, monkeypatch):
    tmp_path, _ = tiny_setup
    cfg = tiny_config(tmp_path, epochs=2)
    out = tmp_path / "run"
    if change == "train split":  # one end-to-end run; the other cases refuse before training
        train(cfg)
        (out / "metrics.json").unlink()  # as if stopped before the end, with training state saved
        (out / "backup").mkdir()
        (out / "backup" / "state").write_text("")
    else:  # a run folder as that run leaves it once stopped
        monkeypatch.setattr(training, "_fit", lambda *args, **kwargs: pytest.fail("it trained"))
        out.mkdir()
        resolved = cfg.resolved()
        (out / RUN_MARKER).write_text(
            json.dumps({"inputs": fingerprints(run_inputs(resolved, load_run_data(resolved)))})
        )
        (out / "config.json").write_text(json.dumps(vars(resolved)))
        (out / "backup").mkdir()
        (out / "backup" / "state").write_text("")
    path = {
        "train split": tmp_path / "data" / "senteval_cn" / "BQ" / "BQ.train.data",
        "valid split": tmp_path / "data" / "senteval_cn" / "BQ" / "BQ.valid.data",
        "model config": tmp_path / "config.json",
        "vocabulary": tmp_path / "vocab.txt",
    }[change]
    if change == "model config":  # 1 -> 2 layers: the saved state would be restored into another model
        config = json.loads(path.read_text())
        write_config(path, vocab_size=config["vocab_size"], hidden=16, layers=2, max_position=256)
    elif change == "vocabulary":
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join(lines[:-2] + lines[-2:][::-1]) + "\n", encoding="utf-8")
    else:
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    before = contents(out)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: changed since the run started); nothing was written")):
        train(cfg)
    assert contents(out) == before


# ---------------------------------------------------------------- D-5: a batch must give the loss something


def test_each_ranking_loss_refuses_batches_it_cannot_rank():
    for entry in LOSSES.values():
        entry.check_batch(2)
        entry.check_batch(8, replicas=4, global_batch=False)
        if entry.min_pairs == 1:
            entry.check_batch(1)
            entry.check_batch(4, replicas=4, global_batch=False)
    assert {key for key, entry in LOSSES.items() if entry.min_pairs > 1} == {
        ("feature", "cosent"),
        ("interaction", "cosent"),
        ("feature", "mnrl"),  # in-batch negatives: the other examples of the batch
        ("feature", "angle"),
        ("feature", "cosent-ibn"),
    }
    for kind in ("feature", "interaction"):
        cosent = get_loss(kind, "cosent")
        with pytest.raises(
            ConfigError,
            match=r"--batch-size 1: the cosent loss ranks the pairs of a batch against each other, so a batch of "
            "fewer than 2 pairs gives a loss of 0 at every step and the model never changes; pass --batch-size 2",
        ):
            cosent.check_batch(1)
        cosent.check_batch(4, replicas=4)  # the global batch is ranked
        with pytest.raises(
            ConfigError,
            match=r"--batch-size 4 with --per-replica-loss gives each of the 4 replicas 1 pair, .* needs at least 2 "
            r"there .*; pass --batch-size 8 or more, or leave out --per-replica-loss",
        ):
            cosent.check_batch(4, replicas=4, global_batch=False)


@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_a_cosent_run_of_one_pair_batches_is_refused_before_anything_is_written(kind, tiny_setup):
    tmp_path, _ = tiny_setup
    with pytest.raises(ConfigError, match="--batch-size 1: the cosent loss ranks the pairs"):
        train(tiny_config(tmp_path, kind=kind, batch_size=1))
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- D-6: a run that never validated finitely


def test_a_run_whose_validation_is_never_finite_fails_and_saves_no_model(tiny_setup, monkeypatch):
    tmp_path, _ = tiny_setup
    monkeypatch.setattr(training, "task_metrics", lambda scores, labels, **_: {"spearman": math.nan})
    with pytest.raises(
        NonFiniteLossError,
        match=r"validation never gave a finite spearman \(not at the end of any of the 2 epochs\): the model "
        r"diverged, or it scores every valid pair alike; nothing was saved as the model \(no model/ or "
        r"metrics.json in .*run\)\. Lower --lr .* with --overwrite",
    ):
        train(tiny_config(tmp_path, epochs=2))
    out = tmp_path / "run"
    assert not (out / "model").exists() and not (out / "metrics.json").exists()
    assert (out / "backup").is_dir() and (out / RUN_MARKER).exists()
    check_run_folder(str(out))  # still a run: resumed, or replaced with --overwrite


# ---------------------------------------------------------------- D-11: numbers in range, for Python users too


@pytest.mark.parametrize(
    "setting, value, message",
    [
        (
            "epsilon",
            math.inf,
            "--epsilon \\(RunConfig.epsilon\\) is inf: the contrastive loss's cosine threshold "
            "must be at least -1 and below 1",
        ),
        ("epsilon", 5.0, "is 5.0: the contrastive loss's cosine threshold must be at least -1 and below 1"),
        ("epsilon", 1, "is 1: the contrastive loss's cosine threshold"),
        ("epsilon", -1.5, "is -1.5: the contrastive loss's"),
        ("epsilon", math.nan, "--epsilon \\(RunConfig.epsilon\\) is nan"),
        ("scale", 0.0, "--scale \\(RunConfig.scale\\) is 0.0: CoSENT's scale \\(lambda\\) must be above 0"),
        ("scale", -math.inf, "--scale .* is -inf"),
        ("lr", 0.0, "--lr \\(RunConfig.lr\\) is 0.0: the learning rate must be above 0"),
        ("lr", math.nan, "--lr .* is nan"),
        ("lr", math.inf, "--lr .* is inf"),
        ("weight_decay", -0.1, "--weight-decay .* is -0.1: the weight decay must be at least 0"),
        ("warmup", 1.5, "--warmup .* is 1.5: the warm-up's fraction of all steps must be at least 0 and at most 1"),
        ("valid_fraction", 1.0, "--valid-fraction .* is 1.0: .* must be above 0 and below 1"),
        ("valid_fraction", 0, "--valid-fraction .* is 0:"),
        ("train_from_valid", 1.0, "--train-from-valid .* is 1.0: the fraction of valid trained on"),
        ("worker_timeout", 0.0, "--worker-timeout .* is 0.0"),
        ("batch_size", 0, "--batch-size \\(RunConfig.batch_size\\) is 0: the pairs per batch must be at least 1"),
        ("batch_size", 2.5, "--batch-size \\(RunConfig.batch_size\\) must be an integer, not 2.5"),
        ("batch_size", "8", "must be an integer, not '8'"),
        ("epochs", True, "--epochs .* must be an integer, not True"),
        ("maxlen", 2, "--maxlen .* is 2: the tokens per text must be at least 3"),
        ("eval_every", -1, "--eval-every .* is -1"),
        ("micro_batch_size", 0, "--micro-batch-size .* is 0"),
        ("lr", "1e-3", "--lr .* must be a number, not '1e-3'"),
    ],
)
def test_numbers_out_of_range_are_refused_by_run_config(setting, value, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(task="BQ", loss="contrastive", **{setting: value}).resolved()


def test_numbers_at_the_ends_of_their_ranges_pass_and_just_beyond_do_not():
    for epsilon in (-1, -1.0, 0.0, 0.9, np.float32(0.5)):
        assert RunConfig(loss="contrastive", epsilon=epsilon).resolved().epsilon == epsilon
    settings = dict(lr=1e-9, scale=1e-3, weight_decay=0, warmup=1.0, valid_fraction=0.5, batch_size=np.int64(2))
    RunConfig(train_file="pairs.tsv", eval_every=0, backup_every=0, maxlen=3, **settings).resolved()
    with pytest.raises(ConfigError, match="--epsilon .* is 1.0"):  # just beyond
        RunConfig(loss="contrastive", epsilon=1.0).resolved()


# ---------------------------------------------------------------- C-5: a split of no pairs


@pytest.mark.parametrize(
    "count, fraction, message",
    [
        (2, 0.1, r"2 pairs: --valid-fraction 0.1 leaves 0 to be held out as valid and 2 to be trained on"),
        (1, 0.5, r"1 pair: --valid-fraction 0.5 leaves 0 to be held out as valid and 1 to be trained on"),
        (4, 0.9, r"4 pairs: --valid-fraction 0.9 leaves 4 to be held out as valid and 0 to be trained on"),
    ],
)
def test_own_files_whose_hold_out_leaves_a_part_empty_are_refused(count, fraction, message, tiny_setup):
    tmp_path, _ = tiny_setup
    rows = [(a, b, i % 2) for i, (a, b, _) in enumerate(tiny_pairs(np.random.default_rng(0), count, scores=False))]
    (tmp_path / "few.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows), encoding="utf-8")
    cfg = tiny_config(tmp_path, task="few", train_file=str(tmp_path / "few.tsv"), valid_fraction=fraction)
    with pytest.raises(
        DataError,
        match=f"few.tsv: {message}, and a run needs both; use a larger file, another --valid-fraction, or "
        "pass --valid FILE",
    ):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_training_on_so_much_of_valid_that_none_is_left_is_refused(tiny_setup):
    tmp_path, _ = tiny_setup
    (tmp_path / "data" / "senteval_cn" / "LCQMC" / "LCQMC.train.data").unlink()
    with pytest.raises(
        DataError,
        match=r"LCQMC.valid.data: 24 pairs: --train-from-valid 0.99 leaves 24 to be trained on and 0 to be validated "
        "on, and a run needs both; use a larger file, another --train-from-valid$",
    ):
        train(tiny_config(tmp_path, task="LCQMC", train_from_valid=0.99))
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- a pipe as --train


@pytest.mark.parametrize("option", ["train_file", "valid_file", "test_file"])
@pytest.mark.parametrize("special", ["pipe", "folder"])
def test_a_pipe_or_folder_given_as_a_data_file_is_named_as_such(option, special, tiny_setup):
    tmp_path, _ = tiny_setup
    rows = tiny_pairs(np.random.default_rng(0), 20, scores=False)
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows), encoding="utf-8")
    if special == "pipe":
        os.mkfifo(tmp_path / "special")
    else:
        (tmp_path / "special").mkdir()
    files = {"train_file": str(tmp_path / "pairs.tsv"), option: str(tmp_path / "special")}
    flag = "--" + option.split("_")[0]
    what = "a pipe \\(FIFO\\), which can be read only once" if special == "pipe" else "a folder"
    with pytest.raises(DataError, match=rf"special: {flag} is {what}, not a regular file: a run reads its files"):
        train(tiny_config(tmp_path, task="own", **files))  # a pipe nobody writes to: read, it would hang
    assert not (tmp_path / "run").exists()
    with pytest.raises(DataError, match="absent.tsv \\(from .*\\): file not found"):
        train(tiny_config(tmp_path, task="own", **{**files, option: "absent.tsv"}))
