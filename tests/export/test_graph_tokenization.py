import functools
import os

import numpy as np
import pytest

from cosent_tf import SentenceTokenizer, load_task
from cosent_tf.backend import tf
from cosent_tf.export.graph_tokenization import GraphTokenizer, character_table
from tests.helpers import ROOT, SHARED_DATA, SHARED_VOCAB, requires_shared_data

pytestmark = requires_shared_data

# Mixed scripts, full-width forms, accents, digits, control and zero-width characters,
# white space of several kinds, a word too long for WordPiece, and empty input.
EDGE_CASES = [
    "ＱＱ号码，多少？（急）…①②",
    "iPhone6s Plus 32G，¥5888元",
    "Héllo WÖRLD naïve Ｃａｆé",
    "ß İstanbul ﬁle",
    "a\u2028b\u2029c\x00d\ufffde\u200bf\u3000g\tend\r\n",
    "",
    "   ",
    "x" * 201,
    "y" * 200,
    "豈更車賈滑",
    "한국어 텍스트",
    "𠀋𠀍 emoji 😀 text",
    "##",
    "[CLS] [UNK] [SEP]",
    "3.14159,1e-5%",
    "ＡＢＣａｂｃ１２３",
]


def sentence_tokenizer(maxlen):
    return SentenceTokenizer(SHARED_VOCAB, maxlen)


def graph_tokenizer(maxlen):
    return GraphTokenizer(sentence_tokenizer(maxlen).token_dict, maxlen)


def rows(matrix):
    return [[int(i) for i in row if i != 0] for row in matrix]


@functools.lru_cache(maxsize=1)
def _shared_test_pairs():
    folder = os.path.join(SHARED_DATA, "senteval_cn")
    return tuple(load_task(folder, task, "test") for task in ("STS-B", "LCQMC"))


def shared_test_sentences():
    """Every STS-B and LCQMC test sentence (read once per session), and the two tasks' pairs."""
    pairs = list(_shared_test_pairs())
    return [t for p in pairs for t in p.texts_a + p.texts_b], pairs


@pytest.mark.parametrize("maxlen", [64, 8])
def test_graph_ids_equal_bert4keras_on_every_shared_test_sentence(maxlen):
    sentences, _ = shared_test_sentences()
    sentences += EDGE_CASES
    reference = sentence_tokenizer(maxlen)
    expected = [reference.encode(s) for s in sentences]
    got = rows(graph_tokenizer(maxlen).encode(tf.constant(sentences)).numpy())
    differing = [(s, e, g) for s, e, g in zip(sentences, expected, got) if e != g]
    assert not differing, differing[:5]
    assert len(sentences) - len(EDGE_CASES) == 27_722  # the count the README states


@pytest.mark.parametrize("maxlen", [64, 12, 5])
def test_graph_pairs_truncate_like_bert4keras(maxlen):
    _, pairs = shared_test_sentences()
    firsts = [t for p in pairs for t in p.texts_a] + EDGE_CASES
    seconds = [t for p in pairs for t in p.texts_b] + EDGE_CASES[::-1]
    reference = sentence_tokenizer(maxlen)
    expected = [reference.encode_pair(a, b) for a, b in zip(firsts, seconds)]
    got = rows(graph_tokenizer(maxlen).encode_pairs(tf.constant(firsts), tf.constant(seconds)).numpy())
    differing = [(a, b, e, g) for a, b, e, g in zip(firsts, seconds, expected, got) if e != g]
    assert not differing, differing[:5]
    assert max(len(e) for e in expected) == maxlen


def test_word_final_capital_sigma_is_the_one_known_difference():
    # Python lower-cases a word-final Σ to ς (context-dependent); the graph's table gives σ.
    reference, graph = sentence_tokenizer(16), graph_tokenizer(16)
    token_ids = rows(graph.encode(tf.constant(["ΑΣ", "ΣΑ"])).numpy())
    assert token_ids[1] == reference.encode("ΣΑ")
    assert token_ids[0] != reference.encode("ΑΣ")
    assert reference.tokenize("ΑΣ")[1:-1] == ["α", "##ς"] and character_table()["Σ"] == "σ"


def test_without_lower_case_only_spacing_and_dropping_remain():
    table = character_table(do_lower_case=False)
    assert "A" not in table and table["，"] == " ， " and table["\x00"] == "" and table["\t"] == " "
    token_dict = sentence_tokenizer(16).token_dict
    graph = GraphTokenizer(token_dict, 16, do_lower_case=False)
    reference = SentenceTokenizer(SHARED_VOCAB, 16, do_lower_case=False)
    texts = ["Héllo WORLD，好", "abc"]
    assert rows(graph.encode(tf.constant(texts)).numpy()) == [reference.encode(t) for t in texts]


def test_encode_pads_with_zeros_to_the_longest_row():
    token_ids = graph_tokenizer(16).encode(tf.constant(["好", "今天天气"])).numpy()
    assert token_ids.dtype == np.int32 and token_ids.shape == (2, 6)
    assert list(token_ids[0, 3:]) == [0, 0, 0]


def test_the_readme_states_the_sentence_count_this_module_checks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    count = len(shared_test_sentences()[0])
    assert f"checks equal token ids on all {count:,} STS-B and LCQMC test sentences" in readme.replace("\n", " ")
