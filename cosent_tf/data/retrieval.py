"""Retrieval tests in the BEIR / MTEB layout: queries, a corpus and the qrels that join them."""

from __future__ import annotations

from typing import Any

from ..errors import DataError
from .files import jsonl_objects
from .pairs import PLAIN_DECIMAL, PathLike, decoded_lines, finite_label, without_newline


def _retrieval_id(path: PathLike, number: int, record: dict[str, Any], earlier: dict[str, Any], what: str) -> str:
    """A record's ``_id`` as the qrels file writes it; a repeated one is an error, not a silent choice."""
    value = record["_id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, f"_id must be a string or an integer, not {_json_type(value)}", line=number)
    key = str(value)
    if key in earlier:
        raise DataError(path, f"_id {key!r} repeats an earlier {what}", line=number)
    return key


def _retrieval_text(path: PathLike, number: int, record: dict[str, Any], field: str, optional: bool = False) -> str:
    value = record.get(field)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise DataError(path, f"{field} must be a string, not {_json_type(value)}", line=number)
    return value


def _json_type(value: object) -> str:
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "true/false",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), "null")


def read_retrieval_files(
    queries_path: PathLike, corpus_path: PathLike, qrels_path: PathLike
) -> tuple[list[str], list[str], list[set[int]]]:
    """A retrieval test in the BEIR/MTEB layout.

    ``queries.jsonl`` holds ``{"_id", "text"}`` objects, ``corpus.jsonl`` ``{"_id", "text"}``
    with an optional ``title`` (put before the text), and the qrels TSV holds
    ``query-id<TAB>corpus-id<TAB>score`` lines (a header line is allowed); a score above 0
    marks a relevant text. Queries without a relevant text are left out.

    Args:
        queries_path: the queries' JSONL file.
        corpus_path: the corpus' JSONL file.
        qrels_path: the qrels TSV file.

    Returns:
        ``(queries, corpus, relevant)``: the query texts, the corpus texts, and for query i the
        set of the corpus indices relevant to it.

    Raises:
        DataError: naming the file and line, for a line that is not a JSON object, a missing
            field, an id that is not a string or integer or that repeats, a text that is not a
            string, a qrels line that is not three fields or names an unknown id, a score that
            is not a finite number, or no relevant pair at all.

    Example:
        >>> queries, corpus, relevant = read_retrieval_files(  # doctest: +SKIP
        ...     "queries.jsonl", "corpus.jsonl", "qrels/test.tsv"
        ... )
    """
    query_text: dict[str, str] = {}
    corpus_index: dict[str, int] = {}
    corpus: list[str] = []
    for number, record in jsonl_objects(queries_path, ("_id", "text")):
        key = _retrieval_id(queries_path, number, record, query_text, "query")
        query_text[key] = _retrieval_text(queries_path, number, record, "text")
    for number, record in jsonl_objects(corpus_path, ("_id", "text")):
        key = _retrieval_id(corpus_path, number, record, corpus_index, "document")
        text = _retrieval_text(corpus_path, number, record, "text")
        title = _retrieval_text(corpus_path, number, record, "title", optional=True).strip()
        corpus_index[key] = len(corpus)
        corpus.append(f"{title} {text}" if title else text)
    relevant: dict[str, set[int]] = {}
    for number, line in decoded_lines(qrels_path):
        fields = without_newline(line).split("\t")
        if number == 1 and fields[:2] == ["query-id", "corpus-id"]:
            continue
        if not line.strip():
            continue
        if len(fields) != 3:
            raise DataError(
                qrels_path, f"expected query-id<TAB>corpus-id<TAB>score, found {len(fields)} field(s)", line=number
            )
        query, document, score = fields
        if query not in query_text:
            raise DataError(qrels_path, f"query-id {query!r} is not in {queries_path}", line=number)
        if document not in corpus_index:
            raise DataError(qrels_path, f"corpus-id {document!r} is not in {corpus_path}", line=number)
        if not PLAIN_DECIMAL.fullmatch(score.strip()):
            raise DataError(qrels_path, f"score {score!r} is not a number", line=number)
        if finite_label(qrels_path, number, score.strip(), "score") > 0:
            relevant.setdefault(query, set()).add(corpus_index[document])
    if not relevant:
        raise DataError(qrels_path, "no relevant (score > 0) query-document pair in this file")
    return [query_text[q] for q in relevant], corpus, list(relevant.values())
