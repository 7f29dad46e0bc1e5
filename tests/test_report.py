import json
import os

import numpy as np
import pytest

from cosent_tf.report import load_runs, tables, write_report


def fake_run(folder, task, kind, loss, spearmans, accuracy=None, comparable=True, steps=(10, 20)):
    """A finished run folder as the engine writes it."""
    os.makedirs(folder)
    config = {"task": task, "kind": kind, "loss": loss, "model": "bert", "epsilon": 0.5}
    tasks = {}
    for name, value in spearmans.items():
        test = {"spearman": value, "pearson": value}
        if accuracy is not None:
            test.update(accuracy=accuracy, threshold=0.5)
        tasks[name] = {"valid": {"spearman": value}, "test": test}
    metrics = {
        "task": task,
        "kind": kind,
        "loss": loss,
        "comparable": comparable,
        "tasks": tasks,
        "test": {"spearman": float(np.mean(list(spearmans.values())))},
    }
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(metrics, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    rows = ["epoch,step,end_of_epoch,spearman"] + [f"{i + 1},{s},True,{0.1 * (i + 1)}" for i, s in enumerate(steps)]
    with open(os.path.join(folder, "valid_metrics.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    rng = np.random.default_rng(0)
    scores = {f"{name}.scores": rng.uniform(-1, 1, 50) for name in spearmans}
    scores.update({f"{name}.labels": rng.integers(0, 2, 50).astype(float) for name in spearmans})
    np.savez(os.path.join(folder, "test_scores.npz"), **scores)
    return str(folder)


def test_tables_follow_the_published_layout(tmp_path):
    runs = [
        fake_run(tmp_path / "a", "BQ", "feature", "cosent", {"BQ": 0.7}, accuracy=0.8),
        fake_run(tmp_path / "b", "STS-B", "feature", "cosent", {"STS-B": 0.6}),
        fake_run(tmp_path / "c", "BQ", "feature", "sbert", {"BQ": 0.5}),
        fake_run(tmp_path / "d", "LCQMC", "interaction", "ce", {"LCQMC": 0.4}, accuracy=0.7, comparable=False),
        fake_run(
            tmp_path / "e",
            "NLI",
            "feature",
            "cosent",
            {t: 0.1 * (i + 1) for i, t in enumerate(["ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"])},
        ),
    ]
    text = tables(load_runs(runs + [str(tmp_path / "unfinished")]))
    assert "| method | ATEC | BQ | LCQMC | PAWSX | STS-B | Avg |" in text
    assert "| BERT + CoSENT | – | 70.00 | – | – | 60.00 | 65.00* |" in text
    assert "| BERT + Sentence-BERT | – | 50.00 | – | – | – | 50.00* |" in text
    assert "| BERT + CoSENT | 10.00 | 20.00 | 30.00 | 40.00 | 50.00 | 30.00 |" in text  # the NLI table
    assert "| BERT + CE | – | – | 40.00† | – | 40.00* |" in text
    assert "| BERT + CE (interaction) | – | – | 70.00† | – | 70.00* |" in text
    assert "| BERT + CoSENT (feature) | – | 80.00 | – | – | 80.00* |" in text


def test_report_writes_tables_and_plots(tmp_path):
    runs = [
        fake_run(tmp_path / "a", "BQ", "feature", "cosent", {"BQ": 0.7}),
        fake_run(tmp_path / "b", "BQ", "feature", "mse", {"BQ": 0.6}),
    ]
    written = write_report(runs, str(tmp_path / "out"), preface="Random init.")
    assert [os.path.basename(p) for p in written] == ["results.md", "convergence.png", "cosine_density.png"]
    assert (tmp_path / "out" / "results.md").read_text().startswith("Random init.")
    for name in ("convergence.png", "cosine_density.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="no finished runs"):
        write_report([str(tmp_path / "nothing")], str(tmp_path / "out2"))
