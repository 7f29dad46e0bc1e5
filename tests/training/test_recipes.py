"""Recipes fill what is not set, and their settings reach the optimizer."""

import json

import pytest

from cosent_tf.experiments.scripts import train_main
from cosent_tf.optimizers import build_optimizer
from cosent_tf.training import engine as training
from cosent_tf.training.config import RunConfig


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


@pytest.mark.heavy
def test_the_recipe_and_optimizer_options_reach_the_optimizer(tiny_setup, monkeypatch):
    seen = {}

    def recording(lr, total_steps, weight_decay, warmup, schedule, loss_scaling, **others):
        seen.update(lr=lr, total_steps=total_steps, weight_decay=weight_decay, warmup=warmup, schedule=schedule)
        seen.update(loss_scaling=loss_scaling)
        return build_optimizer(lr, total_steps, weight_decay, warmup, schedule, loss_scaling, **others)

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
