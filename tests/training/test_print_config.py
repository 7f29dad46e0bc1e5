"""--print-config: the resolved settings of a run, printed without training or writing; and the
guide's table of the defaults for one's own files says what it prints."""

import json
import os
import re

import pytest

from cosent_tf.cli import main
from cosent_tf.data.tasks import FILES, TASKS, Task
from cosent_tf.experiments.scripts import train_main
from cosent_tf.training.recipes import RECIPES
from tests.helpers import ROOT, SHARED_DATA, SHARED_VOCAB, requires_shared_data

pytestmark = requires_shared_data  # the default vocabulary is the shared one


def printed_config(capsys, run):
    run()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def own_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output folder, runs/..., would be made here
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"句子{i}\t句子{i + 1}\t{i % 2}\n" for i in range(20)), encoding="utf-8")
    return path


def test_print_config_gives_the_resolved_settings_of_own_files_and_writes_nothing(capsys, own_file, tmp_path):
    before = sorted(os.listdir(tmp_path))
    config = printed_config(
        capsys, lambda: main(["train", "--train", str(own_file), "--vocab", SHARED_VOCAB, "--print-config"])
    )
    own, blog = Task("own", data=FILES), RECIPES["blog"]
    assert (config["epochs"], config["batch_size"], config["maxlen"]) == (own.epochs, own.batch_size, own.maxlen)
    assert (config["lr"], config["pooling"], config["schedule"]) == (blog.lr, blog.pooling, blog.schedule)
    assert config["task"] == "pairs" and config["output_dir"] == os.path.join("runs", "cosent-pairs")
    assert config["vocab"] == SHARED_VOCAB and config["checkpoint"] is None
    assert sorted(os.listdir(tmp_path)) == before  # no run folder, nothing read but config and vocabulary


def test_print_config_shows_what_the_options_and_the_kind_change(capsys, own_file):
    arguments = ["train", "--train", str(own_file), "--vocab", SHARED_VOCAB, "--print-config"]
    config = printed_config(capsys, lambda: main([*arguments, "--kind", "interaction", "--epochs", "2"]))
    assert config["epochs"] == 2 and config["kind"] == "interaction"
    assert config["output_dir"] == os.path.join("runs", "interact-cosent-pairs")
    assert config["maxlen"] == Task("own", data=FILES).interaction_maxlen
    paper = printed_config(capsys, lambda: main([*arguments, "--recipe", "paper"]))
    assert (paper["pooling"], paper["weight_decay"]) == (RECIPES["paper"].pooling, RECIPES["paper"].weight_decay)


def test_a_training_script_prints_its_task_s_settings(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = printed_config(capsys, lambda: train_main(["STS-B", "--data-dir", SHARED_DATA, "--print-config"]))
    assert (config["task"], config["batch_size"], config["epochs"]) == (
        "STS-B",
        TASKS["STS-B"].batch_size,
        TASKS["STS-B"].epochs,
    )
    assert os.listdir(tmp_path) == []


def test_print_config_checks_what_a_run_would_check_first(capsys, own_file):
    with pytest.raises(SystemExit):
        main(["train", "--train", str(own_file), "--vocab", SHARED_VOCAB, "--epochs", "0", "--print-config"])
    assert "--epochs" in capsys.readouterr().err


def guide_defaults():
    """The guide's table of one's own files' defaults: option -> the value written first."""
    with open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("| option | your own files |") :].split("\n\n")[0]
    rows = re.findall(r"^\s*\| `(--[a-z-]+)` \| ([^|(,]+)", table, re.MULTILINE)
    return {option: value.strip() for option, value in rows}


def test_the_guide_states_the_defaults_that_print_config_prints(capsys, own_file):
    config = printed_config(
        capsys, lambda: main(["train", "--train", str(own_file), "--vocab", SHARED_VOCAB, "--print-config"])
    )
    stated = guide_defaults()
    assert {"--epochs", "--batch-size", "--maxlen", "--lr", "--pooling", "--valid-fraction"} <= set(stated)
    for option, value in stated.items():
        printed = config[option[2:].replace("-", "_")]
        if option == "--checkpoint":
            assert printed is None and value.startswith("none")
        elif isinstance(printed, str):
            assert value == printed, option
        else:
            assert float(value) == printed, option


def test_the_help_states_the_defaults_for_own_files(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    own = Task("own", data=FILES)
    assert f"for your own files {own.epochs}" in help_text and f"for your own files {own.batch_size}" in help_text
    assert f"blog {RECIPES['blog'].lr:g}" in help_text
    # the output folders that print_config's tests find for pairs.tsv
    assert (
        "default: runs/LOSS-TASK (runs/cosent-pairs for --train pairs.tsv; interaction models: runs/interact-LOSS-TASK)"
        in help_text
    )
