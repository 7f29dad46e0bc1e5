"""bert4keras's character-level tokenisation as TensorFlow ops, for models served from a SavedModel.

The bert4keras ``Tokenizer`` (``do_lower_case=True``) turns a text into tokens in three steps:

1. lower-case, NFD-decompose and drop combining marks (category ``Mn``);
2. put spaces around punctuation and CJK characters, turn white space into spaces and
   drop control characters (and U+0000, U+FFFD); split on white space;
3. greedy longest-match WordPiece on each word (a word of more than 200 characters,
   or one with no match, becomes ``[UNK]``).

Steps 1 and 2 act on one character at a time, so apart from CJK ideographs (padded by
one regular expression) they are a table from each character to what it becomes,
computed here with Python's own ``unicodedata`` and the rules of
:mod:`cosent_tf.models.wordpiece`, the Python tokenizer's: the graph
reproduces Python's decisions rather than re-deriving them from another Unicode
library. Step 3 is tensorflow-text's ``WordpieceTokenizer``, whose greedy search is
bert4keras's. tensorflow-text's own ``BertTokenizer`` is not used: its lower-casing
applies NFKC case folding, which rewrites full-width punctuation (``，`` → ``,``).

Known differences, all outside the shared data: Python lower-cases a word-final Greek
capital sigma to ``ς`` (this table always gives ``σ``); NFD's canonical re-ordering of
adjacent combining marks is not applied (only marks that are not ``Mn`` survive step 1,
so this matters for a few spacing marks only); invalid UTF-8 bytes become U+FFFD and
are dropped (a Python caller cannot pass them at all).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..environment import keras3_process
from ..errors import ConfigError
from ..models.wordpiece import CJK_RANGES, MAX_WORD_CHARS, is_cjk, is_punctuation, normalised

# The Keras 3 route's SavedModel export tokenises with this module too, in a process where the Keras 2
# engine (cosent_tf.backend, which holds TensorFlow's start-up lines back) may not be imported.
if keras3_process():
    import tensorflow as tf
else:
    from ..backend import tf

_CJK_PATTERN = "[" + "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in CJK_RANGES) + "]"


def _spaced(ch: str) -> str:
    """What bert4keras's splitting step makes of one (already normalised) character."""
    if is_punctuation(ch) or is_cjk(ord(ch)):
        return f" {ch} "
    if ch in " \n\r\t" or unicodedata.category(ch) == "Zs" or ch.isspace():
        return " "  # str.split() also splits at the other white space (U+2028, U+2029)
    if ord(ch) in (0, 0xFFFD) or unicodedata.category(ch) in ("Cc", "Cf"):
        return ""
    return ch


@functools.lru_cache(maxsize=2)
def character_table(do_lower_case: bool = True) -> dict[str, str]:
    """{character: replacement} for every character that steps 1-2 change, CJK aside.

    CJK ideographs that only get padded are left out (the graph pads them with one
    regular expression); everything else that changes is listed.

    Args:
        do_lower_case: whether step 1 (lower-case and strip accents) applies.

    Returns:
        The table, computed once per setting.

    Example:
        >>> character_table()["A"], character_table()["，"]
        ('a', ' ， ')
    """
    table = {}
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue  # surrogates never occur in valid UTF-8
        ch = chr(code)
        if unicodedata.category(ch) in ("Cn", "Co"):
            continue  # unassigned and private-use characters: steps 1-2 leave them as they are
        replacement = "".join(_spaced(c) for c in normalised(ch, do_lower_case))
        unchanged = f" {ch} " if is_cjk(code) else ch
        if replacement != unchanged:
            table[ch] = replacement
    return table


def import_tensorflow_text() -> Any:
    """The ``tensorflow_text`` module, imported on first need: it registers ops at import and only
    in-graph tokenisation (export) needs it, so training never imports it.

    Raises:
        ConfigError: it is not installed; the message names the version to install.
    """
    try:
        import tensorflow_text
    except ImportError as e:
        raise ConfigError(
            "in-graph tokenisation (export) needs tensorflow-text: "
            f"pip install tensorflow-text=={tf.__version__.rsplit('.', 1)[0]}.*"
        ) from e
    return tensorflow_text


class GraphTokenizer(tf.Module):
    """Raw UTF-8 strings to bert4keras token ids, inside a TensorFlow graph.

    ``encode`` gives ``[CLS] text [SEP]`` and ``encode_pairs`` gives
    ``[CLS] a [SEP] b [SEP]``. Both are truncated to ``maxlen`` exactly as
    ``SentenceTokenizer`` does, and padded with 0 to the longest row, as int32.

    Args:
        token_dict: the vocabulary, token -> id (``SentenceTokenizer.token_dict``).
        maxlen: the longest token sequence, [CLS] and [SEP] included.
        do_lower_case: lower-case and strip accents first, as the model's tokenizer does.
        name: the ``tf.Module``'s name.

    Example:
        >>> tokenizer = GraphTokenizer(SentenceTokenizer("vocab.txt").token_dict, maxlen=64)
        >>> token_ids, truncated = tokenizer.encode_and_flag(tf.constant(["花呗如何还钱"]))
    """

    def __init__(
        self, token_dict: Mapping[str, int], maxlen: int, do_lower_case: bool = True, name: str = "graph_tokenizer"
    ) -> None:
        super().__init__(name=name)
        self.maxlen = int(maxlen)
        self.cls_id, self.sep_id = token_dict["[CLS]"], token_dict["[SEP]"]
        table = character_table(bool(do_lower_case))
        self._characters = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(table.keys())), tf.constant(list(table.values()))),
            default_value="\x00",
        )  # NUL is always in the table (it maps to ""), so never a value
        tokens = list(token_dict)
        self._vocab = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(tokens), tf.constant([token_dict[t] for t in tokens], dtype=tf.int64)
            ),
            default_value=token_dict.get("[UNK]", 0),
        )
        self._wordpiece = import_tensorflow_text().WordpieceTokenizer(
            self._vocab,
            suffix_indicator="##",
            max_bytes_per_word=4 * MAX_WORD_CHARS + 4,
            token_out_type=tf.int64,
            unknown_token="[UNK]",
        )

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Token ids of each text, without [CLS]/[SEP] or truncation: ragged int64 (batch, None)."""
        characters = tf.strings.unicode_split(texts, "UTF-8", errors="replace", replacement_char=0xFFFD)
        # over flat_values: tf.where on ragged operands traces a slow broadcast check at every call
        replaced = self._characters.lookup(characters.flat_values)
        characters = characters.with_flat_values(tf.where(tf.equal(replaced, "\x00"), characters.flat_values, replaced))
        spaced = tf.strings.regex_replace(tf.strings.reduce_join(characters, axis=-1), _CJK_PATTERN, " \\0 ")
        words = tf.strings.split(spaced)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > MAX_WORD_CHARS
        words = words.with_flat_values(tf.where(too_long, "[UNK]", words.flat_values))
        return self._wordpiece.tokenize(words).merge_dims(-2, -1)

    def encode(self, texts: tf.Tensor) -> tf.Tensor:
        """Token ids of ``[CLS] text [SEP]``, truncated to maxlen: int32 (batch, longest)."""
        return self.encode_and_flag(texts)[0]

    def encode_pairs(self, firsts: tf.Tensor, seconds: tf.Tensor) -> tf.Tensor:
        """Token ids of ``[CLS] a [SEP] b [SEP]``, truncated to maxlen: int32 (batch, longest)."""
        return self.encode_pairs_and_flag(firsts, seconds)[0]

    def encode_and_flag(self, texts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(token ids, whether each text was longer than maxlen and cut)."""
        tokens = self.tokenize(texts)
        return self._assemble([tokens[:, : self.maxlen - 2]]), tokens.row_lengths() > self.maxlen - 2

    def encode_pairs_and_flag(self, firsts: tf.Tensor, seconds: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(token ids of each concatenated pair, whether the pair was longer than maxlen and cut)."""
        first, second = self.tokenize(firsts), self.tokenize(seconds)
        first_length, second_length = first.row_lengths(), second.row_lengths()
        cut = first_length + second_length > self.maxlen - 3
        # bert4keras pops from the longer side (the first on ties) until both fit; closed form:
        budget = tf.cast(self.maxlen - 3, tf.int64)
        first_keep = tf.minimum(first_length, tf.maximum(budget - second_length, budget // 2))
        second_keep = tf.minimum(second_length, tf.maximum(budget - first_length, budget - budget // 2))
        return self._assemble([_head(first, first_keep), _head(second, second_keep)]), cut

    def _assemble(self, parts: list[tf.RaggedTensor]) -> tf.Tensor:
        rows = parts[0].nrows()
        cls = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], tf.cast(self.cls_id, tf.int64)))
        sep = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], tf.cast(self.sep_id, tf.int64)))
        pieces = [cls]
        for part in parts:
            pieces += [part, sep]
        return tf.cast(tf.concat(pieces, axis=1).to_tensor(default_value=0), tf.int32)


def _head(ragged: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The first ``keep[i]`` items of each row."""
    positions = tf.ragged.range(ragged.row_lengths())
    return tf.ragged.boolean_mask(ragged, positions < tf.expand_dims(keep, 1))
