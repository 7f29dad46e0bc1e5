import os
import random
import unicodedata

import pytest
from bert4keras.tokenizers import Tokenizer
from bert4keras.tokenizers import load_vocab as b4k_load_vocab

from cosent_tf import DataError, SentenceTokenizer, read_senteval
from cosent_tf.models.tokenization import load_vocab
from cosent_tf.models.wordpiece import WordPieceTokenizer
from tests.helpers import SHARED_DATA, SHARED_VOCAB, made_vocab, requires_shared_data, write_vocab


@requires_shared_data
def test_character_level_equals_bert4keras_on_real_sentences():
    reference = Tokenizer(b4k_load_vocab(SHARED_VOCAB), do_lower_case=True)
    tokenizer = SentenceTokenizer(SHARED_VOCAB, maxlen=64)
    data = read_senteval(os.path.join(SHARED_DATA, "senteval_cn", "STS-B", "STS-B.test.data"))
    for text in data.texts_a[:300] + ["ＱＱ号码是123，Hello World！…①"]:
        assert tokenizer.encode(text) == reference.encode(text, maxlen=64)[0]


def every_character_in_texts(length=48):
    """Every assigned character (surrogates and private use aside) of Unicode, in texts of ``length``
    characters, shuffled so that each text mixes scripts, spaces, controls and combining marks."""
    characters = [
        chr(code)
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF and unicodedata.category(chr(code)) not in ("Cn", "Co")
    ]
    random.Random(5).shuffle(characters)
    return ["".join(characters[start : start + length]) for start in range(0, len(characters), length)]


@pytest.mark.heavy
@requires_shared_data
def test_the_framework_free_tokenizer_gives_bert4keras_tokens_and_ids():
    """cosent_tf.models.wordpiece is bert4keras's tokenisation without its TensorFlow import: the same
    tokens on every character of Unicode, with and without lower-casing; the same ids on words of the
    vocabulary's pieces (greedy longest match, ##-pieces, [UNK]), alone and in pairs cut to maxlen."""
    token_dict = b4k_load_vocab(SHARED_VOCAB)
    rng = random.Random(7)
    pieces = [token.removeprefix("##") for token in token_dict if not token.startswith("[")]
    words = [" ".join("".join(rng.choices(pieces, k=rng.randint(1, 4))) for _ in range(8)) for _ in range(200)]
    special = ["ΣΟΦΟΣ ΟΔΟΣ", "Café au LAIT", "ＱＱ号码是123，Hello World！…①", "", " \t\u3000 ", "x" * 201 + " 好"]
    characters = every_character_in_texts()
    texts = words + special + characters[:100]
    for do_lower_case in (True, False):
        reference = Tokenizer(token_dict, do_lower_case=do_lower_case)
        ours = WordPieceTokenizer(token_dict, do_lower_case)
        assert [ours.tokenize(text) for text in characters] == [reference.tokenize(text) for text in characters]
        for text in texts:
            assert ours.encode(text, maxlen=20) == reference.encode(text, maxlen=20), text
        for first, second in zip(texts[::2], texts[1::2]):
            for maxlen in (None, 5, 24):
                assert ours.encode(first, second, maxlen=maxlen) == reference.encode(first, second, maxlen=maxlen)


def test_word_level_tokens_are_bert4keras_tokens_with_jieba(tmp_path):
    import jieba

    words = ["飞机", "起飞", "要", "一", "架", "了", "飞", "机", "abc", "##d"]
    token_dict = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}

    def cut(text):
        return jieba.cut(text, HMM=False)

    reference = Tokenizer(token_dict, do_lower_case=True, pre_tokenize=cut)
    ours = WordPieceTokenizer(token_dict, True, pre_tokenize=cut)
    for text in ["一架飞机要起飞了", "ABCD 飞机！", "飞 机起 飞", "Ｃafé一架"]:
        assert ours.tokenize(text) == reference.tokenize(text)
        assert ours.encode(text, "飞机起飞了", maxlen=6) == reference.encode(text, "飞机起飞了", maxlen=6)


def test_truncation_and_pairs():
    tokenizer = SentenceTokenizer(made_vocab(), maxlen=6)
    ids = tokenizer.encode("一二三四五六七八")
    assert len(ids) == 6 and ids[0] == 101 and ids[-1] == 102
    pair = SentenceTokenizer(made_vocab(), maxlen=9).encode_pair("你好", "一二三四五六七")
    # [CLS] 你 好 [SEP] + the longer side truncated first: 一 二 三 四 [SEP]
    assert len(pair) == 9 and pair.count(102) == 2 and pair[1:3] == tokenizer.encode("你好")[1:3]


def test_word_level_uses_jieba_words(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "飞机", "起飞", "要", "一", "架", "了", "飞", "机"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    words = SentenceTokenizer(path, word_level=True).tokenize("一架飞机要起飞了")
    chars = SentenceTokenizer(path, word_level=False).tokenize("一架飞机要起飞了")
    assert "飞机" in words and "起飞" in words
    assert "飞机" not in chars and chars.count("飞") == 2


def test_vocab_errors(tmp_path):
    with pytest.raises(DataError, match="absent.txt: cannot read the vocabulary"):
        load_vocab(tmp_path / "absent.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(DataError, match="bad.txt, line 2: not valid UTF-8"):
        load_vocab(bad)
    repeated = tmp_path / "repeated.txt"
    repeated.write_text("[PAD]\n[UNK]\n好\n[CLS]\n好\n", encoding="utf-8")
    with pytest.raises(DataError, match="repeated.txt, line 5: token '好' repeats line 3"):
        load_vocab(repeated)


def test_truncation_is_counted_and_reported(caplog):
    import logging

    tokenizer = SentenceTokenizer(made_vocab(), maxlen=6)
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        ids = tokenizer.encode_all(["今天天气很好啊", "好", "我们"], what="queries")
    assert [len(x) for x in ids] == [6, 3, 4] and list(ids[0]) == tokenizer.encode("今天天气很好啊")
    report = tokenizer.last_truncation
    assert (report.total, report.truncated, report.longest, report.maxlen) == (3, 1, 9, 6)
    assert "queries: 1 of 3 (33.3%) longer than maxlen 6 tokens were cut; the longest had 9" in caplog.text
    pairs = tokenizer.encode_pairs(["今天", "好"], ["天气很好", "坏"])
    assert [list(p) for p in pairs] == [tokenizer.encode_pair("今天", "天气很好"), tokenizer.encode_pair("好", "坏")]
    assert (tokenizer.last_truncation.truncated, tokenizer.last_truncation.longest) == (1, 9)


def test_a_split_with_nothing_cut_reports_it_only_at_debug_level(caplog):
    import logging

    tokenizer = SentenceTokenizer(made_vocab(), maxlen=6)
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        tokenizer.encode_all(["好", "我们"], what="valid, first texts")
        tokenizer.encode_pairs(["好"], ["坏"], what="valid, pairs")
    assert "valid" not in caplog.text  # no "0 of 2 (0.0%) ... were cut" line
    assert (tokenizer.last_truncation.total, tokenizer.last_truncation.truncated) == (1, 0)
    with caplog.at_level(logging.DEBUG, logger="cosent_tf"):
        tokenizer.encode_all(["好", "我们"], what="valid, first texts")
    assert "valid, first texts: 0 of 2 (0.0%) longer than maxlen 6 tokens were cut" in caplog.text


def test_unknown_tokens_are_counted_and_reported_a_warning_when_many(tmp_path, caplog):
    import logging

    # the first 300 tokens: ASCII, full-width punctuation and the CJK ideographs from 一 (U+4E00) to U+4EC4
    vocab = write_vocab(tmp_path / "vocab.txt", size=300)
    tokenizer = SentenceTokenizer(vocab, maxlen=6)
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        ids = tokenizer.encode_all(["一七", "花呗如何还钱", "a b"], what="valid, first texts")
    unknown = tokenizer.token_dict["[UNK]"]
    # brute force: the [UNK]s among the uncut ids' tokens, [CLS] and [SEP] left out
    uncut = [tokenizer._tokenizer.encode(text)[0][1:-1] for text in ["一七", "花呗如何还钱", "a b"]]
    assert sum(row.count(unknown) for row in uncut) == 6 and sum(map(len, uncut)) == 10
    assert list(ids[1][1:-1]) == [unknown] * 4  # cut to maxlen, as before
    report = tokenizer.last_unknown
    assert (report.total, report.with_unknown, report.tokens, report.unknown) == (3, 1, 10, 6)
    [record] = [r for r in caplog.records if "[UNK]" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "valid, first texts: 1 of 3 (33.3%) had text the vocabulary lacks: 6 of 10 tokens (60.0%) became [UNK]; "
        f"over 5% is more than a vocabulary of the data's language leaves: is {vocab} the vocabulary of a model "
        "for this language?"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        tokenizer.encode_pairs(["一七丁七丁七丁七丁七丁七丁七丁七丁七丁七"], ["花"], what="pairs")
    [record] = [r for r in caplog.records if "[UNK]" in r.getMessage()]
    assert record.levelno == logging.INFO  # 1 of 21 tokens: under the warning's share
    assert (
        record.getMessage()
        == "pairs: 1 of 1 (100.0%) had text the vocabulary lacks: 1 of 21 tokens (4.8%) became [UNK]"
    )


def test_no_unknown_tokens_and_the_packages_own_texts_are_said_at_debug_level_only(caplog):
    import logging

    tokenizer = SentenceTokenizer(made_vocab(), maxlen=6)
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        tokenizer.encode_all(["好", "我们"], what="valid, first texts")
        tokenizer.encode_all(["今天天气很好啊", "☃"], what="probe texts", report=False)
    assert caplog.text == ""  # nothing unknown in the first; the second is not the user's data
    assert (tokenizer.last_unknown.unknown, tokenizer.last_truncation.truncated) == (1, 1)
