"""Tokenisation: bert4keras's WordPiece tokenisation (:mod:`.wordpiece`, which imports no framework),
with jieba pre-tokenisation for word models.

Both Kerases and the ONNX runtime tokenise with it (the Keras 3 route too: keras-hub's tokenizer
lower-cases with NFKC, which changes Chinese punctuation).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable
from typing import Any, Optional, Protocol, Union

import numpy as np

from ..data.pairs import decoded_lines
from ..errors import ConfigError, DataError
from ..huggingface import folders as huggingface
from .checkpoint_files import read_config
from .wordpiece import WordPieceTokenizer


class VocabularySource(Protocol):
    """What :class:`SentenceTokenizer` asks of a :class:`~cosent_tf.models.sources.ModelSource`
    (which sits above this module: it reads its vocabulary with :func:`load_vocab`)."""

    @property
    def vocab_path(self) -> Optional[str]: ...

    @property
    def do_lower_case(self) -> bool: ...

    def vocab(self) -> list: ...


def load_vocab(vocab_path: Union[str, os.PathLike]) -> list:
    """Token list of a BERT vocab file (one token per line), or of a Hugging Face
    ``tokenizer.json``'s WordPiece model.

    Args:
        vocab_path: the file.

    Returns:
        The tokens in id order.

    Raises:
        DataError: the file cannot be read, is empty or repeats a token (naming the line).

    Example:
        >>> load_vocab("vocab.txt")[:2]  # doctest: +SKIP
        ['[PAD]', '[unused1]']
    """
    if os.fspath(vocab_path).endswith(".json"):
        return huggingface.read_tokenizer_json(vocab_path)[0]
    try:
        with open(vocab_path, "rb"):
            pass
    except OSError as e:
        raise DataError(vocab_path, f"cannot read the vocabulary ({e.strerror})") from e
    first_line: dict[str, int] = {}  # token: the line it is on, in file order
    number = 0
    # Read a bounded line at a time (a binary file is refused, not loaded whole); a lone
    # carriage return ends a line too, as it always has here.
    for _, line in decoded_lines(vocab_path):
        line = line[:-1] if line.endswith("\n") else line
        for piece in (line[:-1] if line.endswith("\r") else line).split("\r"):
            number += 1
            token = piece.strip()
            if token in first_line:  # the later id would win, silently changing the encoding
                raise DataError(vocab_path, f"token {token!r} repeats line {first_line[token]}", line=number)
            first_line[token] = number
    tokens = list(first_line)
    if not tokens:
        raise DataError(vocab_path, "the vocabulary is empty")
    return tokens


def check_vocab_size(config_path: str, vocab_path: str) -> None:
    """Raise ConfigError unless the config's vocab_size equals the vocab file's line count.

    Args:
        config_path: the model config.
        vocab_path: the vocabulary.

    Raises:
        ConfigError: the two differ; the message names both files.

    Example:
        >>> check_vocab_size("bert_config.json", "vocab.txt")  # doctest: +SKIP
    """
    expected = read_config(config_path)["vocab_size"]
    actual = len(load_vocab(vocab_path))
    if expected != actual:
        raise ConfigError(
            f"{config_path}: vocab_size is {expected} but {vocab_path} has {actual} tokens; "
            "the config and the vocabulary must come from the same checkpoint"
        )


logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Truncation:
    """How many of ``total`` sequences were longer than ``maxlen`` tokens (and cut), and the
    longest one's length before cutting."""

    what: str
    total: int
    truncated: int
    longest: int
    maxlen: int

    def __str__(self) -> str:
        share = f" ({self.truncated / self.total:.1%})" if self.total else ""
        return (
            f"{self.what}: {self.truncated} of {self.total}{share} longer than maxlen {self.maxlen} tokens "
            f"were cut; the longest had {self.longest}"
        )


# The share of a split's tokens that may become [UNK] before the report is a warning: a vocabulary of
# the data's language leaves a few rare characters and emoji unknown, one of another language most.
UNKNOWN_TOKEN_WARNING_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class UnknownTokens:
    """How many of ``tokens`` tokens (of ``total`` sequences, [CLS] and [SEP] left out) were not in the
    vocabulary and became ``[UNK]``, and in how many sequences."""

    what: str
    total: int
    with_unknown: int
    tokens: int
    unknown: int
    vocab_path: str

    @property
    def share(self) -> float:
        """The share of the tokens that became [UNK] (0 when there were none)."""
        return self.unknown / self.tokens if self.tokens else 0.0

    @property
    def high(self) -> bool:
        """Whether the share reaches :data:`UNKNOWN_TOKEN_WARNING_SHARE` (the report is then a warning)."""
        return self.share >= UNKNOWN_TOKEN_WARNING_SHARE

    def __str__(self) -> str:
        texts = f"{self.with_unknown} of {self.total} ({self.with_unknown / max(self.total, 1):.1%})"
        tokens = f"{self.unknown} of {self.tokens} tokens ({self.share:.1%})"
        said = f"{self.what}: {texts} had text the vocabulary lacks: {tokens} became [UNK]"
        if self.high:
            said += (
                f"; over {UNKNOWN_TOKEN_WARNING_SHARE:.0%} is more than a vocabulary of the data's language leaves: "
                f"is {self.vocab_path} the vocabulary of a model for this language?"
            )
        return said


def _jieba_cut(text: str) -> Any:
    import jieba

    return jieba.cut(text, HMM=False)


class SentenceTokenizer:
    """Text to token ids for sentence encoders and cross-encoders.

    Character-level by default (bert4keras's ``Tokenizer(vocab, do_lower_case=True)``, as the
    original experiments: :class:`~cosent_tf.models.wordpiece.WordPieceTokenizer`);
    ``word_level=True`` first cuts text with jieba (HMM off), as WoBERT and RoFormer expect.
    Sequences include [CLS] and [SEP] and are truncated to ``maxlen`` tokens.

    Args:
        vocab_path: the vocabulary file, or a :class:`~cosent_tf.models.sources.ModelSource`
            (its vocabulary, read once, and its lower-casing).
        maxlen: the most tokens of a text (of a pair, for :meth:`encode_pair`).
        word_level: cut texts into words with jieba first.
        do_lower_case: lower-case (and strip accents) first; None: the source's setting, or
            True for a vocabulary file.

    Raises:
        ConfigError: ``maxlen`` leaves no room for a token.
        DataError: the vocabulary cannot be read.

    Example:
        >>> tokenizer = SentenceTokenizer("vocab.txt", maxlen=32)  # doctest: +SKIP
        >>> tokenizer.encode("你好")  # doctest: +SKIP
        [101, 872, 1962, 102]
    """

    def __init__(
        self,
        vocab_path: Union[str, os.PathLike, VocabularySource],
        maxlen: int = 64,
        word_level: bool = False,
        do_lower_case: Optional[bool] = None,
    ) -> None:
        source = None if isinstance(vocab_path, (str, os.PathLike)) else vocab_path
        self.vocab_path = str(source.vocab_path if source is not None else vocab_path)
        self.maxlen = int(maxlen)
        self.word_level = bool(word_level)
        if do_lower_case is None:
            do_lower_case = source.do_lower_case if source is not None else True
        self.do_lower_case = bool(do_lower_case)
        if self.maxlen < 3:
            raise ConfigError(f"maxlen must leave room for [CLS], [SEP] and a token, got {maxlen}")
        tokens = source.vocab() if source is not None else load_vocab(self.vocab_path)
        token_dict = {token: i for i, token in enumerate(tokens)}
        if word_level:
            import jieba

            jieba.setLogLevel(logging.WARNING)
        self._tokenizer = WordPieceTokenizer(token_dict, self.do_lower_case, _jieba_cut if word_level else None)
        self.token_dict = token_dict
        self.vocab_size = len(token_dict)
        self.sep_id = token_dict.get("[SEP]")
        self.unknown_id = token_dict.get("[UNK]")
        self.last_truncation: Optional[Truncation] = None  # the Truncation of the latest encode_all / encode_pairs
        self.last_unknown: Optional[UnknownTokens] = None  # and its UnknownTokens

    def encode(self, text: str) -> list:
        """Token ids of one sentence, [CLS] ... [SEP]."""
        return self._tokenizer.encode(text, maxlen=self.maxlen)[0]

    def encode_pair(self, first: str, second: str) -> list:
        """Token ids of a concatenated pair, [CLS] a [SEP] b [SEP] (longer side truncated first)."""
        return self._tokenizer.encode(first, second, maxlen=self.maxlen)[0]

    def encode_all(self, texts: Iterable[str], what: str = "texts", report: bool = True) -> list:
        """Token ids of each text (int32 arrays); logs a :class:`Truncation` report (at debug level
        when nothing was cut) and an :class:`UnknownTokens` one (at debug level when no token became
        [UNK], a warning when many did). ``report=False``: both at debug level (texts of the
        package's own, not the user's)."""
        return self._encode_many([(t,) for t in texts], what, report)

    def encode_pairs(
        self, firsts: Iterable[str], seconds: Iterable[str], what: str = "pairs", report: bool = True
    ) -> list:
        """Token ids of each concatenated pair (int32 arrays); logs the reports of :meth:`encode_all`."""
        return self._encode_many(list(zip(firsts, seconds)), what, report)

    def _encode_many(self, items: list, what: str, report: bool = True) -> list:
        encoded, truncated, longest = [], 0, 0
        tokens, unknown, with_unknown = 0, 0, 0
        for texts in items:
            ids = self._tokenizer.encode(*texts)[0]  # uncut first: most texts fit, and then once is enough
            longest = max(longest, len(ids))
            content = len(ids) - len(texts) - 1  # without [CLS] and each text's [SEP]
            unknown_here = ids.count(self.unknown_id) if self.unknown_id is not None else 0
            tokens, unknown, with_unknown = tokens + content, unknown + unknown_here, with_unknown + (unknown_here > 0)
            if len(ids) > self.maxlen:
                truncated += 1
                ids = self._tokenizer.encode(*texts, maxlen=self.maxlen)[0]
            encoded.append(np.asarray(ids, dtype=np.int32))
        self.last_truncation = Truncation(what, len(items), truncated, longest, self.maxlen)
        self.last_unknown = UnknownTokens(what, len(items), with_unknown, tokens, unknown, self.vocab_path)
        if items:  # said only when something was cut: a run encodes up to six splits, most of them uncut
            logger.log(logging.INFO if truncated and report else logging.DEBUG, "%s", self.last_truncation)
            level = logging.WARNING if self.last_unknown.high else logging.INFO
            logger.log(level if unknown and report else logging.DEBUG, "%s", self.last_unknown)
        return encoded

    def tokenize(self, text: str) -> list:
        """The tokens of ``text``, [CLS] ... [SEP], cut to ``maxlen``."""
        return self._tokenizer.tokenize(text, maxlen=self.maxlen)

    def get_config(self) -> dict:
        """The arguments that make this tokenizer again (with the vocabulary's path)."""
        return {
            "vocab_path": self.vocab_path,
            "maxlen": self.maxlen,
            "word_level": self.word_level,
            "do_lower_case": self.do_lower_case,
        }
