"""Issue 36, point 2: the examples of in-batch negatives (anchor, positive, hard negatives), read from
n-tuple files in each layout, from pairs without labels, and built from labelled pairs; and the
data-side bad input of its "Bad input" section, each an error naming the file, the line and what to do."""

import json
import logging
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosent_tf import DataError
from cosent_tf.data.files import PairFileFormat
from cosent_tf.data.groups import GroupData, groups_from_pairs, read_group_file
from cosent_tf.data.pairs import PairData
from cosent_tf.data.tasks import TASKS, Task
from tests.data.fuzz import FUZZ


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the messages name the files as given: relative to here


def write(name, content):
    with open(name, "w", encoding="utf-8", newline="") as file:
        file.write(content)
    return name


def jsonl(name, *records):
    return write(name, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def raised(action, *args, **kwargs):
    with pytest.raises(DataError) as error:
        action(*args, **kwargs)
    return str(error.value)


def examples(data):
    return list(zip(data.anchors, data.positives, data.negatives))


# -- the layouts ---------------------------------------------------------------------------------


def test_flagembedding_lines_give_one_example_per_positive_each_with_its_lines_negatives():
    data = read_group_file(
        jsonl(
            "train.jsonl",
            {"query": "怎么还款", "pos": ["如何还钱", "还款方式"], "neg": ["天气", "下雨"], "prompt": "x"},
            {"query": "花呗额度", "pos": "额度多少"},  # one string; no neg: no negatives
            {"query": "借呗", "pos": ["借呗利息"], "neg": "晴天"},
        )
    )
    assert isinstance(data, GroupData)
    assert examples(data) == [
        ("怎么还款", "如何还钱", ["天气", "下雨"]),
        ("怎么还款", "还款方式", ["天气", "下雨"]),
        ("花呗额度", "额度多少", []),
        ("借呗", "借呗利息", ["晴天"]),
    ]
    assert data.lines == [1, 1, 2, 3] and data.source == "train.jsonl"
    assert "FlagEmbedding" in data.notes[0] and "4 examples from 3 lines" in data.notes[0]


def test_sentence_transformers_columns_are_read_with_numbered_negatives_in_order():
    data = read_group_file(
        jsonl(
            "train.jsonl",
            {"anchor": "a", "positive": "p", "negative_2": "n2", "negative_1": "n1", "negative_10": "n10"},
            {"anchor": "b", "positive": "q", "negative": "m"},
            {"anchor": "c", "positive": "r"},
        )
    )
    assert examples(data) == [("a", "p", ["n1", "n2", "n10"]), ("b", "q", ["m"]), ("c", "r", [])]


def test_tsv_rows_of_anchor_positive_negatives_may_have_different_numbers_of_negatives():
    data = read_group_file(
        write("train.tsv", "\ufeff怎么还款\t如何还钱\t天气\n\n花呗\t额度\t下雨\t晴\t阴\n"), strict=False
    )
    assert examples(data) == [("怎么还款", "如何还钱", ["天气"]), ("花呗", "额度", ["下雨", "晴", "阴"])]
    assert data.lines == [1, 3] and "2 examples from 2 lines, with 1 to 3 hard negative(s) each" in data.notes[0]
    same = read_group_file(write("b.tsv", "a\tp\tn\nb\tq\tm\n"))
    assert "with 1 hard negative(s) each" in same.notes[0]


@pytest.mark.parametrize("header", ["query\tpos\tneg\n", "anchor\tpositive\tnegative_1\tnegative_2\n"])
def test_a_tsv_header_of_column_names_is_left_out(header):
    data = read_group_file(write("train.tsv", header + "a\tp\tn\tm\n"))
    assert examples(data) == [("a", "p", ["n", "m"])] and data.lines == [2]
    assert "header" in data.notes[-1]


def test_csv_rows_by_column_name_and_by_position():
    by_name = read_group_file(write("a.csv", "id,anchor,positive,negative_1,negative_2\n7,a,p,n,m\n8,b,q,o,\n"))
    assert examples(by_name) == [("a", "p", ["n", "m"]), ("b", "q", ["o"])]  # an empty last cell: one negative fewer
    by_position = read_group_file(write("b.csv", "\ufeffq,d,hard\na,p,n\nb,q,\n"))
    assert examples(by_position) == [("a", "p", ["n"]), ("b", "q", [])]


@pytest.mark.parametrize(
    "name, content",
    [
        ("a.tsv", "你好\t您好\n天气\t下雨\n"),
        ("a.csv", "sentence1,sentence2\n你好,您好\n天气,下雨\n"),
        ("a.jsonl", '{"sentence1": "你好", "sentence2": "您好"}\n{"sentence1": "天气", "sentence2": "下雨"}\n'),
    ],
)
def test_pairs_without_labels_are_positive_pairs_without_negatives(name, content):
    data = read_group_file(write(name, content))
    assert isinstance(data, GroupData)
    assert examples(data) == [("你好", "您好", []), ("天气", "下雨", [])]
    assert data.group_size() == 2


@pytest.mark.parametrize(
    "name, content",
    [
        ("a.tsv", "你好\t您好\t1\n天气\t下雨\t0\n"),
        ("b.tsv", "sentence1\tsentence2\tlabel\n你好\t您好\t1\n天气\t下雨\t0\n"),  # a header of known names
        ("c.tsv", "q1\tq2\tsame\n你好\t您好\t1\n天气\t下雨\t0\n"),  # a header of other names, told by line 2
        ("a.csv", "sentence1,sentence2,label\n你好,您好,1\n天气,下雨,0\n"),
        (
            "a.jsonl",
            '{"sentence1": "你好", "sentence2": "您好", "label": 1}\n'
            '{"sentence1": "天气", "sentence2": "下雨", "label": 0}\n',
        ),
    ],
)
def test_labelled_pairs_are_read_as_the_pair_reader_reads_them(name, content):
    data = read_group_file(write(name, content))
    assert isinstance(data, PairData)
    assert (data.texts_a, data.texts_b, data.labels.tolist()) == (["你好", "天气"], ["您好", "下雨"], [1.0, 0.0])


def test_the_pair_fields_named_are_the_ones_read():
    file_format = PairFileFormat(text_a_field="q1", text_b_field="q2")
    data = read_group_file(jsonl("a.jsonl", {"q1": "a", "q2": "b"}, {"q1": "c", "q2": "d"}), file_format)
    assert examples(data) == [("a", "b", []), ("c", "d", [])]


# -- lines flagged -------------------------------------------------------------------------------


def test_empty_repeated_and_own_negatives_are_left_out_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        data = read_group_file(write("a.tsv", "a\tp\tn\t\tn\tp\ta\tm\n"))
    assert examples(data) == [("a", "p", ["n", "m"])]
    warned = caplog.text
    assert "with an empty negative, left out" in warned and "with a repeated negative, left out" in warned
    assert "with a negative that is its anchor or positive, left out" in warned
    assert "a.tsv, line 1: with an empty negative, left out" in raised(read_group_file, "a.tsv", strict=True)


def test_an_empty_pos_list_skips_its_line_and_is_an_error_under_strict(caplog):
    path = jsonl("a.jsonl", {"query": "q", "pos": [], "neg": ["n"]}, {"query": "r", "pos": ["p"]})
    with caplog.at_level(logging.WARNING):
        assert examples(read_group_file(path)) == [("r", "p", [])]
    assert "with an empty 'pos' list, skipped" in caplog.text
    assert raised(read_group_file, path, strict=True).startswith("a.jsonl, line 1: with an empty 'pos' list, skipped")


def test_repeated_examples_and_empty_texts_are_kept_and_flagged():
    assert raised(read_group_file, write("a.tsv", "a\tp\tn\na\tp\tn\n"), strict=True) == (
        "a.tsv, line 2: repeating an earlier example, kept: the example of line 1 (an error under --strict)"
    )
    assert len(read_group_file("a.tsv")) == 2
    assert "a.tsv, line 1: with an empty anchor or positive" in raised(
        read_group_file, write("a.tsv", " \tp\tn\n"), strict=True
    )


# -- bad input: the layout does not hold --------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "a\tp\tn\tm\nb\tq\tn\nc\td\n",
            "a.tsv, line 3: 2 tab-separated field(s), but line 1 has 4: the file is read as rows "
            "anchor<TAB>positive<TAB>negative_1 ... negative_k: give every row its anchor, its positive and at "
            "least one negative",
        ),
        (
            "a\tp\nb\tq\tn\n",
            "a.tsv, line 2: 3 tab-separated field(s), but line 1 has 2: the file is read as pairs without labels "
            "(text_a<TAB>text_b), positive pairs: give every line two fields",
        ),
        ("a\nb\n", "a.tsv, line 1: no tab: expected anchor<TAB>positive<TAB>negative_1 ... negative_k"),
        (
            "1\t你好\t您好\n",
            "a.tsv, line 1: the first field '1' is a label and the last '您好' is not: is this file label-first?",
        ),
        ("\n\n", "a.tsv: no usable examples in this file"),
        (
            "7\t你好\t您好\t1\n",
            "a.tsv, line 1: the last of 4 fields, '1', reads as a label, which rows of anchor<TAB>positive<TAB>"
            "negative_1 ... negative_k do not have: is there an extra column (an id?) in a pair file?",
        ),
    ],
)
def test_a_tsv_line_that_does_not_fit_the_first_lines_layout_is_named(content, message):
    assert raised(read_group_file, write("a.tsv", content)).startswith(message)


def test_a_jsonl_line_of_another_layout_than_the_first_is_named():
    path = jsonl("a.jsonl", {"query": "q", "pos": "p"}, {"anchor": "a", "positive": "b"})
    assert raised(read_group_file, path) == (
        "a.jsonl, line 2: no field 'query', 'pos'; this line has 'anchor', 'positive': line 1 has 'query', 'pos', "
        "and every line must have its layout's fields"
    )
    path = jsonl("b.jsonl", {"sentence1": "a", "sentence2": "b"}, {"sentence1": "c", "sentence2": "d", "label": 1})
    assert raised(read_group_file, path) == (
        "b.jsonl, line 2: a label field 'label', but line 1 has none: label every line (pairs with labels) or "
        "none (positive pairs)"
    )


@pytest.mark.parametrize(
    "record, message",
    [
        ({"query": 3, "pos": "p"}, "a.jsonl, line 1: field 'query' must be a string, not a number"),
        (
            {"query": "q", "pos": ["p", None]},
            "a.jsonl, line 1: field 'pos' must be a string or a list of strings, not a list holding null",
        ),
        (
            {"query": "q", "pos": "p", "neg": None},
            "a.jsonl, line 1: field 'neg' must be a string or a list of strings, not null",
        ),
        (
            {"anchor": "a", "positive": "p", "negative_1": ["n"]},
            "a.jsonl, line 1: field 'negative_1' must be a string, not a list",
        ),
        ({"text": "a"}, "a.jsonl, line 1: no layout of training examples; this line has 'text': give 'query', 'pos'"),
    ],
)
def test_a_jsonl_value_of_the_wrong_type_is_named(record, message):
    assert raised(read_group_file, jsonl("a.jsonl", record)).startswith(message)


def test_a_csv_whose_header_is_a_row_is_named():
    assert raised(read_group_file, write("a.csv", "a,p,1\n")).startswith(
        "a.csv, line 1: line 1 reads as a row, not a header"
    )


# -- group sizes ---------------------------------------------------------------------------------


def test_the_group_size_defaults_to_the_fewest_negatives_of_any_example():
    data = GroupData(["a", "b", "c"], ["p", "q", "r"], [["n", "m"], ["o"], ["x", "y", "z"]], "a.tsv", [1, 2, 3])
    assert data.group_size() == 3
    assert data.group_size(2) == 2 and data.group_size(3) == 3  # more negatives than taken: drawn each epoch


def test_the_note_says_when_examples_draw_their_negatives_and_how_to_take_more():
    data = GroupData(["a", "b", "c"], ["p", "q", "r"], [["n", "m"], ["o"], ["x", "y", "z"]], "a.tsv", [1, 2, 3])
    note = data.negatives_note(data.group_size())
    assert note.startswith("a.tsv: examples have 1 to 3 hard negatives and each takes 1 (1 of 3 examples have 1)")
    assert note.endswith("give the others more and pass --group-size")
    assert "pass --group-size" not in data.negatives_note(2)  # fewer asked for than every example has
    assert GroupData(["a", "b"], ["p", "q"], [["n"], ["m"]]).negatives_note(3) is None


def test_a_group_size_some_example_cannot_fill_names_the_first_line_and_what_to_do():
    data = GroupData(["a", "b", "c"], ["p", "q", "r"], [["n", "m"], ["o"], []], "a.tsv", [1, 4, 6])
    assert raised(data.group_size, 4) == (
        "a.tsv, line 4: group size 4 takes 2 hard negative(s) per example, but this line's example has 1 "
        "(2 of 3 examples have fewer): pass --group-size 2 or less, or give those lines more negatives (a row is "
        "not padded by repeating a negative, which would count twice in the softmax)"
    )
    built = GroupData(["a", "b"], ["p", "q"], [["n"], []], "pairs.tsv")  # from pairs: no lines
    assert raised(built.group_size, 3).startswith(
        "pairs.tsv: group size 3 takes 1 hard negative(s) per example, but example 2 (anchor 'b') has 0"
    )


def test_a_group_size_below_2_is_refused():
    assert raised(GroupData(["a"], ["p"], [[]], "a.tsv").group_size, 1) == (
        "a.tsv: group size 1: a group is an anchor, its positive and its hard negatives, so at least 2; "
        "pass --group-size 2 or more"
    )


def test_a_group_size_that_disagrees_with_the_file_read_names_its_line():
    data = read_group_file(write("a.tsv", "a\tp\tn\tm\nb\tq\to\n"))
    assert raised(data.group_size, 4).startswith("a.tsv, line 2: group size 4 takes 2 hard negative(s)")


# -- in-batch checks -----------------------------------------------------------------------------


def test_every_anchor_the_same_text_is_refused_for_in_batch_negatives():
    data = read_group_file(write("a.tsv", "怎么还款\t如何还钱\t天气\n怎么还款\t还款方式\t下雨\n"))
    assert raised(data.check_in_batch) == (
        "a.tsv: every anchor is the same text ('怎么还款'): its in-batch negatives, the other examples' positives, "
        "would all be its own positives; give examples of different anchors, or train a pair loss (--loss cosent)"
    )


def test_one_example_is_refused_for_in_batch_negatives():
    data = read_group_file(write("a.tsv", "\n怎么还款\t如何还钱\t天气\n"))
    assert raised(data.check_in_batch).startswith("a.tsv, line 2: 1 example(s): an in-batch loss takes each anchor's")
    GroupData(["a", "b"], ["p", "q"], [[], []]).check_in_batch()  # two anchors: nothing to refuse


# -- subsets and validation pairs ----------------------------------------------------------------


def test_subset_and_sample_keep_lines_and_negatives_aligned():
    data = GroupData(list("abcdef"), list("ghijkl"), [[str(i)] for i in range(6)], "a.tsv", [2, 3, 5, 7, 11, 13])
    sample = data.sample(3, seed=1)
    assert len(sample) == 3 and sample.lines == sorted(sample.lines)
    for anchor, positive, negatives, line in zip(sample.anchors, sample.positives, sample.negatives, sample.lines):
        index = data.lines.index(line)
        assert (anchor, positive, negatives) == (data.anchors[index], data.positives[index], data.negatives[index])
    assert data.sample(3, seed=1).anchors == sample.anchors and data.sample(None, seed=1) is data


def test_labelled_pairs_give_each_positive_and_each_negative_or_a_drawn_one():
    data = GroupData(["a", "b", "c"], ["p", "q", "r"], [["n", "m"], [], []], "a.tsv", [1, 2, 3])
    pairs = data.labelled_pairs(seed=0)
    rows = list(zip(pairs.texts_a, pairs.texts_b, pairs.labels.tolist()))
    assert rows[:3] == [("a", "p", 1.0), ("a", "n", 0.0), ("a", "m", 0.0)]
    assert rows[3] == ("b", "q", 1.0) and rows[4][0] == "b" and rows[4][2] == 0.0 and rows[4][1] in ("p", "r")
    assert rows[5] == ("c", "r", 1.0) and rows[6][1] in ("p", "q")
    assert pairs.source == "a.tsv" and pairs.label_kind == "binary"
    assert data.labelled_pairs(seed=0).texts_b == pairs.texts_b  # seeded


def test_labelled_pairs_without_any_negative_to_draw_are_refused():
    assert raised(GroupData(["a", "a"], ["p", "q"], [[], []], "a.tsv").labelled_pairs, 0).startswith(
        "a.tsv: no dissimilar pair can be made to validate on"
    )


# -- examples from labelled pairs ----------------------------------------------------------------


def pairs_of(rows, source="pairs.tsv"):
    return PairData([r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows], np.float32), source)


def test_binary_pairs_give_one_example_per_positive_pair():
    pairs = pairs_of([("a", "p", 1), ("a", "n", 0), ("b", "q", 1), ("c", "x", 0)])
    data = groups_from_pairs(pairs, TASKS["BQ"], hard_negatives=False, seed=0)
    assert examples(data) == [("a", "p", []), ("b", "q", [])] and data.lines is None
    assert data.source == "pairs.tsv" and "2 of 4 pairs are labelled as matches (label above 0.5)" in data.notes[0]


def test_hard_negatives_from_labels_take_the_texts_paired_either_way_round():
    pairs = pairs_of([("a", "p", 1), ("a", "n", 0), ("m", "a", 0), ("b", "q", 1), ("c", "x", 0), ("a", "n", 0)])
    data = groups_from_pairs(pairs, TASKS["BQ"], hard_negatives=True, seed=0)
    assert data.negatives[0] == ["n", "m"]  # as text_b and as text_a; the repeated pair once
    assert data.negatives[1] and data.negatives[1][0] not in ("b", "q")  # no labelled negative: a random text
    assert any("1 of 2 anchors have no labelled negative: each got a random text" in note for note in data.notes)


def test_nli_labels_take_contradictions_only_as_hard_negatives():
    pairs = pairs_of(
        [("前提", "蕴含", 2), ("前提", "中立", 1), ("前提", "矛盾", 0), ("其他", "句子", 2), ("其他", "别的", 0)]
    )
    data = groups_from_pairs(pairs, TASKS["NLI"], hard_negatives=True, seed=0)
    assert examples(data) == [("前提", "蕴含", ["矛盾"]), ("其他", "句子", ["别的"])]  # supervised SimCSE's triples
    assert Task.for_labels("mine", "nli").negative_at_most == 0.0


def test_graded_labels_split_at_the_tasks_threshold():
    pairs = pairs_of([("a", "p", 4.5), ("a", "n", 1.0), ("a", "m", 2.5), ("b", "q", 3.0)])
    data = groups_from_pairs(pairs, TASKS["STS-B"], hard_negatives=True, seed=0)
    assert examples(data)[0] == ("a", "p", ["n", "m"]) and data.positives == ["p", "q"]


def test_labelled_pairs_with_no_positive_pair_are_refused():
    pairs = pairs_of([("a", "p", 0), ("b", "q", 0)])
    assert raised(groups_from_pairs, pairs, TASKS["BQ"], hard_negatives=False, seed=0) == (
        "pairs.tsv: no pair is labelled as a match (label above 0.5): in-batch negatives train on the positive "
        "pairs; give pairs labelled as matches, or train a pair loss (--loss cosent)"
    )
    graded = pairs_of([("a", "p", 2.5)])
    assert "label above 2.5" in raised(groups_from_pairs, graded, TASKS["STS-B"], hard_negatives=True, seed=0)


def test_labelled_pairs_read_from_a_file_become_examples():
    pairs = read_group_file(write("a.tsv", "a\tp\t1\na\tn\t0\nb\tq\t1\n"))
    assert isinstance(pairs, PairData)
    data = groups_from_pairs(pairs, TASKS["BQ"], hard_negatives=True, seed=3)
    assert examples(data)[0] == ("a", "p", ["n"]) and data.source == "a.tsv"


texts = st.sampled_from([f"t{i}" for i in range(8)])


@FUZZ
@given(st.lists(st.tuples(texts, texts, st.sampled_from([0.0, 1.0])), min_size=1, max_size=30), st.integers(0, 99))
def test_the_random_negative_is_never_the_anchor_or_one_of_its_positives(rows, seed):
    pairs = pairs_of(rows)
    if not pairs.labels.any():
        return
    data = groups_from_pairs(pairs, TASKS["BQ"], hard_negatives=True, seed=seed)
    positives_of = {}
    for a, b, label in rows:
        if label:
            positives_of.setdefault(a, set()).add(b)
            positives_of.setdefault(b, set()).add(a)
    for anchor, negatives in zip(data.anchors, data.negatives):
        assert not set(negatives) & (positives_of[anchor] | {anchor})
    validation = data.labelled_pairs(seed) if any(data.negatives) else None
    if validation is not None:
        for a, b, label in zip(validation.texts_a, validation.texts_b, validation.labels):
            assert label == 1.0 or (b != a and b not in positives_of[a])


@FUZZ
@given(st.lists(st.tuples(texts, texts, st.lists(texts, max_size=3)), min_size=2, max_size=20), st.integers(0, 99))
def test_labelled_pairs_never_draw_a_positive_of_the_anchor(rows, seed):
    data = GroupData([r[0] for r in rows], [r[1] for r in rows], [list(r[2]) for r in rows])
    try:
        pairs = data.labelled_pairs(seed)
    except DataError:
        return
    own = {}
    for anchor, positive, _ in rows:
        own.setdefault(anchor, {anchor}).add(positive)
    drawn = [(a, b) for a, b, label in zip(pairs.texts_a, pairs.texts_b, pairs.labels) if label == 0]
    given_negatives = {(r[0], n) for r in rows for n in r[2]}
    for a, b in drawn:
        assert (a, b) in given_negatives or b not in own[a]


def test_the_groups_docstring_examples_run():
    import doctest

    from cosent_tf.data import groups

    assert doctest.testmod(groups, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def test_the_readers_are_data_level_names():
    import cosent_tf.data

    assert cosent_tf.data.read_group_file is read_group_file and cosent_tf.data.GroupData is GroupData
    assert os.path.basename(cosent_tf.data.groups_from_pairs.__code__.co_filename) == "groups.py"


# -- what is written is what is read -------------------------------------------------------------

row_text = st.text(st.characters(blacklist_characters="\t\n\r\ufeff", blacklist_categories=("Cs",)), max_size=8)
example = st.tuples(row_text, row_text, st.lists(row_text, min_size=1, max_size=4)).map(
    lambda e: ("文" + e[0], "文" + e[1], list(dict.fromkeys("负" + n for n in e[2])))  # texts: never a label
)


@FUZZ
@given(st.lists(example, min_size=1, max_size=12))
def test_tsv_rows_are_read_back_as_written(tmp_path, rows):
    path = write(str(tmp_path / "rows.tsv"), "".join("\t".join([a, p, *n]) + "\n" for a, p, n in rows))
    data = read_group_file(path)
    assert examples(data) == rows and data.lines == list(range(1, len(rows) + 1))


any_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8).filter(str.strip)


@FUZZ
@given(st.lists(st.tuples(any_text, st.lists(any_text, min_size=1, max_size=3), st.lists(any_text, max_size=3))))
def test_flagembedding_lines_are_read_back_as_written(tmp_path, lines):
    lines = [
        (query, list(dict.fromkeys(pos)), [n for n in dict.fromkeys(neg) if n != query]) for query, pos, neg in lines
    ]
    lines = [(query, pos, [n for n in neg if n not in pos]) for query, pos, neg in lines if query not in pos]
    if not lines:
        return
    path = jsonl(str(tmp_path / "rows.jsonl"), *({"query": q, "pos": pos, "neg": neg} for q, pos, neg in lines))
    data = read_group_file(path)
    assert examples(data) == [(query, positive, neg) for query, pos, neg in lines for positive in pos]
