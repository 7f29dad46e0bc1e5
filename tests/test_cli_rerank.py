"""The command line's retrieve-then-rerank: ``search query --rerank`` and ``evaluate --retrieval --rerank``,
checked against the API, and the refusals, each said before any model's weights load."""

import json
import re

import numpy as np
import pytest

from cosent_tf import PairScorer, SentenceEncoder, VectorIndex
from cosent_tf.cli import main
from cosent_tf.evaluation import retrieval_with_rerank
from tests.helpers import make_model_dir

CORPUS = ["今天天气怎么样", "明天会下雨吗", "ＱＱ号码是多少？", "我想换手机", "手机多少钱", "天气很好", "号码忘了"]
QUERIES = ["我想换手机", "今天天气", "ＱＱ号码"]


@pytest.fixture
def folders(tiny_config, tmp_path):
    make_model_dir(tmp_path / "encoder", tiny_config, threshold=0.5)
    make_model_dir(tmp_path / "scorer", tiny_config, kind="interaction")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    (tmp_path / "queries.txt").write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    return tmp_path


def query_command(tmp_path, *options):
    return ["search", "query", str(tmp_path / "index"), str(tmp_path / "queries.txt"), str(tmp_path / "hits.jsonl")] + [
        str(option) for option in options
    ]


@pytest.mark.heavy
def test_search_query_with_rerank_writes_the_reranked_top_k_with_cosine_and_rank(folders, capsys):
    tmp_path = folders
    main(["search", "build", str(tmp_path / "encoder"), str(tmp_path / "corpus.txt"), str(tmp_path / "index")])
    capsys.readouterr()
    main(query_command(tmp_path, "--top-k", 2, "--rerank", tmp_path / "scorer", "--rerank-top", 5))
    assert "reranked by" in capsys.readouterr().out
    results = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text(encoding="utf-8").splitlines()]
    encoder, scorer = SentenceEncoder.load(tmp_path / "encoder"), PairScorer.load(tmp_path / "scorer")
    assert [result["query"] for result in results] == QUERIES
    for query, result, first_stage in zip(QUERIES, results, encoder.search(QUERIES, CORPUS, top_k=5)):
        alone = np.array([scorer.similarity([query], [hit.text], batch_size=1)[0] for hit in first_stage])
        order = np.argsort(-alone, kind="stable")[:2]
        hits = result["hits"]
        assert all(set(hit) == {"index", "score", "text", "cosine", "cosine_rank"} for hit in hits)
        assert [hit["index"] for hit in hits] == [first_stage[i].index for i in order]
        assert [hit["text"] for hit in hits] == [CORPUS[hit["index"]] for hit in hits]
        assert [hit["cosine_rank"] for hit in hits] == [int(i) + 1 for i in order]
        np.testing.assert_allclose([hit["score"] for hit in hits], alone[order], atol=1e-5)
        np.testing.assert_allclose([hit["cosine"] for hit in hits], [first_stage[i].score for i in order], atol=1e-6)


def evaluate_command(tmp_path, *options):
    return ["evaluate", str(tmp_path / "encoder"), str(tmp_path / "pairs.tsv")] + [str(option) for option in options]


def write_beir(tmp_path):
    (tmp_path / "q.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(QUERIES)),
        encoding="utf-8",
    )
    (tmp_path / "c.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(CORPUS)),
        encoding="utf-8",
    )
    (tmp_path / "r.tsv").write_text("q0\td3\t1\nq0\td4\t1\nq1\td5\t1\nq2\td2\t1\n", encoding="utf-8")
    return ["--queries", tmp_path / "q.jsonl", "--corpus", tmp_path / "c.jsonl", "--qrels", tmp_path / "r.tsv"]


@pytest.mark.heavy
def test_evaluate_with_rerank_writes_the_cosine_and_the_reranked_blocks(folders, capsys):
    tmp_path = folders
    (tmp_path / "pairs.tsv").write_text(
        "我想换手机\t手机多少钱\t1\n我想换手机\t天气很好\t0\n今天天气\t明天会下雨吗\t1\nＱＱ号码\t号码忘了\t1\n"
        "ＱＱ号码\t我想换手机\t0\n",
        encoding="utf-8",
    )
    main(evaluate_command(tmp_path, "--retrieval", "--output", tmp_path / "plain.json"))
    reranked_options = ["--rerank", tmp_path / "scorer", "--rerank-top", 3]
    main(evaluate_command(tmp_path, "--retrieval", *reranked_options, "--output", tmp_path / "reranked.json"))
    plain = json.loads((tmp_path / "plain.json").read_text())
    metrics = json.loads((tmp_path / "reranked.json").read_text())
    assert "retrieval_reranked" not in plain
    assert metrics["retrieval"] == pytest.approx(plain["retrieval"])
    encoder, scorer = SentenceEncoder.load(tmp_path / "encoder"), PairScorer.load(tmp_path / "scorer")
    corpus = ["手机多少钱", "天气很好", "明天会下雨吗", "号码忘了", "我想换手机"]
    _, expected = retrieval_with_rerank(encoder.encode, scorer, QUERIES, corpus, [{0}, {2}, {3}], 3)
    assert metrics["retrieval_reranked"] == pytest.approx(expected)
    assert metrics["retrieval_reranked"]["rerank_top"] == 3
    assert metrics["retrieval_reranked"]["reranker"] == str(tmp_path / "scorer")

    capsys.readouterr()
    main(["evaluate", str(tmp_path / "encoder"), *map(str, write_beir(tmp_path)), "--rerank", str(tmp_path / "scorer")])
    printed = json.loads(capsys.readouterr().out)
    beir, reranked = retrieval_with_rerank(encoder.encode, scorer, QUERIES, CORPUS, [{3, 4}, {5}, {2}])
    assert printed["beir"] == pytest.approx(beir)
    assert printed["beir_reranked"] == pytest.approx(reranked) and printed["beir_reranked"]["rerank_top"] == 20


@pytest.fixture
def no_weights_load(monkeypatch):
    """Any model's weights loading fails the test: a refusal must come before."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model's weights loaded before the refusal")

    monkeypatch.setattr("cosent_tf.inference.model_dir.load_model_dir", refuse)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--rerank", "{tmp}/encoder"], r"--rerank .*encoder: a feature model .*, but --rerank needs an interaction"),
        (["--rerank-top", "5"], "--rerank-top is how many cosine hits --rerank re-scores: pass --rerank"),
        (["--top-k", "6", "--rerank", "{tmp}/scorer", "--rerank-top", "5"], "--rerank-top 5 is below --top-k 6"),
        (["--rerank", "{tmp}/scorer", "--rerank-top", "0"], "--rerank-top: must be at least 1, got 0"),
        (["--rerank", "{tmp}/nowhere"], "nowhere"),
    ],
)
def test_search_query_refuses_bad_rerank_options_before_loading_and_writes_nothing(
    options, message, folders, no_weights_load, capsys
):
    tmp_path = folders
    # an index written without a model's weights loading: its vectors do not matter here
    VectorIndex(np.eye(len(CORPUS), 4, dtype=np.float32), CORPUS, model_dir=str(tmp_path / "encoder")).save(
        tmp_path / "index"
    )
    with pytest.raises(SystemExit) as stopped:
        main(query_command(tmp_path, *[option.format(tmp=tmp_path) for option in options]))
    said = str(stopped.value.code) + capsys.readouterr().err
    assert stopped.value.code != 0 and re.search(message, said), said
    assert not (tmp_path / "hits.jsonl").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--retrieval", "--rerank", "{tmp}/encoder"], r"--rerank .*encoder: a feature model .*, but --rerank needs"),
        (["--rerank", "{tmp}/scorer"], "--rerank re-orders retrieval results: pass --retrieval"),
        (["--retrieval", "--rerank-top", "5"], "--rerank-top is how many cosine hits --rerank re-scores"),
        (["--retrieval", "--rerank", "{tmp}/scorer", "--rerank-top", "0"], "--rerank-top: must be at least 1"),
    ],
)
def test_evaluate_refuses_bad_rerank_options_before_loading_and_writes_nothing(
    options, message, folders, no_weights_load, capsys
):
    tmp_path = folders
    (tmp_path / "pairs.tsv").write_text("我想换手机\t手机多少钱\t1\n", encoding="utf-8")
    arguments = evaluate_command(tmp_path, *[option.format(tmp=tmp_path) for option in options])
    with pytest.raises(SystemExit) as stopped:
        main(arguments + ["--output", str(tmp_path / "eval.json")])
    said = str(stopped.value.code) + capsys.readouterr().err
    assert stopped.value.code != 0 and re.search(message, said), said
    assert not (tmp_path / "eval.json").exists()


def test_evaluate_refuses_an_interaction_model_as_the_encoder(folders, no_weights_load):
    tmp_path = folders
    (tmp_path / "pairs.tsv").write_text("我想换手机\t手机多少钱\t1\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="scorer: retrieval metrics need a feature model"):
        main(["evaluate", str(tmp_path / "scorer"), str(tmp_path / "pairs.tsv"), "--retrieval", "--rerank", "x"])
