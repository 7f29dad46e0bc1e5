"""Retrieval tests in the BEIR / MTEB layout."""

import pytest

from cosent_tf import DataError
from cosent_tf.data.retrieval import read_retrieval_files


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_retrieval_files_in_the_beir_layout(tmp_path):
    queries = write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "怎么还款"}\n{"_id": "q2", "text": "没用"}\n')
    corpus = write(
        tmp_path / "corpus.jsonl", '{"_id": "d1", "title": "花呗", "text": "还款方法"}\n{"_id": 2, "text": "开通"}\n'
    )
    qrels = write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t2\t0\n")
    assert read_retrieval_files(queries, corpus, qrels) == (["怎么还款"], ["花呗 还款方法", "开通"], [{0}])
    write(qrels, "q1\td9\t1\n")
    with pytest.raises(DataError, match=r"qrels.tsv, line 1: corpus-id 'd9' is not in"):
        read_retrieval_files(queries, corpus, qrels)
