"""Issue 37: ``cosent-tf mine`` end to end on tiny random models: it writes what ``train --loss mnrl``
(or, as pairs, a pair loss) reads, with its summary, and refuses bad input before any model loads,
writing nothing."""

import argparse
import json
import os

import numpy as np
import pytest

from cosent_tf import PairScorer, SentenceEncoder
from cosent_tf.cli import main, rank_range
from cosent_tf.data.files import read_lines, read_pair_file
from cosent_tf.data.groups import read_group_file
from cosent_tf.mining import GUARDS, SUMMARY_FORMAT, mine_hard_negatives, summary_paths
from tests.helpers import distinct_texts
from tests.test_mining import margin_between


def mine_command(models, data, corpus, output, *options):
    """``cosent-tf mine`` of ``data`` over ``corpus`` with the tests' encoder, into ``output``."""
    return [
        "mine",
        "--data",
        data,
        "--model",
        str(models / "encoder"),
        "--corpus",
        corpus,
        "--output",
        output,
        *options,
    ]


@pytest.fixture
def inputs(tmp_path):
    """Pairs without labels (positive pairs) and a corpus holding some of their texts."""
    pool = distinct_texts(0, 44)
    anchors, positives, others = pool[:6], pool[6:12], pool[12:]
    data = tmp_path / "train.tsv"
    data.write_text("".join(f"{a}\t{p}\n" for a, p in zip(anchors, positives)), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(others + positives[:3] + anchors[:2]) + "\n", encoding="utf-8")
    return str(data), str(corpus)


def outputs(output):
    return [output, *summary_paths(output)]


def test_mine_writes_the_tuples_train_reads_and_prints_its_summary(mining_models, inputs, tmp_path, capsys):
    data, corpus = inputs
    output = str(tmp_path / "out" / "mined.jsonl")
    arguments = ["--range", "1-40", "--num-negatives", "2", "--sampling", "random", "--seed", "3"]
    main(mine_command(mining_models, data, corpus, output, *arguments))
    captured = capsys.readouterr()
    assert f"{output}: 6 examples (query, pos, neg); the summary in {summary_paths(output)[0]}" in captured.out
    assert "mined 6 of 6 examples" in captured.err and "candidates removed by each guard" in captured.err
    written = read_group_file(output)
    written.check_in_batch()
    assert written.group_size() == 4
    expected = mine_hard_negatives(
        SentenceEncoder.load(str(mining_models / "encoder")),
        read_group_file(data),
        read_lines(corpus),
        rank_range=(1, 40),
        num_negatives=2,
        sampling="random",
        seed=3,
    )
    assert list(zip(written.anchors, written.positives, written.negatives)) == expected.examples
    with open(summary_paths(output)[0], encoding="utf-8") as file:
        summary = json.load(file)
    assert summary["format"] == SUMMARY_FORMAT and summary["settings"]["corpus"] == os.path.abspath(corpus)
    assert summary["settings"]["model"] == os.path.abspath(mining_models / "encoder")
    assert summary["removed"] == expected.removed and set(summary["removed"]) == set(GUARDS)
    # The whole corpus is ranked (the window is cut to its 37 texts): two anchors meet themselves, three
    # their positives.
    assert summary["removed"]["anchor_itself"] == 2 and summary["removed"]["duplicate_of_positive"] == 3
    assert any("candidates are ranks 1-37" in note for note in summary["notes"])
    assert os.path.getsize(summary_paths(output)[1]) > 0


def test_mine_writes_pairs_rescored_by_an_interaction_model(mining_models, tmp_path, capsys):
    pool = distinct_texts(1, 30)
    data = tmp_path / "labelled.csv"
    rows = [(pool[i], pool[i + 1], i % 3 != 2) for i in range(0, 24, 2)]
    data.write_text("q1,q2,same\n" + "".join(f"{a},{b},{int(label)}\n" for a, b, label in rows), encoding="utf-8")
    # The margin: about half of the candidates score within it of their positive. The corpus is every
    # second text; only each anchor's own positive is guarded before the rescore.
    scorer = PairScorer.load(str(mining_models / "scorer"))
    corpus = [b for _, b, _ in rows]
    matches = [(a, b) for a, b, label in rows if label]
    gaps = np.concatenate(
        [
            scorer.similarity([a], [b])[0] - scorer.similarity([a] * 11, [text for text in corpus if text != b])
            for a, b in matches
        ]
    )
    margin = margin_between(gaps)
    output = str(tmp_path / "mined.tsv")
    main(
        ["mine", "--data", str(data), "--model", str(mining_models / "encoder"), "--output", output, "--output-format"]
        + ["pairs", "--range", "1-12", "--num-negatives", "2", "--rescore", str(mining_models / "scorer")]
        + [f"--rescore-margin={margin!r}", "--text-a-field", "q1", "--text-b-field", "q2", "--label-field", "same"]
    )
    assert "examples as labelled pairs" in capsys.readouterr().out
    pairs = read_pair_file(output, strict=True)
    scores = scorer.similarity(pairs.texts_a, pairs.texts_b)
    positive_score = {a: s for a, s, label in zip(pairs.texts_a, scores, pairs.labels) if label == 1}
    assert positive_score and set(positive_score) <= {a for a, _ in matches}
    for anchor, negative, score, label in zip(pairs.texts_a, pairs.texts_b, scores, pairs.labels):
        if label == 0:
            assert score < positive_score[anchor] - margin
            assert (anchor, negative) not in matches
    with open(summary_paths(output)[0], encoding="utf-8") as file:
        summary = json.load(file)
    assert summary["removed"]["rescore"] == int(np.sum(gaps <= margin)) > 0
    assert summary["counts"]["anchors_without_positive"] == 4 and summary["settings"]["rescore_margin"] == margin
    assert summary["scores"]["interaction"]["negatives"]["count"] == 2 * summary["counts"]["examples_mined"]


def test_the_range_option_reads_lo_hi():
    assert rank_range("10-50") == (10, 50) and rank_range(" 3 - 3 ") == (3, 3)
    for text, message in [("ten", "expected LO-HI"), ("10", "expected LO-HI"), ("１-5", "expected LO-HI")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            rank_range(text)
    for text in ["0-5", "6-5"]:
        with pytest.raises(argparse.ArgumentTypeError, match="ranks start at 1 and HI may not be below LO"):
            rank_range(text)


def test_a_bad_range_is_an_error_of_the_option(mining_models, inputs, tmp_path, capsys):
    data, corpus = inputs
    with pytest.raises(SystemExit) as stopped:
        main(
            ["mine", "--data", data, "--model", str(mining_models / "encoder"), "--output", "x.jsonl", "--range", "9-2"]
        )
    assert stopped.value.code == 2
    assert "argument --range: ranks start at 1 and HI may not be below LO, got 9-2" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments, message",
    [
        # The corpus is read before the model, which is missing here: the window is refused first.
        (
            ["--model", "{tmp}/missing", "--corpus", "{tmp}/small.txt"],
            r"--range 10-50: .*small.txt: the corpus has 3 texts, fewer than the rank window's start 10",
        ),
        (
            ["--model", "{tmp}/missing"],
            r"--range 10-50: the corpus of .*train.tsv's distinct second texts: the corpus has 6 texts",
        ),
        (
            ["--model", "{models}/scorer", "--range", "1-5"],
            r"--model .*scorer: an interaction model .*, but --model needs a feature model",
        ),
        (
            ["--model", "{models}/encoder", "--rescore", "{models}/other", "--range", "1-5"],
            r"--rescore .*other: a feature model .*, but --rescore needs an interaction model",
        ),
        (["--model", "{models}/encoder", "--rescore-margin", "0.1"], "--rescore-margin is the margin of --rescore"),
        (
            ["--model", "{models}/encoder", "--corpus", "{tmp}/index", "--range", "1-5"],
            r"index: the index was built with the model .*other, not .*encoder",
        ),
        (["--model", "{models}/encoder", "--data", "{tmp}/nothere.tsv"], r"nothere.tsv.*: cannot open"),
        (["--model", "{models}/encoder", "--output", "{tmp}/mined.tsv"], "tuples are written as JSON lines"),
        (
            ["--model", "{models}/encoder", "--output-format", "pairs", "--output", "{tmp}/train.tsv"],
            "train.tsv: is also an input of this command",
        ),
        (
            ["--model", "{models}/encoder", "--range", "1-5", "--strict", "--corpus", "{tmp}/empty-line.txt"],
            r"empty-line.txt, line 2: empty, kept as empty texts \(an error under --strict\)",
        ),
    ],
)
def test_bad_input_is_said_before_any_model_loads_and_nothing_is_written(
    arguments, message, mining_models, inputs, tmp_path
):
    data, _ = inputs
    (tmp_path / "small.txt").write_text("甲乙\n丙丁\n戊己\n", encoding="utf-8")
    (tmp_path / "empty-line.txt").write_text("甲乙\n\n丙丁\n", encoding="utf-8")
    if "{tmp}/index" in arguments:
        SentenceEncoder.load(str(mining_models / "other")).build_index(distinct_texts(2, 8)).save(
            str(tmp_path / "index")
        )
    before = sorted(os.listdir(tmp_path))
    arguments = [a.format(tmp=tmp_path, models=mining_models) for a in arguments]
    if "--data" not in arguments:
        arguments += ["--data", data]
    if "--output" not in arguments:
        arguments += ["--output", str(tmp_path / "mined.jsonl")]
    with pytest.raises(SystemExit, match=message) as raised:
        main(["mine", *arguments])
    assert str(raised.value).startswith("error: ")
    assert sorted(os.listdir(tmp_path)) == before


def test_an_existing_output_is_refused_and_a_failed_run_writes_nothing(mining_models, inputs, tmp_path, monkeypatch):
    data, corpus = inputs
    output = str(tmp_path / "mined.jsonl")
    command = mine_command(mining_models, data, corpus, output, "--range", "1-20")
    with open(summary_paths(output)[0], "w", encoding="utf-8") as file:
        file.write("mine\n")
    with pytest.raises(SystemExit, match=r"mined.summary.json: exists; nothing was written: pass --overwrite"):
        main(command)
    assert not os.path.exists(output) and not os.path.exists(summary_paths(output)[1])

    def broken(*args, **kwargs):
        raise RuntimeError("the rescorer broke")

    monkeypatch.setattr(PairScorer, "similarity", broken)
    with pytest.raises(RuntimeError, match="the rescorer broke"):
        main([*command, "--overwrite", "--rescore", str(mining_models / "scorer")])
    assert not os.path.exists(output) and not os.path.exists(summary_paths(output)[1])
    with open(summary_paths(output)[0], encoding="utf-8") as file:
        assert file.read() == "mine\n"
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


def test_empty_texts_are_reported_as_the_readers_do_and_never_mined(mining_models, inputs, tmp_path, capsys):
    data, corpus = inputs
    with open(corpus, "a", encoding="utf-8") as file:
        file.write("\n  \n")
    output = str(tmp_path / "mined.jsonl")
    main(mine_command(mining_models, data, corpus, output, "--range", "1-50"))
    err = capsys.readouterr().err
    assert "corpus.txt: 2 line(s) empty, kept as empty texts" in err
    written = read_group_file(output, strict=True)  # strict: an empty negative would be an error
    assert all(text.strip() for negatives in written.negatives for text in negatives)
    with open(summary_paths(output)[0], encoding="utf-8") as file:
        assert json.load(file)["counts"]["candidates_empty"] > 0
