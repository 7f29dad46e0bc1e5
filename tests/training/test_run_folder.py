import json
import os

import pytest

from cosent_tf import (
    ConfigError,
)
from cosent_tf.experiments.scripts import train_main
from cosent_tf.io import folder_lock
from cosent_tf.training.run_folder import RUN_MARKER, check_run_folder, prepare_run_folder

SETTINGS = {"task": "BQ", "architecture": "bert", "lr": 2e-5, "epochs": 2, "eval_every": 0, "output_dir": "x"}


def unfinished_run(folder, settings):
    (folder / RUN_MARKER).write_text("{}")
    (folder / "backup").mkdir(parents=True)
    (folder / "backup" / "state").write_text("saved")
    (folder / "config.json").write_text(json.dumps(settings))


def test_an_unfinished_run_resumes_with_its_settings_and_says_what_may_change(tmp_path):
    unfinished_run(tmp_path, SETTINGS)
    assert prepare_run_folder(tmp_path, SETTINGS) == "resuming the unfinished run in this folder"
    note = prepare_run_folder(tmp_path, {**SETTINGS, "epochs": 3, "eval_every": 5})
    assert note == "resuming the unfinished run in this folder with epochs 2 -> 3, eval_every 0 -> 5"
    with pytest.raises(ConfigError, match=r"lr 2e-05 there, 0.001 now.*nothing was written"):
        prepare_run_folder(tmp_path, {**SETTINGS, "lr": 1e-3})
    with pytest.raises(ConfigError, match=r"epochs 2 there, 1 now \(may only grow\)"):
        prepare_run_folder(tmp_path, {**SETTINGS, "epochs": 1})


def test_a_run_started_before_the_rename_of_model_resumes(tmp_path):
    old = {**SETTINGS, "model": SETTINGS["architecture"]}
    del old["architecture"]
    unfinished_run(tmp_path, old)
    assert prepare_run_folder(tmp_path, SETTINGS) == "resuming the unfinished run in this folder"
    with pytest.raises(ConfigError, match="architecture 'bert' there, 'nezha' now"):
        prepare_run_folder(tmp_path, {**SETTINGS, "architecture": "nezha"})


@pytest.mark.parametrize(
    "kind, unread, read", [("feature", "head_input", "pooling"), ("interaction", "pooling", "head_input")]
)
def test_a_run_that_recorded_the_setting_its_kind_does_not_read_resumes(tmp_path, kind, unread, read):
    """Earlier versions recorded a cross-encoder's pooling and a sentence encoder's head input, which
    no run reads (and which are None now): such a run resumes; the setting its kind reads still counts."""
    now = {**SETTINGS, "kind": kind, unread: None, read: "cls"}
    unfinished_run(tmp_path, {**now, unread: "cls"})
    assert prepare_run_folder(tmp_path, now) == "resuming the unfinished run in this folder"
    with pytest.raises(ConfigError, match=f"{read} 'cls' there, 'pooler' now"):
        prepare_run_folder(tmp_path, {**now, read: "pooler"})


def test_a_finished_run_is_replaced_only_when_asked(tmp_path):
    (tmp_path / RUN_MARKER).write_text("{}")
    (tmp_path / "config.json").write_text(json.dumps(SETTINGS))
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds a finished run"):
        prepare_run_folder(tmp_path, SETTINGS)
    assert prepare_run_folder(tmp_path, SETTINGS, overwrite=True).startswith("--overwrite")
    assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_MARKER]  # the new run's


def test_folders_of_other_files_or_holding_an_input_are_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not a cosent-tf training run \\(it holds notes.txt\\)"):
        check_run_folder(tmp_path)
    (tmp_path / "notes.txt").unlink()
    (tmp_path / "vocab.txt").write_text("[PAD]")
    with pytest.raises(ConfigError, match="holds the run's input"):
        check_run_folder(tmp_path, inputs=[str(tmp_path / "vocab.txt")])


@pytest.mark.parametrize("name", ["run[1]", "runs*", "what?", "back\\slash"])
def test_a_run_folder_whose_path_tensorflow_would_glob_is_refused_before_anything_is_written(tmp_path, name):
    folder = tmp_path / name / "out"
    with pytest.raises(ConfigError, match=r"reads as a pattern .* could not resume; nothing was written"):
        check_run_folder(str(folder))
    assert not (tmp_path / name).exists()


@pytest.mark.heavy
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


def test_the_keras_free_run_rules_are_the_keras2_engines():
    """run_rules (imported by the Keras 3 trainer too) and the Keras 2 engine name one model folder."""
    from cosent_tf.inference.model_dir import MODEL_FOLDER
    from cosent_tf.models.checkpoints import TF_GLOB_CHARACTERS
    from cosent_tf.training import run_folder, run_rules

    assert run_rules.MODEL_FOLDER is MODEL_FOLDER and run_rules.TF_GLOB_CHARACTERS is TF_GLOB_CHARACTERS
    assert run_folder.prepare_run_folder is run_rules.prepare_run_folder
