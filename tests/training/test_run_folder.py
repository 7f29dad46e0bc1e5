import json

import pytest

from cosent_tf import ConfigError
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
