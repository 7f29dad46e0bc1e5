"""The inference commands' files: an existing output file is replaced only with --overwrite, inputs
are read before the model is loaded, similarity reads every pair file format (and two texts), and
evaluate --output takes a metrics file's name."""

from __future__ import annotations

import json
import os

import pytest

from cosent_tf import SentenceEncoder
from cosent_tf.cli import main
from tests.helpers import make_model_dir

PAIRS = [("你好", "你好呀"), ("天气", "下雨")]


@pytest.fixture
def model_dir(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, threshold=0.5)
    (tmp_path / "texts.txt").write_text("今天天气怎么样\n我想换手机\n", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\t1\n" for a, b in PAIRS), encoding="utf-8")
    (tmp_path / "pairs.csv").write_text(
        "sentence1,sentence2,label\n" + "".join(f"{a},{b},{i % 2}\n" for i, (a, b) in enumerate(PAIRS)),
        encoding="utf-8",
    )
    return tmp_path / "model"


@pytest.fixture
def no_model_loaded(monkeypatch):
    """Loading a model fails the test: what is checked here must be checked before it."""
    from cosent_tf.inference import matchers

    def refuse(*args, **kwargs):
        pytest.fail("the model was loaded")

    monkeypatch.setattr(matchers.SentenceEncoder, "load", refuse)
    monkeypatch.setattr(matchers, "load_matcher", refuse)


def expected_scores(model_dir):
    return SentenceEncoder.load(model_dir).similarity([a for a, _ in PAIRS], [b for _, b in PAIRS])


# Each command that writes a file, with {out} its output file.
WRITERS = {
    "encode": ["encode", "{model}", "{tmp}/texts.txt", "{out}"],
    "similarity": ["similarity", "{model}", "{tmp}/pairs.tsv", "{out}"],
    "search query": ["search", "query", "{tmp}/index", "{tmp}/texts.txt", "{out}"],
    "evaluate": ["evaluate", "{model}", "{tmp}/pairs.csv", "--output", "{out}"],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_an_existing_output_file_is_replaced_only_with_overwrite(command, model_dir, tmp_path, monkeypatch):
    if command == "search query":
        main(["search", "build", str(model_dir), str(tmp_path / "texts.txt"), str(tmp_path / "index")])
    output = tmp_path / ("out.json" if command == "evaluate" else "out")
    output.write_text("an earlier result\n")
    arguments = [a.format(model=model_dir, tmp=tmp_path, out=output) for a in WRITERS[command]]
    before = sorted(os.listdir(tmp_path))
    with monkeypatch.context() as patched:
        from cosent_tf.inference import index, matchers

        def refuse(*args, **kwargs):
            pytest.fail("the model was loaded")

        patched.setattr(matchers.SentenceEncoder, "load", refuse)
        patched.setattr(matchers, "load_matcher", refuse)
        patched.setattr(index.VectorIndex, "load", refuse)
        with pytest.raises(
            SystemExit,
            match=f"error: {output}: exists; nothing was written: pass --overwrite to replace it, or choose another",
        ):
            main(arguments)
    assert output.read_text() == "an earlier result\n"
    assert sorted(os.listdir(tmp_path)) == before  # nothing beside it either
    main([*arguments, "--overwrite"])
    assert output.read_bytes() != b"an earlier result\n" and output.stat().st_size > 0


def test_a_stream_output_is_never_refused(model_dir, tmp_path):
    for _ in range(2):
        main(["encode", str(model_dir), str(tmp_path / "texts.txt"), os.devnull])


@pytest.mark.parametrize("extension", [".csv", ".jsonl"])
def test_similarity_reads_csv_and_jsonl_without_labels(extension, model_dir, tmp_path):
    if extension == ".csv":
        text = "q1,q2\n" + "".join(f"{a},{b}\n" for a, b in PAIRS)
    else:
        text = "".join(json.dumps({"q1": a, "q2": b}, ensure_ascii=False) + "\n" for a, b in PAIRS)
    (tmp_path / f"unlabelled{extension}").write_text(text, encoding="utf-8")
    fields = ["--text-a-field", "q1", "--text-b-field", "q2"]
    main(["similarity", str(model_dir), str(tmp_path / f"unlabelled{extension}"), str(tmp_path / "s.tsv"), *fields])
    rows = [line.split("\t") for line in (tmp_path / "s.tsv").read_text(encoding="utf-8").splitlines()]
    scores = expected_scores(model_dir)
    assert [tuple(row[:2]) for row in rows] == PAIRS
    assert [float(row[2]) for row in rows] == pytest.approx(scores, abs=1e-6)
    assert [row[3] for row in rows] == [str(int(s > 0.5)) for s in scores]


def test_similarity_writes_to_stdout_without_an_output(model_dir, tmp_path, capsys):
    main(["similarity", str(model_dir), str(tmp_path / "pairs.tsv")])
    lines = capsys.readouterr().out.splitlines()
    assert [line.rsplit("\t", 2)[0] for line in lines] == [f"{a}\t{b}\t1" for a, b in PAIRS]
    assert [float(line.split("\t")[3]) for line in lines] == pytest.approx(expected_scores(model_dir), abs=1e-6)


def test_similarity_of_two_texts_prints_the_score_and_the_prediction(model_dir, capsys):
    main(["similarity", str(model_dir), *PAIRS[0]])
    score, prediction = capsys.readouterr().out.split()
    expected = expected_scores(model_dir)[0]
    assert float(score) == pytest.approx(expected, abs=1e-6) and prediction == str(int(expected > 0.5))
    main(["similarity", str(model_dir), "--texts", "1/2", "半"])  # a text that looks like a path, said to be one
    assert len(capsys.readouterr().out.split()) == 2


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["{tmp}/nothere.tsv", "{tmp}/out.tsv"], "nothere.tsv: cannot open"),
        (["nothere.tsv", "你好"], r"nothere.tsv \(from .*\): cannot open"),  # a file's name, never taken for a text
        (["你好", "out.tsv"], r"你好 \(from .*\): cannot open"),
        (["{tmp}/texts.txt", "{tmp}/out.tsv"], "texts.txt, line 1: expected two tab-separated texts"),
        (["{tmp}/pairs.csv", "{tmp}/out.tsv", "--text-a-field", "q1"], r"pairs.csv, line 1: no column 'q1'"),
    ],
)
def test_similarity_checks_its_input_before_loading_the_model(arguments, message, model_dir, tmp_path, no_model_loaded):
    arguments = [a.format(tmp=tmp_path) for a in arguments]
    with pytest.raises(SystemExit, match=message):
        main(["similarity", str(model_dir), *arguments])
    assert not (tmp_path / "out.tsv").exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["encode", "{model}", "{tmp}/nothere.txt", "{tmp}/out.npy"], "nothere.txt: cannot open"),
        (["search", "build", "{model}", "{tmp}/nothere.txt", "{tmp}/index"], "nothere.txt: cannot open"),
        (["evaluate", "{model}", "{tmp}/texts.txt"], "texts.txt"),
    ],
)
def test_inputs_are_read_before_the_model_is_loaded(arguments, message, model_dir, tmp_path, no_model_loaded):
    with pytest.raises(SystemExit, match=message):
        main([a.format(tmp=tmp_path, model=model_dir) for a in arguments])


@pytest.mark.parametrize(
    "output, written", [("eval.json", ["eval.json", "eval.tsv"]), ("eval", ["eval.json", "eval.tsv"])]
)
def test_evaluate_output_is_a_metrics_file_or_a_prefix(output, written, model_dir, tmp_path, capsys):
    before = set(os.listdir(tmp_path))
    main(["evaluate", str(model_dir), str(tmp_path / "pairs.csv"), "--output", str(tmp_path / output)])
    assert sorted(set(os.listdir(tmp_path)) - before) == written
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert metrics == json.loads(capsys.readouterr().out)
    assert len((tmp_path / "eval.tsv").read_text(encoding="utf-8").splitlines()) == len(PAIRS)


def test_evaluate_scores_a_file_of_queries_as_training_validates_it(model_dir, tmp_path, capsys):
    """A FlagEmbedding file (query, pos, neg) is scored as labelled pairs, each text against its query,
    with retrieval over the positives, as a training run scores its held-out examples."""
    rows = [
        {"query": "今天天气怎么样", "pos": ["天气如何"], "neg": ["我想换手机", "手机多少钱"]},
        {"query": "我想换手机", "pos": ["换个手机"], "neg": ["下雨了吗"]},
    ]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    main(["evaluate", str(model_dir), str(queries), "--retrieval", "--output", str(tmp_path / "eval.json")])
    captured = capsys.readouterr()
    assert "read as FlagEmbedding's JSON lines" in captured.err and "scored as labelled pairs" in captured.err
    metrics = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    assert (metrics["pairs"], metrics["labels"]) == (5, "binary")  # 2 positives and 3 negatives
    assert metrics["retrieval"]["queries"] == 2
    scored = [line.split("\t") for line in (tmp_path / "eval.tsv").read_text(encoding="utf-8").splitlines()]
    encoder = SentenceEncoder.load(model_dir)
    for query, text, label, score, *_ in scored:  # then the prediction at the tuned threshold
        assert label == ("1" if text in ("天气如何", "换个手机") else "0")
        assert float(score) == pytest.approx(float(encoder.similarity([query], [text])[0]), abs=1e-5)
