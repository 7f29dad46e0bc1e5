"""bert4keras's WordPiece tokenisation in plain Python, importing no framework: the tokenizer every
model of this project was trained with (``bert4keras.tokenizers.Tokenizer``), which cannot be
imported without TensorFlow (bert4keras's helpers import its Keras backend). An ONNX export is
served with this module and ONNX Runtime alone; the Keras engines tokenise with it too, so there
is one tokenisation.

A text becomes tokens in three steps:

1. with lower-casing, the whole text is lower-cased, NFD-decomposed and stripped of combining
   marks (category ``Mn``);
2. each character is spaced (:func:`spaced`): punctuation and CJK characters are set apart, white
   space becomes a space, control characters (and U+0000, U+FFFD) are dropped; the result is split
   on white space;
3. each word is cut by greedy longest-match WordPiece (``##`` marks a piece inside a word); a word
   of more than :data:`MAX_WORD_CHARS` characters, or one whose start matches no token, stays whole
   (and is ``[UNK]``).

With a pre-tokenizer (jieba, for word vocabularies), step 1 runs first, then each of its words
that is in the vocabulary is a token and each other word goes through all three steps.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from typing import Callable, Optional

from ..errors import ConfigError

CLS, SEP, UNK = "[CLS]", "[SEP]", "[UNK]"
MAX_WORD_CHARS = 200  # bert4keras Tokenizer(word_maxlen=200)
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# What bert4keras counts as white space besides the Unicode category Zs.
_SPACES = " \n\r\t"


def is_cjk(code: int) -> bool:
    """Whether the code point ``code`` is a CJK ideograph of :data:`CJK_RANGES`."""
    return any(low <= code <= high for low, high in CJK_RANGES)


def is_punctuation(ch: str) -> bool:
    """Whether ``ch`` is punctuation: an ASCII symbol, or of a Unicode category P*."""
    code = ord(ch)
    return (
        33 <= code <= 47
        or 58 <= code <= 64
        or 91 <= code <= 96
        or 123 <= code <= 126
        or unicodedata.category(ch).startswith("P")
    )


def spaced(ch: str) -> str:
    """What step 2 makes of one (already normalised) character.

    Example:
        >>> spaced("，"), spaced("\\t"), spaced("\\u200b"), spaced("a")
        (' ， ', ' ', '', 'a')
    """
    if is_punctuation(ch) or is_cjk(ord(ch)):
        return f" {ch} "
    if ch in _SPACES or unicodedata.category(ch) == "Zs":
        return " "
    if ord(ch) in (0, 0xFFFD) or unicodedata.category(ch) in ("Cc", "Cf"):
        return ""
    return ch


def normalised(text: str, do_lower_case: bool) -> str:
    """Step 1: ``text`` lower-cased, NFD-decomposed and stripped of combining marks (unchanged
    without ``do_lower_case``).

    Example:
        >>> normalised("Café", True)
        'cafe'
    """
    if not do_lower_case:
        return text
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")


def cut_to(maxlen: int, *sequences: list) -> None:
    """Cut ``sequences`` (each ``[CLS] ... [SEP]``) in place until their lengths add up to at most
    ``maxlen``: one token at a time from the longest (the first of the longest on a tie), the one
    before its last."""
    while sum(len(sequence) for sequence in sequences) > maxlen:
        longest = max(sequences, key=len)  # max keeps the first of equals
        longest.pop(-2)


class WordPieceTokenizer:
    """Texts to WordPiece tokens and ids, as bert4keras's ``Tokenizer(token_dict, do_lower_case,
    pre_tokenize=...)`` gives them.

    Args:
        token_dict: the vocabulary, token -> id.
        do_lower_case: lower-case and strip accents first.
        pre_tokenize: a function that cuts a (normalised) text into words first (jieba), or None.

    Example:
        >>> tokenizer = WordPieceTokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "你": 3, "好": 4}, True)
        >>> tokenizer.encode("你好！")
        ([0, 3, 4, 2, 1], [0, 0, 0, 0, 0])
    """

    def __init__(
        self,
        token_dict: Mapping[str, int],
        do_lower_case: bool,
        pre_tokenize: Optional[Callable[[str], Iterable[str]]] = None,
    ) -> None:
        self.token_dict = token_dict
        self.do_lower_case = do_lower_case
        self.pre_tokenize = pre_tokenize
        self.unk_id = token_dict.get(UNK)

    def _words(self, text: str, pre_tokenize: bool = True) -> list[str]:
        text = normalised(text, self.do_lower_case)
        if pre_tokenize and self.pre_tokenize is not None:
            tokens: list[str] = []
            for word in self.pre_tokenize(text):
                tokens.extend([word] if word in self.token_dict else self._words(word, pre_tokenize=False))
            return tokens
        tokens = []
        for word in "".join(spaced(ch) for ch in text).split():
            tokens.extend(self._pieces(word))
        return tokens

    def _pieces(self, word: str) -> list[str]:
        if len(word) > MAX_WORD_CHARS:
            return [word]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.token_dict:
                    break
            else:  # nothing in the vocabulary starts here: the word is unknown as a whole
                return [word]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str, maxlen: Optional[int] = None) -> list[str]:
        """``[CLS]``, the tokens of ``text``, ``[SEP]``; cut to ``maxlen`` tokens (before the [SEP])."""
        tokens = [CLS, *self._words(text), SEP]
        if maxlen is not None:
            cut_to(maxlen, tokens)
        return tokens

    def token_id(self, token: str) -> int:
        """The id of ``token``: the vocabulary's, or [UNK]'s.

        Raises:
            ConfigError: ``token`` is not in the vocabulary, which has no [UNK] either.
        """
        found = self.token_dict.get(token, self.unk_id)
        if found is None:
            raise ConfigError(f"the vocabulary has no {token!r} and no {UNK} token to stand for it")
        return found

    def encode(self, first: str, second: Optional[str] = None, *, maxlen: Optional[int] = None) -> tuple[list, list]:
        """(token ids, segment ids) of ``[CLS] first [SEP]``, or of the pair ``[CLS] first [SEP]
        second [SEP]`` (segment 1 on the second text and its [SEP]); cut to ``maxlen`` tokens, a pair
        from its longer text first."""
        first_tokens = self.tokenize(first)
        second_tokens = None if second is None else self.tokenize(second)
        if maxlen is not None:
            if second_tokens is None:
                cut_to(maxlen, first_tokens)
            else:  # the second text's [CLS] is counted while cutting and dropped after
                cut_to(maxlen + 1, first_tokens, second_tokens)
        token_ids = [self.token_id(token) for token in first_tokens]
        segment_ids = [0] * len(token_ids)
        if second_tokens is not None:
            second_ids = [self.token_id(token) for token in second_tokens[1:]]
            token_ids += second_ids
            segment_ids += [1] * len(second_ids)
        return token_ids, segment_ids
