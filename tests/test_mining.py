"""Issue 37: hard negatives mined with an encoder, checked against a brute force in numpy on small
corpora: the same candidates, ranks and cosines; guards that never let a labelled positive, the
anchor or a duplicate of the positive through, over random labellings; the margin and rescore
guards; seeded determinism; bad input; and outputs that the readers take back."""

import json
import os
import unicodedata

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, PairScorer, SentenceEncoder, VectorIndex
from cosent_tf.data.files import read_pair_file
from cosent_tf.data.groups import GroupData, read_group_file
from cosent_tf.data.pairs import PairData
from cosent_tf.mining import (
    GUARDS,
    SUMMARY_FORMAT,
    default_corpus,
    mine_hard_negatives,
    normalized_text,
    rank_window,
    score_statistics,
    summary_paths,
)
from tests.helpers import distinct_texts, make_model_dir


@pytest.fixture
def encoder(mining_models):
    return SentenceEncoder.load(str(mining_models / "encoder"))


@pytest.fixture
def scorer(mining_models):
    return PairScorer.load(str(mining_models / "scorer"))


def reference_normal(text):
    """The normalisation the guards are specified with, written out plainly."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in text if not unicodedata.category(c).startswith(("Z", "P", "C")))


def brute_force(encoder, anchors, corpus):
    """Each anchor's cosines with every corpus text, and the corpus indices best first (a stable
    sort: ties to the lower index)."""
    cosines = encoder.encode(anchors) @ encoder.encode(corpus).T
    return cosines, np.argsort(-cosines, axis=1, kind="stable")


def margin_between(gaps):
    """A margin that about half of ``gaps`` lie below, away from every one of them (so that float noise
    between two ways of computing a score cannot move a candidate across it): the middle of the widest
    space between neighbouring gaps of the middle third."""
    ordered = np.sort(np.ravel(gaps))
    third = len(ordered) // 3
    middle = ordered[third : 2 * third + 1]
    widest = int(np.argmax(np.diff(middle)))
    return float((middle[widest] + middle[widest + 1]) / 2)


def group(anchors, positives):
    return GroupData(list(anchors), list(positives), [[] for _ in anchors], source="made.jsonl")


# -- normalisation ---------------------------------------------------------------------------------


def test_normalisation_folds_width_case_and_drops_spaces_punctuation_and_controls():
    assert normalized_text("花呗 怎么还款？") == normalized_text("花呗怎么还款?") == "花呗怎么还款"
    assert normalized_text("ＱＱ号码\u200b是 多少!") == "qq号码是多少"  # full width, a zero-width space
    assert normalized_text("iPhone\t6S") == "iphone6s"
    assert normalized_text("1+1=2") == "1+1=2"  # symbols are kept
    for text in ["花呗 怎么还款？", "ＡＢＣ，ｄｅｆ", "\u3000你好。", "Straße"]:
        assert normalized_text(text) == reference_normal(text)


# -- the ranking -----------------------------------------------------------------------------------


def test_candidates_ranks_and_cosines_are_the_brute_forces(encoder, monkeypatch):
    anchors = distinct_texts(1, 6)
    positives = distinct_texts(2, 6, anchors)
    corpus = distinct_texts(3, 40, anchors + positives)
    mined = mine_hard_negatives(encoder, group(anchors, positives), corpus, rank_range=(3, 12), num_negatives=10)
    cosines, order = brute_force(encoder, anchors, corpus)
    assert [example[:2] for example in mined.examples] == list(zip(anchors, positives))
    for row, (_, _, negatives) in enumerate(mined.examples):
        window = order[row, 2:12]
        assert negatives == [corpus[i] for i in window]
        np.testing.assert_array_equal(mined.negative_ranks[row], np.arange(3, 13))
        np.testing.assert_allclose(mined.negative_cosines[row], cosines[row, window], atol=1e-5)
    np.testing.assert_allclose(mined.positive_cosines, encoder.similarity(anchors, positives), atol=1e-5)
    assert mined.removed == dict.fromkeys(GUARDS, 0)
    assert mined.counts["examples_mined"] == 6 and mined.counts["corpus_size"] == 40

    # The corpus encoded a few texts at a time and the anchors searched one at a time: the same.
    monkeypatch.setattr("cosent_tf.mining.CORPUS_CHUNK", 7)
    chunked = mine_hard_negatives(
        encoder, group(anchors, positives), corpus, rank_range=(3, 12), num_negatives=10, anchor_block=1
    )
    assert chunked.examples == mined.examples
    np.testing.assert_array_equal(chunked.negative_ranks, mined.negative_ranks)
    np.testing.assert_allclose(chunked.negative_cosines, mined.negative_cosines, atol=1e-5)


def test_an_index_is_searched_as_it_is_and_must_be_the_encoders(encoder, tmp_path, tiny_config):
    anchors = distinct_texts(4, 3)
    positives = distinct_texts(5, 3, anchors)
    corpus = distinct_texts(6, 20, anchors + positives)
    index = encoder.build_index(corpus)
    # Each text given another's vector: the index's vectors are what is ranked, the texts are not encoded again.
    index.vectors = np.roll(index.vectors, 7, axis=0)
    mined = mine_hard_negatives(encoder, group(anchors, positives), index, rank_range=(4, 8), num_negatives=5)
    order = np.argsort(-(encoder.encode(anchors) @ index.vectors.T), axis=1, kind="stable")
    assert [negatives for _, _, negatives in mined.examples] == [[corpus[i] for i in row[3:8]] for row in order]

    make_model_dir(tmp_path / "other", tiny_config, pooling="last-avg")
    index.save(str(tmp_path / "index"))
    other = SentenceEncoder.load(str(tmp_path / "other"))
    with pytest.raises(ConfigError, match="the index was built with the model .*encoder, not .*other"):
        mine_hard_negatives(other, group(anchors, corpus[:3]), VectorIndex.load(tmp_path / "index"))


def test_the_default_corpus_is_every_distinct_second_text_in_order(encoder):
    data = GroupData(
        ["甲乙丙", "丁戊己", "甲乙丙"], ["上中下", "大人小", "上中下"], [["国和地"], [], ["人这中", "国和地"]]
    )
    assert default_corpus(data) == ["上中下", "国和地", "大人小", "人这中"]
    mined = mine_hard_negatives(encoder, data, rank_range=(1, 4), num_negatives=1)
    assert mined.counts["corpus_size"] == 4 and mined.settings["corpus"] == "the data's distinct second texts"
    for _, positive, negatives in mined.examples:  # the corpus's texts, less the positive
        assert negatives[0] in {"国和地", "大人小", "人这中", "上中下"} - {positive}


# -- the guards ------------------------------------------------------------------------------------


def reference_survivors(anchor, positive, window_texts, matches):
    """What the guards keep of a window, and which guard removed each of the rest (in order)."""
    kept, removed = [], dict.fromkeys(GUARDS, 0)
    own = reference_normal(positive)
    for text in window_texts:
        key = reference_normal(text)
        if key == reference_normal(anchor):
            removed["anchor_itself"] += 1
        elif key != own and key in matches:
            removed["labelled_positive"] += 1
        elif key == own:
            removed["duplicate_of_positive"] += 1
        else:
            kept.append(text)
    return kept, removed


def chosen(survivors, count, sampling, seed, number):
    """The negatives the specification chooses: the best-ranked, or a draw of the example's own
    generator, kept in rank order."""
    if sampling == "top":
        return survivors[:count]
    drawn = np.random.default_rng([seed, number]).choice(len(survivors), size=count, replace=False)
    return [survivors[i] for i in sorted(drawn)]


def test_no_labelled_positive_anchor_or_duplicate_is_ever_a_negative_over_random_labellings(encoder):
    base = distinct_texts(6, 12)
    # Variants that only normalisation tells apart: spaces, punctuation, full-width forms.
    variants = [base[0][:2] + " " + base[0][2:] + "？", base[1] + "!", "\u3000" + base[2] + "。", base[3] + "（）"]
    pool = base + variants
    index = encoder.build_index(pool)
    totals = dict.fromkeys(GUARDS, 0)
    for seed in range(30):
        rng = np.random.default_rng(seed)
        pairs = [tuple(rng.choice(len(pool), 2, replace=False)) for _ in range(14)]
        labels = rng.integers(0, 2, len(pairs)).astype(np.float32)
        labels[0] = 1.0
        data = PairData([pool[i] for i, _ in pairs], [pool[j] for _, j in pairs], labels, "random.tsv")
        sampling = "top" if seed % 2 else "random"
        mined = mine_hard_negatives(
            encoder, data, index, rank_range=(1, len(pool)), num_negatives=2, sampling=sampling, seed=seed
        )
        matched = [(a, b) for a, b, label in zip(data.texts_a, data.texts_b, labels) if label == 1]
        assert all(example[:2] in matched for example in mined.examples)
        assert mined.counts["examples_read"] == len(matched)
        for anchor, positive, negatives in mined.examples:
            for negative in negatives:
                assert reference_normal(negative) != reference_normal(anchor)
                assert reference_normal(negative) != reference_normal(positive)
                for a, b in matched:  # either way round, exactly or normalised
                    assert {reference_normal(a), reference_normal(b)} != {
                        reference_normal(anchor),
                        reference_normal(negative),
                    }
        # The brute force: the window, less what the guards remove, best first.
        anchors = list(dict.fromkeys(a for a, _ in matched))
        cosines = encoder.encode(anchors) @ index.vectors.T
        order = np.argsort(-cosines, axis=1, kind="stable")
        expected_removed = dict.fromkeys(GUARDS, 0)
        mined_by_example = iter(mined.examples)
        for number, (anchor, positive) in enumerate(matched):
            keys = {reference_normal(b) for a, b in matched if reference_normal(a) == reference_normal(anchor)}
            keys |= {reference_normal(a) for a, b in matched if reference_normal(b) == reference_normal(anchor)}
            ranked = [pool[i] for i in order[anchors.index(anchor)]]
            kept, removed = reference_survivors(anchor, positive, ranked, keys)
            expected_removed = {guard: expected_removed[guard] + removed[guard] for guard in GUARDS}
            if len(kept) < 2:
                continue
            assert next(mined_by_example) == (anchor, positive, chosen(kept, 2, sampling, seed, number))
        assert next(mined_by_example, None) is None
        assert mined.removed == expected_removed
        totals = {guard: totals[guard] + mined.removed[guard] for guard in GUARDS}
    assert totals["anchor_itself"] and totals["labelled_positive"] and totals["duplicate_of_positive"]


def test_the_margin_guard_drops_candidates_too_close_to_the_positive(encoder):
    anchors = distinct_texts(7, 5)
    positives = distinct_texts(8, 5, anchors)
    corpus = distinct_texts(9, 40, anchors + positives)
    cosines, order = brute_force(encoder, anchors, corpus)
    positive_cosines = encoder.similarity(anchors, positives)
    gaps = positive_cosines[:, None] - cosines[np.arange(5)[:, None], order[:, :30]]
    margin = margin_between(gaps)
    mined = mine_hard_negatives(
        encoder, group(anchors, positives), corpus, rank_range=(1, 30), margin=margin, num_negatives=1
    )
    assert mined.removed["margin"] == int(np.sum(gaps < margin)) > 0
    assert mined.examples, "some example keeps a negative"
    for row, (anchor, positive, negatives) in enumerate(mined.examples):
        cosine = encoder.similarity([anchor], negatives)[0]
        assert cosine <= encoder.similarity([anchor], [positive])[0] - margin
        assert mined.negative_cosines[row, 0] == pytest.approx(cosine, abs=1e-5)
    assert mined.removed["anchor_itself"] == mined.removed["rescore"] == 0


def test_the_rescore_guard_drops_candidates_scored_within_the_margin_of_the_positive(encoder, scorer):
    anchors = distinct_texts(10, 4)
    positives = distinct_texts(11, 4, anchors)
    corpus = distinct_texts(12, 24, anchors + positives)
    _, order = brute_force(encoder, anchors, corpus)
    window = order[:, 2:20]
    scores = np.array(
        [scorer.similarity([a] * window.shape[1], [corpus[i] for i in row]) for a, row in zip(anchors, window)]
    )
    positive_scores = scorer.similarity(anchors, positives)
    gaps = positive_scores[:, None] - scores
    margin = margin_between(gaps)
    mined = mine_hard_negatives(
        encoder,
        group(anchors, positives),
        corpus,
        rank_range=(3, 20),
        num_negatives=2,
        rescorer=scorer,
        rescore_margin=margin,
    )
    assert mined.removed["rescore"] == int(np.sum(gaps <= margin)) > 0
    assert mined.examples, "some example keeps 2 negatives"
    for row, (anchor, positive, negatives) in enumerate(mined.examples):
        recomputed = scorer.similarity([anchor] * len(negatives), negatives)
        positive_score = scorer.similarity([anchor], [positive])[0]
        assert np.all(recomputed < positive_score - margin)
        np.testing.assert_allclose(mined.negative_scores[row], recomputed, atol=1e-5)
        assert mined.positive_scores[row] == pytest.approx(positive_score, abs=1e-5)
    interaction = mined.summary()["scores"]["interaction"]
    assert interaction["negatives"]["count"] == 2 * len(mined.examples)


def test_a_matcher_of_the_wrong_kind_is_refused(encoder, scorer):
    data = group(["甲乙丙"], ["丁戊己"])
    with pytest.raises(ConfigError, match="the encoder is an interaction model's PairScorer"):
        mine_hard_negatives(scorer, data, ["上中下"], rank_range=(1, 1))
    with pytest.raises(ConfigError, match="the rescorer is a feature model's SentenceEncoder"):
        mine_hard_negatives(encoder, data, ["上中下"], rank_range=(1, 1), rescorer=encoder)
    with pytest.raises(ConfigError, match="rescore_margin .* give a rescorer"):
        mine_hard_negatives(encoder, data, ["上中下"], rank_range=(1, 1), rescore_margin=0.1)


# -- choice and determinism ------------------------------------------------------------------------


def test_random_sampling_is_seeded_per_example_and_blocks_change_nothing(encoder, tmp_path):
    anchors = distinct_texts(13, 8)
    positives = distinct_texts(14, 8, anchors)
    corpus = distinct_texts(15, 50, anchors + positives)
    data = group(anchors, positives)
    settings = dict(rank_range=(2, 40), num_negatives=3, sampling="random")
    first = mine_hard_negatives(encoder, data, corpus, seed=7, **settings)
    again = mine_hard_negatives(encoder, data, corpus, seed=7, anchor_block=1, **settings)
    other = mine_hard_negatives(encoder, data, corpus, seed=8, **settings)
    paths = [mined.write(tmp_path / f"{name}.jsonl")[0] for mined, name in ((first, "first"), (again, "again"))]
    other_path = other.write(tmp_path / "other.jsonl")[0]
    with open(paths[0], "rb") as one, open(paths[1], "rb") as two, open(other_path, "rb") as three:
        first_bytes = one.read()
        assert first_bytes == two.read() and first_bytes != three.read()
    assert again.examples == first.examples
    for mined in (first, other):
        assert np.all(np.diff(mined.negative_ranks, axis=1) > 0)  # kept in rank order
        assert mined.negative_ranks.min() >= 2 and mined.negative_ranks.max() <= 40
    top = mine_hard_negatives(encoder, data, corpus, rank_range=(2, 40), num_negatives=3)
    np.testing.assert_array_equal(top.negative_ranks, np.tile([2, 3, 4], (8, 1)))


def test_examples_short_of_negatives_are_left_out_and_counted(encoder):
    anchors = ["甲乙丙", "甲乙丙", "丁戊己"]
    positives = ["上中下", "大人小", "国和地"]
    # Corpus: the anchors' own matches and one other text, so few candidates survive.
    corpus = ["上中下", "大人小", "国和地", "甲乙丙", "人这中"]
    mined = mine_hard_negatives(encoder, group(anchors, positives), corpus, rank_range=(1, 5), num_negatives=2)
    # 甲乙丙: 上中下 and 大人小 are its matches, itself is dropped: only 国和地 and 人这中 stay, 2 of them.
    # 丁戊己: its positive 国和地 is dropped: 上中下, 大人小, 甲乙丙, 人这中 stay.
    assert [example[:2] for example in mined.examples] == list(zip(anchors, positives))
    assert set(mined.examples[0][2]) == {"国和地", "人这中"}
    short = mine_hard_negatives(encoder, group(anchors, positives), corpus, rank_range=(1, 5), num_negatives=3)
    assert [example[0] for example in short.examples] == ["丁戊己"]
    assert short.counts["examples_short"] == 2 and short.counts["anchors_short"] == 1
    assert short.removed["labelled_positive"] == 2 and short.removed["duplicate_of_positive"] == 3
    assert short.removed["anchor_itself"] == 2


# -- bad input -------------------------------------------------------------------------------------


def test_anchors_without_a_positive_pair_are_skipped_and_counted(encoder):
    pairs = PairData(
        ["甲乙丙", "甲乙丙", "丁戊己", "上中下", "大人小"],
        ["国和地", "人这中", "我你他", "她们是", "不了在"],
        np.array([1, 0, 0, 0, 1], np.float32),
        "pairs.tsv",
    )
    mined = mine_hard_negatives(encoder, pairs, rank_range=(1, 5), num_negatives=1)
    assert mined.counts["anchors_without_positive"] == 2 and mined.counts["examples_read"] == 2
    assert [example[:2] for example in mined.examples] == [("甲乙丙", "国和地"), ("大人小", "不了在")]
    assert "2 of 5 pairs are labelled as matches" in " ".join(mined.notes)
    # Graded scores: a match above the middle of their range, 2.5 for STS-B's 0-5.
    graded = PairData(["甲乙丙"] * 4, ["国和地", "人这中", "我你他", "她们是"], np.array([5, 0, 3, 2.5], np.float32))
    assert mine_hard_negatives(encoder, graded, rank_range=(1, 2), num_negatives=1).counts["examples_read"] == 2
    with pytest.raises(DataError, match=r"none.tsv: no pair is labelled as a match \(label above 0.5\)"):
        mine_hard_negatives(encoder, PairData(["甲"], ["乙"], np.zeros(1, np.float32), "none.tsv"))


def test_a_corpus_smaller_than_the_window_is_refused_or_cuts_it(encoder):
    data = group(["甲乙丙"], ["丁戊己"])
    corpus = distinct_texts(16, 5, ["甲乙丙", "丁戊己"])
    with pytest.raises(ConfigError, match="the corpus has 5 texts, fewer than the rank window's start 10"):
        mine_hard_negatives(encoder, data, corpus)
    mined = mine_hard_negatives(encoder, data, corpus, rank_range=(2, 50), num_negatives=4)
    assert mined.settings["rank_window"] == [2, 5] and mined.settings["rank_range"] == [2, 50]
    assert any("fewer than the rank window's end 50: candidates are ranks 2-5" in note for note in mined.notes)
    np.testing.assert_array_equal(mined.negative_ranks, [[2, 3, 4, 5]])
    assert rank_window((3, 3), 3) == (3, 3, None)
    for window in [(0, 5), (6, 5)]:
        with pytest.raises(ConfigError, match="ranks start at 1"):
            rank_window(window, 100)
    with pytest.raises(ConfigError, match="the ranks must be whole numbers"):
        rank_window((1.5, 3), 100)


def test_empty_and_repeated_corpus_texts_are_never_negatives(encoder):
    data = group(["甲乙丙", "丁戊己"], ["上中下", "大人小"])
    corpus = ["国和地", "", "人这中", "  ", "国和地", "我你他", "她们是"]
    mined = mine_hard_negatives(encoder, data, corpus, rank_range=(1, 7), num_negatives=4)
    for _, _, negatives in mined.examples:
        assert sorted(negatives) == sorted(["国和地", "人这中", "我你他", "她们是"])
    assert mined.counts["candidates_empty"] == 4 and mined.counts["candidates_repeated"] == 2
    with pytest.raises(TypeError, match=r"corpus\[1\] is a int"):
        mine_hard_negatives(encoder, data, ["国和地", 3], rank_range=(1, 1))


# -- outputs ---------------------------------------------------------------------------------------


@pytest.fixture
def mined(encoder):
    anchors = ["甲乙丙", "丁戊己", "上中下"]
    positives = ['大人, "小"', "国和地", "人这中"]
    corpus = ["我你他", "她们是", "不了在", "有人这", '大人, "小"', "为上个"]
    return mine_hard_negatives(encoder, group(anchors, positives), corpus, rank_range=(1, 6), num_negatives=2)


def test_tuples_read_back_as_the_same_examples_with_the_summary_beside(mined, tmp_path):
    output, json_path, png_path = mined.write(tmp_path / "mined.jsonl")
    assert (
        (json_path, png_path)
        == summary_paths(output)
        == (
            str(tmp_path / "mined.summary.json"),
            str(tmp_path / "mined.scores.png"),
        )
    )
    data = read_group_file(output)
    assert list(zip(data.anchors, data.positives, data.negatives)) == mined.examples
    assert data.group_size() == 4
    data.check_in_batch()
    as_groups = mined.as_group_data()
    assert list(zip(as_groups.anchors, as_groups.positives, as_groups.negatives)) == mined.examples
    with open(png_path, "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(json_path, encoding="utf-8") as file:
        summary = json.load(file)
    assert summary["format"] == SUMMARY_FORMAT and set(summary["removed"]) == set(GUARDS)
    assert summary["counts"]["examples_mined"] == len(mined.examples) == 3
    negatives = np.ravel(mined.negative_cosines)
    statistics = summary["scores"]["cosine"]["negatives"]
    assert statistics["count"] == 6 and statistics["p25"] == pytest.approx(np.percentile(negatives, 25))
    assert statistics["mean"] == pytest.approx(negatives.mean()) and statistics["max"] == pytest.approx(negatives.max())
    assert "interaction" not in summary["scores"]
    table = mined.summary_table()
    assert "mined 3 of 3 examples" in table and f"{statistics['median']:.4f}" in table


def test_score_statistics_are_numpys():
    values = np.array([0.3, -0.1, 0.9, 0.5, 0.2])
    statistics = score_statistics(values)
    assert statistics["count"] == 5 and statistics["min"] == -0.1 and statistics["max"] == 0.9
    assert statistics["p5"] == pytest.approx(-0.1 + 0.2 * 0.3)  # between the lowest two, a fifth of the way
    assert statistics["median"] == 0.3
    assert score_statistics([]) == {
        "count": 0,
        **dict.fromkeys(["mean", "min", "p5", "p25", "median", "p75", "p95", "max"]),
    }


@pytest.mark.parametrize("name", ["pairs.tsv", "pairs.csv", "pairs.jsonl"])
def test_pairs_read_back_as_labelled_pairs(mined, tmp_path, name):
    output = mined.write(tmp_path / name, "pairs")[0]
    pairs = read_pair_file(output, strict=True)  # strict: no repeated pair, no empty text
    expected = [
        (anchor, text, label)
        for anchor, positive, negatives in mined.examples
        for text, label in [(positive, 1.0), *((negative, 0.0) for negative in negatives)]
    ]
    assert list(zip(pairs.texts_a, pairs.texts_b, pairs.labels.tolist())) == expected


def test_a_tab_in_a_text_cannot_go_to_tsv_and_nothing_is_written(encoder, tmp_path):
    data = group(["甲乙\t丙"], ["丁戊己"])
    mined = mine_hard_negatives(encoder, data, ["我你他", "她们是"], rank_range=(1, 2), num_negatives=1)
    with pytest.raises(ConfigError, match=r"example 1 \(anchor '甲乙\\t丙'\) .* holds a tab or line break"):
        mined.write(tmp_path / "pairs.tsv", "pairs")
    with pytest.raises(ConfigError, match="tuples are written as JSON lines"):
        mined.write(tmp_path / "tuples.tsv")
    assert os.listdir(tmp_path) == []
    mined.write(tmp_path / "pairs.jsonl", "pairs")
    assert read_pair_file(tmp_path / "pairs.jsonl").texts_a[0] == "甲乙\t丙"


def test_an_existing_output_is_refused_and_nothing_else_is_written(mined, tmp_path):
    (tmp_path / "mined.jsonl").write_text("mine\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mined.jsonl: exists; nothing was written"):
        mined.write(tmp_path / "mined.jsonl")
    assert sorted(os.listdir(tmp_path)) == ["mined.jsonl"]
    assert (tmp_path / "mined.jsonl").read_text(encoding="utf-8") == "mine\n"
    (tmp_path / "other.summary.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match="other.summary.json: exists"):
        mined.write(tmp_path / "other.jsonl")
    assert not (tmp_path / "other.jsonl").exists() and not (tmp_path / "other.scores.png").exists()
    mined.write(tmp_path / "mined.jsonl", overwrite=True)
    assert len(read_group_file(tmp_path / "mined.jsonl")) == 3


def test_nothing_is_written_when_no_example_got_its_negatives(encoder, tmp_path):
    mined = mine_hard_negatives(encoder, group(["甲乙丙"], ["丁戊己"]), ["丁戊己"], rank_range=(1, 1), num_negatives=1)
    assert mined.counts["examples_short"] == 1 and not mined.examples
    with pytest.raises(ConfigError, match="no example got 1 negative"):
        mined.write(tmp_path / "mined.jsonl")
    assert os.listdir(tmp_path) == []
