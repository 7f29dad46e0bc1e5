"""The in-batch losses (mnrl, angle, cosent-ibn) end to end: from the command line and the scripts
to a model folder and its exports, what their options reach, resuming, and the input they refuse."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf.cli import main
from cosent_tf.data.batching import duplicates_moved, text_keys
from cosent_tf.experiments.scripts import train_main
from cosent_tf.training.engine import Matcher
from tests.either_keras import sentence_encoder
from tests.helpers import CHARACTERS, make_tiny_setup, run_until
from tests.training.run_helpers import read_csv

RETRIEVAL_METRICS = ("recall@1", "recall@10", "mrr@10", "ndcg@10")


def tiny_text(rng):
    return "".join(rng.choice(list(CHARACTERS), 6))


def related(rng, text, kept=4):
    """A text that starts as ``text`` does: the tiny data's notion of a match."""
    return text[:kept] + "".join(rng.choice(list(CHARACTERS), len(text) - kept))


def write_queries(path, rng, count, negatives, positives=lambda index: 1):
    """FlagEmbedding's JSONL (query, pos, neg): query ``i`` gets ``positives(i)`` positives and
    ``negatives(i)`` negatives; returns the records."""
    records = []
    for index in range(count):
        query = tiny_text(rng)
        records.append(
            {
                "query": query,
                "pos": [related(rng, query, kept=4 - k % 2) for k in range(positives(index))],
                "neg": [tiny_text(rng) for _ in range(negatives(index))],
            }
        )
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return records


def file_options(options):
    """make_tiny_setup's options without --data-dir, which `cosent-tf train` (own files) does not take."""
    return [o for i, o in enumerate(options) if "--data-dir" not in options[max(i - 1, 0) : i + 1]]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(tiny set-up folder, its script options, its `cosent-tf train` options, queries.jsonl's records):
    40 queries of 1 to 3 negatives, the first with two positives (41 examples)."""
    tmp_path, options = make_tiny_setup(tmp_path_factory.mktemp("in-batch"))
    records = write_queries(
        tmp_path / "queries.jsonl", np.random.default_rng(3), 40, lambda i: 1 + i % 3, lambda i: 2 if i == 0 else 1
    )
    return tmp_path, options, file_options(options), records


class Spy:
    """What the engine hands Keras, recorded around Matcher.training_model and Matcher.dataset: the
    training data, the model and loss fitted, and a fresh first-epoch dataset made as the run's is."""

    def __init__(self, monkeypatch):
        self.calls = []
        training_model, dataset = Matcher.training_model, Matcher.dataset

        def spied_training_model(matcher, train):
            model, loss, labels = training_model(matcher, train)
            self.calls.append({"train": train, "model": model, "loss": loss})
            return model, loss, labels

        def spied_dataset(matcher, prepared, labels, start_step, replicas=1, keys=None):
            self.calls[-1].update(
                prepared=prepared,
                keys=keys,
                first_epoch=dataset(matcher, prepared, labels, 0, replicas, keys),
            )
            return dataset(matcher, prepared, labels, start_step, replicas, keys)

        monkeypatch.setattr(Matcher, "training_model", spied_training_model)
        monkeypatch.setattr(Matcher, "dataset", spied_dataset)

    @property
    def last(self):
        return self.calls[-1]


def train(setup, name, *arguments, train_file="queries.jsonl"):
    """`cosent-tf train` in this process on the set-up's file into a fresh folder; its metrics."""
    tmp_path, _, options, _ = setup
    out = tmp_path / name
    main(
        [
            "train",
            "--train",
            str(tmp_path / train_file),
            *options,
            "--epochs",
            "1",
            *arguments,
            "--output-dir",
            str(out),
        ]
    )
    return json.loads((out / "metrics.json").read_text())


def held_out(metrics):
    """The examples held out as valid, as the run's note says."""
    return int(re.search(r"\((\d+) examples\) is held out as valid", " ".join(metrics["notes"])).group(1))


def batches_of_first_epoch(spied, batch_size, group_size):
    """Per batch of the first epoch, its examples' texts as token id tuples (one tuple of rows each)."""
    batches = []
    steps = -(-len(spied["keys"] or spied["train"]) // batch_size)
    for (token_ids, _), _ in spied["first_epoch"].take(steps):
        rows = [tuple(int(t) for t in row if t) for row in token_ids.numpy()]
        batches.append([rows[k : k + group_size] for k in range(0, len(rows), group_size)])
    return batches


def shares_a_text(batch):
    seen = set()
    for example in batch:
        if seen & set(example):
            return True
        seen |= set(example)
    return False


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
@pytest.mark.keras2_only(
    reason="`cosent-tf export` and the sentence-transformers reference read the folder on the Keras 2 engine; "
    "Keras 3's exports of a trained folder: tests/keras3/test_export.py"
)
def test_mnrl_trains_on_flagembedding_queries_and_exports_what_the_encoder_gives(setup):
    from cosent_tf import SentenceEncoder
    from cosent_tf.backend import tf
    from tests.huggingface.test_parity import reference

    tmp_path, _, _, records = setup
    metrics = train(setup, "flag", "--loss", "mnrl", "--valid-fraction", "0.2")
    assert metrics["loss"] == "mnrl"
    # examples of 1 to 3 negatives: each takes the fewest, 1, so anchor, positive, negative
    assert metrics["group_size"] == 3
    examples = sum(len(r["pos"]) for r in records)
    assert examples == 41 and metrics["train_pairs"] == examples - held_out(metrics) > 0
    assert set(RETRIEVAL_METRICS) <= set(metrics["test"]["retrieval"])
    assert metrics["duplicates_moved"] >= 0  # in-batch: the sampler reports

    model_dir = str(tmp_path / "flag" / "model")
    encoder = SentenceEncoder.load(model_dir)
    texts = [r["query"] for r in records[:5]] + [r["pos"][0] for r in records[:5]] + ["我们是中国人", ""]
    expected = encoder.encode(texts)
    assert expected.shape == (len(texts), 16)

    assert main(["export", model_dir, str(tmp_path / "savedmodel")]) == 0
    import tensorflow_text  # noqa: F401  (registers the in-graph tokenizer's ops)

    served = tf.saved_model.load(str(tmp_path / "savedmodel")).signatures["serving_default"]
    np.testing.assert_allclose(served(sentences=tf.constant(texts))["embeddings"].numpy(), expected, atol=1e-5, rtol=0)

    assert main(["export", "--format", "hf", model_dir, str(tmp_path / "hf")]) == 0
    (tmp_path / "texts.json").write_text(json.dumps({"sentences": texts, "pairs": []}, ensure_ascii=False))
    reference("predict", tmp_path / "st.npz", tmp_path / "texts.json", "--st", tmp_path / "hf")
    np.testing.assert_allclose(np.load(tmp_path / "st.npz")["st"], expected, atol=1e-5, rtol=0)


@pytest.mark.heavy
def test_the_layouts_of_examples_train_the_same_run(setup):
    """FlagEmbedding's JSONL, sentence-transformers' JSONL, CSV rows and TSV rows of the same examples
    are the same run; pairs without labels are examples without negatives."""
    tmp_path = setup[0]
    rng = np.random.default_rng(21)
    examples = []
    for _ in range(30):
        anchor = tiny_text(rng)
        examples.append((anchor, related(rng, anchor), tiny_text(rng), tiny_text(rng)))
    folder = tmp_path / "layouts"
    folder.mkdir()
    (folder / "flag.jsonl").write_text(
        "".join(
            json.dumps({"query": a, "pos": [p], "neg": [n1, n2]}, ensure_ascii=False) + "\n"
            for a, p, n1, n2 in examples
        ),
        encoding="utf-8",
    )
    (folder / "st.jsonl").write_text(
        "".join(
            json.dumps({"anchor": a, "positive": p, "negative_1": n1, "negative_2": n2}, ensure_ascii=False) + "\n"
            for a, p, n1, n2 in examples
        ),
        encoding="utf-8",
    )
    (folder / "rows.csv").write_text(
        "anchor,positive,negative_1,negative_2\n" + "".join(",".join(e) + "\n" for e in examples), encoding="utf-8"
    )
    (folder / "rows.tsv").write_text("".join("\t".join(e) + "\n" for e in examples), encoding="utf-8")
    (folder / "pairs.tsv").write_text("".join(f"{a}\t{p}\n" for a, p, _, _ in examples), encoding="utf-8")
    runs = {
        name: train(setup, f"layout-{name}", "--loss", "mnrl", train_file=f"layouts/{name}")
        for name in ("flag.jsonl", "st.jsonl", "rows.csv", "rows.tsv", "pairs.tsv")
    }
    reference_run = runs["flag.jsonl"]
    assert reference_run["group_size"] == 4 and reference_run["train_pairs"] == 30 - held_out(reference_run)
    for name in ("st.jsonl", "rows.csv", "rows.tsv"):
        assert runs[name]["group_size"] == 4 and runs[name]["train_pairs"] == reference_run["train_pairs"]
        assert runs[name]["test"]["spearman"] == pytest.approx(reference_run["test"]["spearman"], abs=1e-6), name
        assert runs[name]["test"]["retrieval"] == pytest.approx(reference_run["test"]["retrieval"], abs=1e-6), name
    pairs = runs["pairs.tsv"]
    assert pairs["group_size"] == 2 and pairs["train_pairs"] == reference_run["train_pairs"]
    assert np.isfinite(pairs["test"]["spearman"])  # held-out positive pairs validated against drawn negatives


def test_groups_are_validated_on_what_the_valid_files_labels_mean(setup):
    """Examples have no labels of their own: a graded valid file makes the run's task graded (no
    binary accuracy, matches above the middle of its range), and a test file must label as it does."""
    tmp_path, _, _, records = setup
    rng = np.random.default_rng(31)
    graded = []
    for index in range(30):
        first = tiny_text(rng)
        graded.append((first, related(rng, first, kept=index % 6), index % 6))
    (tmp_path / "graded.tsv").write_text("".join(f"{a}\t{b}\t{score}\n" for a, b, score in graded), encoding="utf-8")
    metrics = train(setup, "graded-valid", "--loss", "mnrl", "--valid", str(tmp_path / "graded.tsv"))
    assert "accuracy" not in metrics["test"] and "threshold" not in metrics["test"]
    assert metrics["test"]["retrieval"]["queries"] == sum(score > 2.5 for _, _, score in graded)

    with pytest.raises(
        SystemExit, match=r"graded\.tsv: its labels are graded but those of the valid pairs .* are binary"
    ):
        train(setup, "binary-valid-graded-test", "--loss", "mnrl", "--test", str(tmp_path / "graded.tsv"))
    assert not (tmp_path / "binary-valid-graded-test").exists()


def test_an_mnrl_run_lowers_its_training_loss(setup, monkeypatch, capfd):
    # Seed 42, lr 5e-3: the tiny random model starts with every cosine near 1 (the loss near
    # log of the 16 candidates) and has found the positives by the fifth epoch.
    spy = Spy(monkeypatch)
    capfd.readouterr()
    metrics = train(setup, "learning", "--loss", "mnrl", "--lr", "5e-3", "--epochs", "5")
    said = capfd.readouterr().err
    # the group size the examples allow is said once, not by each step that needs it
    assert said.count("examples have 1 to 3 hard negatives") == 1
    # no options given: one direction, the largest group the examples allow, the whole batch at once
    # (test_symmetric_group_size_and_micro_batches_reach_the_loss_the_batches_and_the_model gives them)
    spied = spy.last
    assert spied["loss"].directions == ("query_to_doc",) and spied["loss"].group_size == metrics["group_size"] == 3
    assert type(spied["model"]).__name__ != "GradientCacheModel"  # (a class of the Keras 2 engine's only)
    losses = spy.last["model"].history.history["loss"]
    assert len(losses) == 5 and np.all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0]
    assert losses[-1] < np.log(8 * 2)  # below a uniform choice among the batch's 16 candidates
    # the best epoch is the one of the highest valid MRR@10 (mnrl trains a search), measured at every epoch
    assert "the best epoch is the one of the highest valid mrr@10 (the mnrl loss's default; " in said
    ends = [row for row in read_csv(setup[0] / "learning" / "valid_metrics.csv") if row["end_of_epoch"] == "True"]
    mrr = [float(row["mrr@10"]) for row in ends]
    assert len(mrr) == 5 and metrics["best_metric"] == "mrr@10"
    assert metrics["best_epoch"] == int(np.argmax(mrr)) + 1 and metrics["best_valid"] == pytest.approx(max(mrr))
    assert f"(best valid mrr@10 {max(mrr):.4f} at epoch {metrics['best_epoch']})" in said


@pytest.mark.heavy
@pytest.mark.parametrize(
    "arguments, task, group_size",
    [
        (["BQ", "--loss", "mnrl"], None, 2),
        (["BQ", "--loss", "mnrl", "--hard-negatives-from-labels"], None, 3),
        (["BQ", "--loss", "angle"], None, None),
        (["BQ", "--loss", "cosent-ibn"], None, None),
        (["--loss", "mnrl", "--steps-per-epoch", "3"], "NLI", 3),  # (premise, entailment, contradiction)
    ],
    ids=["mnrl", "mnrl-hard-negatives", "angle", "cosent-ibn", "nli-mnrl"],
)
def test_the_scripts_train_the_in_batch_losses(arguments, task, group_size, setup, monkeypatch):
    tmp_path, options, _, _ = setup
    name = "-".join(a.strip("-") for a in arguments if not a.isdigit())
    out = tmp_path / "scripts" / name
    spy = Spy(monkeypatch) if "cosent-ibn" in arguments else None
    metrics = train_main([*arguments, *options, "--epochs", "1", "--output-dir", str(out)], "feature", "cosent", task)
    if spy:  # no weights given: the mix's defaults reach the loss
        default = spy.last["loss"]
        assert (default.cosine_w, default.ibn_w, default.angle_w) == (0.0, 20.0, 1.0)
    assert metrics["loss"] == arguments[arguments.index("--loss") + 1]
    assert metrics.get("group_size") == group_size
    assert np.isfinite(metrics["test"]["spearman"])
    for evaluated in metrics["tasks"].values():  # NLI: tested on the five tasks
        assert set(RETRIEVAL_METRICS) <= set(evaluated["test"]["retrieval"])
    in_batch = arguments[arguments.index("--loss") + 1] != "angle"
    assert ("duplicates_moved" in metrics) == in_batch
    assert sentence_encoder(out / "model").encode(["我们"]).shape == (1, 16)
    if task == "NLI":
        assert set(metrics["tasks"]) == {"ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"}


# ------------------------------------------------------------------ options reach the model


def test_symmetric_group_size_and_micro_batches_reach_the_loss_the_batches_and_the_model(setup, monkeypatch, capfd):
    from cosent_tf.training.gradient_cache import GradientCacheModel

    # the same options left out: test_an_mnrl_run_lowers_its_training_loss
    spy = Spy(monkeypatch)
    capfd.readouterr()
    metrics = train(setup, "options", "--loss", "mnrl", "--symmetric", "--group-size", "2", "--micro-batch-size", "4")
    spied = spy.last
    assert spied["loss"].directions == ("query_to_doc", "doc_to_query")
    assert spied["loss"].group_size == metrics["group_size"] == 2
    (token_ids, _), _ = next(iter(spied["first_epoch"]))
    assert token_ids.shape[0] == 8 * 2  # 8 examples of anchor and positive
    assert isinstance(spied["model"], GradientCacheModel)
    assert (spied["model"].rows_per_pair, spied["model"].micro_batch_pairs) == (2, 4)  # a micro-batch: 4 groups
    assert "the gradient of each batch is computed 4 examples at a time" in capfd.readouterr().err


def test_the_mix_weights_reach_the_loss(setup, monkeypatch):
    # the default weights: test_the_scripts_train_the_in_batch_losses[cosent-ibn], the same run without them
    spy = Spy(monkeypatch)
    _, options, _, _ = setup
    tmp_path = setup[0]
    common = ["BQ", "--loss", "cosent-ibn", *options, "--epochs", "1"]
    weights = ["--cosine-weight", "1.5", "--ibn-weight", "4", "--angle-weight", "0.25", "--symmetric"]
    train_main([*common, *weights, "--output-dir", str(tmp_path / "mix-weighted")])
    weighted = spy.last["loss"]
    assert (weighted.cosine_w, weighted.ibn_w, weighted.angle_w) == (1.5, 4.0, 0.25)
    assert weighted.directions == ("query_to_doc", "doc_to_query")


@pytest.mark.heavy
def test_batches_keep_duplicate_texts_apart_unless_allowed(setup, monkeypatch):
    tmp_path = setup[0]
    # 12 queries of 3 positives each: 36 examples, three of each anchor, 8 a batch
    write_queries(tmp_path / "repeated.jsonl", np.random.default_rng(8), 12, lambda i: 0, lambda i: 3)
    spy = Spy(monkeypatch)
    kept = train(setup, "apart", "--loss", "mnrl", "--valid-fraction", "0.25", train_file="repeated.jsonl")
    spied = spy.last
    train_data = spied["train"]
    keys = text_keys(train_data.anchors, train_data.positives, train_data.negatives)
    prepared = spied["prepared"]  # batches are grouped by each example's longest text in tokens
    lengths = [max(map(len, (a, p, *n))) for a, p, n in zip(prepared.anchors, prepared.positives, prepared.negatives)]
    moved, left = duplicates_moved(lengths, 8, keys, group_by_length=True, seed=42)
    assert (kept["duplicates_moved"], kept["duplicates_left"]) == (moved, left)
    assert moved > 0 and left == 0
    assert not any(shares_a_text(batch) for batch in batches_of_first_epoch(spied, 8, 2))

    allowed = train(
        setup,
        "together",
        "--loss",
        "mnrl",
        "--valid-fraction",
        "0.25",
        "--allow-duplicates-in-batch",
        train_file="repeated.jsonl",
    )
    assert "duplicates_moved" not in allowed and "duplicates_left" not in allowed
    assert spy.last["keys"] is None
    assert any(shares_a_text(batch) for batch in batches_of_first_epoch(spy.last, 8, 2))


# ------------------------------------------------------------------ resume


@pytest.mark.slow
@pytest.mark.keras2_only(
    reason="the killed and resumed command is the Keras 2 engine's (no --keras 3); Keras 3's mid-epoch resume is "
    "tests/keras3/test_resume.py's"
)
def test_an_mnrl_run_killed_mid_epoch_resumes_to_the_uninterrupted_result(tmp_path):
    tmp_path, options = make_tiny_setup(tmp_path)
    # 2 to 4 negatives each and --group-size 3: every epoch draws one of them afresh, which a
    # resumed run must draw as the uninterrupted one did; 86 examples trained, 11 steps an epoch
    write_queries(tmp_path / "queries.jsonl", np.random.default_rng(11), 96, lambda i: 2 + i % 3)
    cli = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    command = [cli, "train", "--train", str(tmp_path / "queries.jsonl"), *file_options(options)]
    command += ["--loss", "mnrl", "--group-size", "3", "--epochs", "2", "--eval-every", "3", "--backup-every", "3"]
    whole = subprocess.run(command + ["--output-dir", str(tmp_path / "whole")], capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "killed"  # by the time step 6 is validated, step 3's state is on disk
    code, _ = run_until(command + ["--output-dir", str(out)], "step 6 valid", signal.SIGKILL)
    assert code == -signal.SIGKILL and not (out / "metrics.json").exists()
    resumed = subprocess.run(command + ["--output-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 3 <= int(re.search(r"resumed at step (\d+)", resumed.stderr).group(1)) < 11
    expected, again = read_csv(tmp_path / "whole" / "valid_metrics.csv"), read_csv(out / "valid_metrics.csv")
    assert [(r["epoch"], r["step"]) for r in again] == [(r["epoch"], r["step"]) for r in expected]
    assert [float(r["spearman"]) for r in again] == pytest.approx([float(r["spearman"]) for r in expected], abs=1e-6)
    whole_metrics = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["group_size"] == whole_metrics["group_size"] == 3
    assert metrics["test"]["spearman"] == pytest.approx(whole_metrics["test"]["spearman"], abs=1e-6)
    assert not (out / "backup").exists()


# ------------------------------------------------------------------ bad input


def write_text(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def bad_inputs(tmp_path, rng):
    """(name, `cosent-tf train` arguments, what the error must say), the files written under tmp_path."""
    rows = [f"{tiny_text(rng)}\t{tiny_text(rng)}\t{tiny_text(rng)}\t{tiny_text(rng)}" for _ in range(20)]
    rows_tsv = write_text(tmp_path / "rows.tsv", rows)
    few_negatives = write_text(
        tmp_path / "few.tsv", ["\t".join(tiny_text(rng) for _ in range(3 + i % 2)) for i in range(20)]
    )
    same_anchor = write_text(tmp_path / "same.tsv", [f"我们是\t{tiny_text(rng)}" for _ in range(20)])
    no_match = write_text(tmp_path / "no-match.tsv", [f"{tiny_text(rng)}\t{tiny_text(rng)}\t0" for _ in range(20)])
    labelled = write_text(
        tmp_path / "labelled.tsv", [f"{tiny_text(rng)}\t{tiny_text(rng)}\t{i % 2}" for i in range(20)]
    )
    queries = str(tmp_path / "queries.jsonl")
    write_queries(tmp_path / "queries.jsonl", rng, 20, lambda i: 1)
    return [
        (
            "interaction",
            ["--train", labelled, "--kind", "interaction", "--loss", "mnrl"],
            r"--loss mnrl trains feature models \(sentence encoders\) only: in-batch negatives .*--kind feature",
        ),
        (
            "rows-to-a-pair-loss",
            ["--train", rows_tsv, "--loss", "cosent"],
            rf"{re.escape(rows_tsv)}: .*every line has 4 tab-separated fields.*train it with --loss mnrl",
        ),
        (
            "group-size-beyond-the-negatives",
            ["--train", few_negatives, "--loss", "mnrl", "--group-size", "5"],
            rf"{re.escape(few_negatives)}, line 1: group size 5 .* pass --group-size 3 or less",
        ),
        (
            "one-example-a-batch",
            ["--train", queries, "--loss", "mnrl", "--batch-size", "1"],
            r"--batch-size 1: the mnrl loss takes the other examples of a batch .*pass --batch-size 2 or more",
        ),
        (
            "one-anchor",
            ["--train", same_anchor, "--loss", "mnrl"],
            rf"{re.escape(same_anchor)}: every anchor is the same text \('我们是'\).*--loss cosent",
        ),
        (
            "no-positive-pair",
            ["--train", no_match, "--loss", "mnrl"],
            rf"{re.escape(no_match)}: .*no pair is labelled as a match.*give pairs labelled as matches",
        ),
        (
            "hard-negatives-without-labels",
            ["--train", queries, "--loss", "mnrl", "--hard-negatives-from-labels"],
            rf"{re.escape(queries)}: has no labels to take hard negatives from.*leave out --hard-negatives-from-labels",
        ),
        (
            "group-size-for-a-pair-loss",
            ["--train", labelled, "--loss", "cosent", "--group-size", "3"],
            r"--group-size: not an option of --loss cosent, which would ignore it",
        ),
    ]


def test_bad_in_batch_input_is_refused_naming_the_file_and_what_to_do(setup, capsys):
    tmp_path, _, options, _ = setup
    (tmp_path / "bad").mkdir()
    cases = bad_inputs(tmp_path / "bad", np.random.default_rng(2))
    for name, arguments, said in cases:
        out = tmp_path / "bad" / f"run-{name}"
        with pytest.raises(SystemExit) as stopped:
            main(["train", *options, *arguments, "--output-dir", str(out)])
        message = str(stopped.value.code)
        assert message.startswith("error: "), (name, message)
        assert re.search(said, message), (name, message)
        assert not out.exists(), name  # nothing written
    capsys.readouterr()


def test_a_query_with_several_positives_is_held_out_whole(setup, tmp_path):
    """--valid-fraction holds out whole lines: a query is never trained on and validated on too."""
    from cosent_tf.training.config import RunConfig
    from cosent_tf.training.run_data import load_run_data

    root = setup[0]
    queries = tmp_path / "q.jsonl"
    write_queries(queries, np.random.default_rng(5), 40, lambda i: 1, positives=lambda i: 1 + i % 3)
    config = RunConfig(
        task="q", train_file=str(queries), loss="mnrl", vocab=str(root / "vocab.txt"), valid_fraction=0.3
    )
    data = load_run_data(config.resolved())
    valid, _ = data.evaluation["q"]
    assert set(data.train.anchors).isdisjoint(valid.texts_a)
    assert len(set(valid.texts_a)) == 12  # 30% of the 40 lines, each with all its positives
    assert len(data.train) + sum(valid.labels == 1) == sum(1 + i % 3 for i in range(40))


def test_a_retrieval_metric_falls_back_to_spearman_where_valid_gives_no_search_and_says_why():
    from types import SimpleNamespace

    from cosent_tf.data.pairs import PairData
    from cosent_tf.data.tasks import get_task
    from cosent_tf.losses import get_loss
    from cosent_tf.models.kinds import KINDS
    from cosent_tf.training.engine import _best_metric

    def matcher(kind, loss):
        return SimpleNamespace(kind=KINDS[kind], loss=get_loss(kind, loss))

    with_positives = PairData(["a", "b"], ["c", "d"], [1, 0], "valid.tsv")
    negatives_only = PairData(["a", "b"], ["c", "d"], [0, 0], "valid.tsv")
    tasks = {"BQ": get_task("BQ")}
    cfg = SimpleNamespace(kind="feature", best_metric=None)
    assert _best_metric(cfg, matcher("feature", "mnrl"), {"BQ": (with_positives, None)}, tasks)[0] == "mrr@10"
    metric, said = _best_metric(cfg, matcher("feature", "mnrl"), {"BQ": (negatives_only, None)}, tasks)
    assert metric == "spearman" and said.endswith(
        "is a retrieval figure over the valid pairs, and the valid pairs of BQ hold no positive pair to search for"
    )
    cfg = SimpleNamespace(kind="interaction", best_metric="mrr@10")
    metric, said = _best_metric(cfg, matcher("interaction", "cosent"), {"BQ": (with_positives, None)}, tasks)
    assert metric == "spearman" and said == (
        "the best epoch is the one of the highest valid spearman: mrr@10 (--best-metric) is a retrieval figure over "
        "the valid pairs, and a model of --kind interaction gives no sentence vectors to search with"
    )
