"""Using a trained matcher: sentence vectors, pair scores, exact cosine search, and search reranked by
an interaction model (:func:`rerank`).

``SentenceEncoder`` wraps a feature model (a model folder's ``kind: feature``) and
``PairScorer`` an interaction model. Texts are tokenised exactly as in training
(truncated to the model's maxlen; an empty text is ``[CLS] [SEP]``) and run in batches
of similar length (:mod:`.runtime`); results come back in input order. Search runs over a
:class:`~cosent_tf.inference.index.VectorIndex`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self, overload

import numpy as np

from ..calibration import (
    RULES,
    MatchDecision,
    are_binary,
    fit_decision,
    format_threshold,
    read_decision,
    write_decision,
)
from ..choices import PRECISIONS, RUNTIMES
from ..errors import ConfigError
from ..io import read_whole_folder
from ..models.kinds import FEATURE, INTERACTION, get_kind
from ..models.spec import SPEC_FILE, ModelSpec, how_to_calibrate, read_model_decision, read_spec
from ..models.tokenization import SentenceTokenizer
from .index import Hit, RerankedHit, VectorIndex, rerank_depth
from .onnx_model import load_onnx_dir, read_onnx_spec
from .runtime import batched_outputs, interaction_scores, l2_normalize
from .texts import check_texts
from .vectors import check_dim

if TYPE_CHECKING:  # a matcher of an ONNX export runs without TensorFlow: the tensorflow runtime imports it
    from ..backend import keras, tf

# Auto progress bars appear from this many texts on.
PROGRESS_FROM = 5000


def check_pairs(texts_a: Iterable[str], texts_b: Iterable[str]) -> tuple[list[str], list[str]]:
    """Both sides as lists of str (:func:`check_texts`); a ValueError when they do not align."""
    texts_a, texts_b = check_texts(texts_a, "texts_a"), check_texts(texts_b, "texts_b")
    if len(texts_a) != len(texts_b):
        raise ValueError(f"texts_a has {len(texts_a)} texts but texts_b has {len(texts_b)}; pairs must align")
    return texts_a, texts_b


def one_pair(texts_a: Iterable[str] | str, texts_b: Iterable[str] | str) -> bool:
    """Whether a call that scores aligned pairs was given one pair, two strings, rather than two
    lists of texts: its result is then the one pair's, without the list's axis."""
    return isinstance(texts_a, str) and isinstance(texts_b, str)


def _show(show_progress: bool | None, count: int) -> bool:
    return count >= PROGRESS_FROM if show_progress is None else bool(show_progress)


@dataclasses.dataclass(frozen=True)
class Decisions:
    """A matcher's decision on aligned pairs (:meth:`_Matcher.decide`).

    Attributes:
        scores: each pair's score (float32): a cosine, or an interaction model's score.
        probabilities: each pair's probability of a match (float64), from the decision's calibration
            map; None when the decision has none.
        matches: whether each pair is a match: its score above ``threshold``.
        threshold: the threshold of ``rule``.
        rule: what the threshold was chosen to maximise on the data it was fitted on
            (:data:`cosent_tf.calibration.RULES`).
    """

    scores: np.ndarray
    probabilities: np.ndarray | None
    matches: np.ndarray
    threshold: float
    rule: str

    def __len__(self) -> int:
        return len(self.scores)


class _Matcher:
    """What both matchers share: a model with its tokenizer and description, loading from a model
    folder, the match decision shipped with it (``predict``, ``predict_proba``, ``decide``,
    ``calibrate``). Each subclass names its model kind and scores pairs with ``similarity``."""

    KIND: str

    def __init__(
        self,
        model: keras.Model,
        tokenizer: SentenceTokenizer,
        spec: ModelSpec | None = None,
        path: str | None = None,
        decision: MatchDecision | None = None,
        strategy: tf.distribute.Strategy | None = None,
    ) -> None:
        self.model, self.tokenizer, self.spec, self.path = model, tokenizer, spec, path
        self.decision = decision
        self.strategy = strategy
        self._checked_dims: dict[int, int | None] = {}

    def __repr__(self) -> str:
        spec = self.spec
        fields = [f"model={self.path!r}" if self.path is not None else "model=None (held in memory)"]
        if spec is not None:
            fields.append(f"kind={spec.kind}")
            fields += self._described(spec)
            fields.append(f"maxlen={spec.maxlen}")
        fields.append(f"decision={self._decision_shown()}")
        return f"{type(self).__name__}({', '.join(fields)})"

    def _described(self, spec: ModelSpec) -> list[str]:
        """What a repr says of this kind of model beside its folder, kind and maxlen."""
        return []

    def _decision_shown(self) -> str:
        """The match decision in a few words: its rule's threshold and calibration map, or none."""
        decision = self.decision
        if decision is None:
            return "none"
        if not decision.binary:
            return "graded (expected label), no threshold"
        calibrated = "no calibration" if decision.calibration is None else f"{decision.calibration.method} calibration"
        return f"{decision.rule} threshold {format_threshold(decision.threshold())}, {calibrated}"

    @classmethod
    def check_folder(
        cls, path: str | os.PathLike[str], option: str | None = None, runtime: str = "tensorflow"
    ) -> ModelSpec:
        """The description of the model folder ``path``, which must hold this class's kind of model.

        Reads only the description, no weights: a command checks every folder it was given this way
        before it loads any model, so that a wrong folder is said at once.

        Args:
            path: a model folder.
            option: the command-line option or argument that named ``path`` (``--rescore``), so
                that a folder of the other kind is refused in the terms of that option.
            runtime: ``onnx``: ``path`` is an ONNX export, whose record describes the model.

        Returns:
            The folder's :class:`~cosent_tf.models.spec.ModelSpec`.

        Raises:
            ConfigError: ``path`` is not a readable model folder, or holds the other kind of model.

        Example:
            >>> PairScorer.check_folder("runs/bq-interaction/model", option="--rerank").kind
            'interaction'
        """
        spec = read_onnx_spec(path) if runtime == "onnx" else read_spec(path)
        cls._check_kind(path, spec.kind, option)
        return spec

    @classmethod
    def _check_kind(cls, path: str | os.PathLike[str], kind: str, option: str | None) -> None:
        if kind != cls.KIND:
            if option is not None:
                raise ConfigError(
                    f"{option} {path}: {get_kind(kind).described}, but {option} needs {get_kind(cls.KIND).described}"
                )
            raise ConfigError(f"{path}: holds a model of kind {kind!r}; load it with {MATCHERS[kind].__name__}")

    @classmethod
    def load(
        cls,
        path: str,
        precision: str = "float32",
        option: str | None = None,
        with_decision: bool = True,
        runtime: str = "tensorflow",
        strategy: tf.distribute.Strategy | None = None,
    ) -> Self:
        """Load a model folder; ``precision='bf16'`` computes in bfloat16, with the weights
        stored in bfloat16 (see :func:`cosent_tf.inference.model_dir.load_model_dir`).

        ``option``: the command-line option or argument that named ``path`` (``--rescore``), so
        that a folder of the other kind is refused in the terms of that option.
        ``with_decision``: read the folder's match decision (``decision.json``); False leaves it
        unread, for :meth:`calibrate` to replace one that cannot be used.
        ``runtime``: ``tensorflow`` runs the model folder's weights; ``onnx`` runs the ONNX file of an
        export written by ``cosent-tf export --format onnx`` with ONNX Runtime
        (:func:`~cosent_tf.inference.onnx_model.load_onnx_dir`), in ``precision`` ``float32`` or
        ``int8`` (written with ``--quantize int8``).
        ``strategy``: a ``tf.distribute`` strategy (the command line's ``--strategy mirrored``:
        :func:`cosent_tf.training.distribute.get_strategy`): the model is built in its scope, and
        every batch is shared among its replicas (:func:`~cosent_tf.inference.runtime.batched_outputs`);
        the outputs are the one-device ones. None: one device.

        Raises:
            ConfigError: ``path`` is not a readable model folder (for ``onnx``: no ONNX export, or one
                whose file is not the one it wrote), holds the other kind of model, or (``with_decision``)
                a decision.json that cannot be used; an unknown runtime or a precision it does not run;
                a strategy of several replicas with the onnx runtime.

        Example:
            >>> from cosent_tf.training.distribute import get_strategy
            >>> encoder = SentenceEncoder.load("runs/bq-cosent/model", strategy=get_strategy("mirrored"))
        """
        if runtime not in RUNTIMES:
            raise ConfigError(f"unknown runtime {runtime!r}; choose {' or '.join(RUNTIMES)}")
        if runtime == "onnx" and strategy is not None and strategy.num_replicas_in_sync > 1:
            raise ConfigError(
                "a tf.distribute strategy (--strategy mirrored) runs the tensorflow runtime; ONNX Runtime uses "
                "the CPU's cores by itself: drop --strategy, or run the model folder with --runtime tensorflow"
            )
        if runtime == "tensorflow" and precision not in PRECISIONS:
            raise ConfigError(
                f"the tensorflow runtime computes in {', '.join(PRECISIONS)}, not {precision!r} "
                "(int8 is for --runtime onnx, on an export written with --quantize int8)"
            )
        # one whole build of a folder that an export or a training run with --overwrite may replace meanwhile
        return read_whole_folder(
            path,
            lambda folder: cls._read(folder, precision, option, with_decision, runtime, strategy),
            "model folder",
        )

    @classmethod
    def _read(
        cls,
        path: str,
        precision: str,
        option: str | None,
        with_decision: bool,
        runtime: str,
        strategy: tf.distribute.Strategy | None,
    ) -> Self:
        described = cls.check_folder(path, option, runtime)  # the kind is said before the weights load
        decision = None
        if with_decision:
            decision = read_model_decision(path, described.kind, described.threshold)
        if runtime == "onnx":
            spec, model, tokenizer = load_onnx_dir(path, precision)
        else:
            from .model_dir import load_model_dir

            with strategy.scope() if strategy is not None else contextlib.nullcontext():
                spec, model, tokenizer = load_model_dir(path, precision)
        return cls(model, tokenizer, spec, os.path.abspath(path), decision, strategy)

    @property
    def threshold(self) -> float | None:
        """The score above which a pair counts as similar: the threshold of the decision's rule (the
        best for accuracy, or for F1, on the training task's valid split or the pairs ``calibrate``
        was given); None without a binary decision."""
        if self.decision is None or not self.decision.binary:
            return None
        return self.decision.threshold()

    def _decision(self) -> MatchDecision:
        if self.decision is None:
            raise ConfigError(
                f"{self.path or 'this model'}: no match decision (no decision.json: its training task had no "
                "labels to fit one on, or the model was not loaded from a folder); fit one on labelled pairs: "
                f"{how_to_calibrate(self.path)}"
            )
        return self.decision

    # one str is one text (or one pair), though a str is an Iterable[str] too
    @overload
    def predict_proba(  # type: ignore[overload-overlap]
        self, texts_a: str, texts_b: str, batch_size: int = 64, show_progress: bool | None = None
    ) -> float: ...

    @overload
    def predict_proba(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray: ...

    def predict_proba(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray | float:
        """Each aligned pair's probability of a match (float64), by the decision's calibration map;
        of one pair given as two strings, that pair's (a float).

        Raises:
            ConfigError: the model has no decision, or its decision no calibration map (too few pairs,
                or graded labels without a cut), saying how to fit one.

        Example:
            >>> SentenceEncoder.load("runs/bq-cosent/model").predict_proba(["花呗如何还钱"], ["花呗怎么还款"])
            array([0.83...])
        """
        decision = self._decision()
        decision.probability(0.0)  # a decision without a map says so before the pairs are scored
        if one_pair(texts_a, texts_b):
            return float(self.predict_proba([texts_a], [texts_b], batch_size, show_progress)[0])  # type: ignore[list-item]
        return decision.probability(self.similarity(texts_a, texts_b, batch_size, show_progress))

    def decide(
        self,
        texts_a: Iterable[str],
        texts_b: Iterable[str],
        rule: str | None = None,
        batch_size: int = 64,
        show_progress: bool | None = None,
    ) -> Decisions:
        """Match or no match for each aligned pair, with its score and (when the decision has a
        calibration map) its probability; one pair may come as two strings.

        Args:
            texts_a: the pairs' first texts.
            texts_b: the pairs' second texts, aligned with ``texts_a``.
            rule: whose threshold decides (:data:`cosent_tf.calibration.RULES`); the decision's own
                by default.
            batch_size: pairs scored at once.
            show_progress: a progress bar (None: from :data:`PROGRESS_FROM` texts on).

        Raises:
            ConfigError: no decision, or one fitted on graded labels without a cut.

        Example:
            >>> decided = SentenceEncoder.load("runs/bq-cosent/model").decide(["花呗如何还钱"], ["花呗怎么还款"])
            >>> decided.matches, decided.probabilities
            (array([ True]), array([0.83...]))
        """
        decision = self._decision()
        threshold = decision.threshold(rule)
        if one_pair(texts_a, texts_b):  # a Decisions of that one pair
            texts_a, texts_b = [texts_a], [texts_b]  # type: ignore[list-item]
        scores = self.similarity(texts_a, texts_b, batch_size, show_progress)
        probabilities = None if decision.calibration is None else decision.probability(scores)
        return Decisions(scores, probabilities, decision.matches(scores, rule), threshold, rule or decision.rule)

    # one str is one text (or one pair), though a str is an Iterable[str] too
    @overload
    def predict_label(  # type: ignore[overload-overlap]
        self, texts_a: str, texts_b: str, batch_size: int = 64, show_progress: bool | None = None
    ) -> float: ...

    @overload
    def predict_label(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray: ...

    def predict_label(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray | float:
        """Each aligned pair's expected label on the graded scale the decision was fitted on
        (STS-B's 0 to 5: "similarity 3.7 of 5"), float64; of one pair given as two strings, a float.

        Raises:
            ConfigError: no decision, or one fitted on binary labels.
        """
        decision = self._decision()
        decision.expected_labels(0.0)
        if one_pair(texts_a, texts_b):
            return float(self.predict_label([texts_a], [texts_b], batch_size, show_progress)[0])  # type: ignore[list-item]
        return decision.expected_labels(self.similarity(texts_a, texts_b, batch_size, show_progress))

    def calibrate(
        self,
        texts_a: Iterable[str],
        texts_b: Iterable[str],
        labels: Iterable[float],
        source: str,
        graded: bool | None = None,
        cut: float | None = None,
        rule: str = RULES[0],
        save: bool = False,
        batch_size: int = 64,
    ) -> MatchDecision:
        """Fit the match decision on this model's scores of labelled pairs, and use it from now on.

        Args:
            texts_a: the pairs' first texts.
            texts_b: the pairs' second texts, aligned with ``texts_a``.
            labels: the pairs' labels: 0/1, or graded.
            source: what the pairs came from (a file), recorded in the decision.
            graded: whether the labels are graded; None: graded unless every label is 0 or 1.
            cut: for graded labels, the label above which a pair is a match (else the decision has
                only the expected-label map).
            rule: whose threshold decides by default (:data:`cosent_tf.calibration.RULES`).
            save: write the decision into the model folder this matcher was loaded from, as
                ``decision.json`` (replacing the one there).
            batch_size: pairs scored at once.

        Returns:
            The decision, also set as ``self.decision``.

        Raises:
            ConfigError: what :func:`cosent_tf.calibration.fit_decision` refuses (one class, too few
                pairs, a cut on 0/1 labels); ``save`` for a matcher not loaded from a cosent-tf
                model folder.

        Example:
            >>> scorer = PairScorer.load("runs/bq-interaction/model")
            >>> scorer.calibrate(pairs.texts_a, pairs.texts_b, pairs.labels, "my-domain.tsv", save=True)
        """
        values = np.asarray(list(labels), dtype=np.float64)
        if save:
            self._check_writable_folder()
        if graded is None:
            graded = not are_binary(values)
        scores = self.similarity(texts_a, texts_b, batch_size)
        decision = fit_decision(
            scores, values, source, graded=graded, cut=cut, rule=rule, score=get_kind(self.KIND).scored_by
        )
        if save:
            assert self.path is not None
            write_decision(self.path, decision)
            decision = read_decision(self.path) or decision  # as the folder now holds it, fingerprint and all
        self.decision = decision
        return decision

    def _check_writable_folder(self) -> None:
        if self.path is None:
            raise ConfigError("this model was not loaded from a folder, so there is no folder to save its decision in")
        if not os.path.isfile(os.path.join(self.path, SPEC_FILE)):
            raise ConfigError(
                f"{self.path}: not a cosent-tf model folder (no {SPEC_FILE}), and cosent-tf writes nothing into "
                "another program's folder; calibrate the cosent-tf model folder it came from and export that again"
            )

    # one str is one text (or one pair), though a str is an Iterable[str] too
    @overload
    def similarity(  # type: ignore[overload-overlap]
        self, texts_a: str, texts_b: str, batch_size: int = 64, show_progress: bool | None = None
    ) -> float: ...

    @overload
    def similarity(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray: ...

    def similarity(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray | float:
        """Each aligned pair's score (float32, one per pair); higher means more similar. Of one pair
        given as two strings, that pair's score (a float)."""
        raise NotImplementedError

    @overload
    def predict(self, texts_a: str, texts_b: str, threshold: float | None = None, **kwargs: Any) -> int: ...

    @overload
    def predict(
        self, texts_a: Iterable[str], texts_b: Iterable[str], threshold: float | None = None, **kwargs: Any
    ) -> np.ndarray: ...

    def predict(
        self, texts_a: Iterable[str], texts_b: Iterable[str], threshold: float | None = None, **kwargs: Any
    ) -> np.ndarray | int:
        """1 where a pair's score is above the threshold (the tuned one by default), else 0; of one
        pair given as two strings, that pair's 0 or 1 (an int).

        Args:
            texts_a: the pairs' first texts.
            texts_b: the pairs' second texts, aligned with ``texts_a``.
            threshold: the score above which a pair counts as similar; the tuned one by default.
            **kwargs: passed to ``similarity`` (``batch_size``, ``show_progress``).

        Returns:
            int32 array, one 0 or 1 per pair.

        Raises:
            ConfigError: no threshold was given and the model has no tuned one.
        """
        threshold = self.threshold if threshold is None else threshold
        if threshold is None:
            raise ConfigError(
                f"{self.path or 'this model'}: no tuned threshold (its training task had no binary labels); "
                f"pass threshold=, or fit a decision on labelled pairs: {how_to_calibrate(self.path)}"
            )
        if one_pair(texts_a, texts_b):
            return int(self.predict([texts_a], [texts_b], threshold, **kwargs)[0])  # type: ignore[list-item]
        # in float64, as the decision compares: a float32 comparison could round the threshold onto a score
        return (np.asarray(self.similarity(texts_a, texts_b, **kwargs), dtype=np.float64) > threshold).astype(np.int32)


class SentenceEncoder(_Matcher):
    """Sentence vectors from a feature model; cosine similarity and search over them.

    Load a trained model folder with :meth:`load`, or wrap an encoder held in memory (a
    ``cosent_tf.build_encoder`` model, trained or not) with its tokenizer; the latter has no
    tuned threshold, so ``predict`` needs ``threshold=``.

    Args:
        model: a Keras model from (token ids, segment ids) to one vector per text.
        tokenizer: the :class:`cosent_tf.SentenceTokenizer` of the model's vocabulary.
        spec: the model folder's description (set by :meth:`load`).
        path: the model folder (set by :meth:`load`), named in messages and recorded in indexes.
        decision: the match decision shipped with the model (set by :meth:`load`).
        strategy: the ``tf.distribute`` strategy the model was built under (set by :meth:`load`): its
            replicas share every batch.

    Example:
        >>> encoder = SentenceEncoder.load("runs/bq-cosent/model")
        >>> vectors = encoder.encode(["花呗如何还钱", "借呗额度"])  # (2, dim), unit length
        >>> scores = encoder.similarity(["花呗如何还钱"], ["花呗怎么还款"])

        An encoder in memory, before it was saved:

        >>> encoder = SentenceEncoder(build_encoder("bert-small-random.json"), SentenceTokenizer("vocab.txt"))
        >>> encoder.predict(["花呗如何还钱"], ["花呗怎么还款"], threshold=0.8)
    """

    KIND = FEATURE.name

    def encode(
        self,
        texts: Iterable[str] | str,
        batch_size: int = 64,
        normalize: bool = True,
        show_progress: bool | None = None,
        dim: int | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts`` (float32, shape (len(texts), dim)), L2-normalised by default; of one
        text given as a string, its vector (shape (dim,)), as sentence-transformers' ``encode`` gives.

        ``dim`` cuts each vector to its first ``dim`` dimensions and renormalises it
        (:func:`~cosent_tf.inference.vectors.truncate`; with ``normalize=False`` the cut vector keeps
        its length), checked by :meth:`check_dim`. ``show_progress`` None shows a progress bar from
        :data:`PROGRESS_FROM` texts on.

        Raises:
            TypeError: ``texts`` is not a sequence of strings.
            ConfigError: ``dim`` above the model's width.
        """
        dim = self.check_dim(dim)
        if isinstance(texts, str):
            return self.encode([texts], batch_size, normalize, show_progress, dim)[0]
        texts = check_texts(texts)
        vectors = batched_outputs(
            self.model,
            self.tokenizer.encode_all(texts),
            batch_size,
            _show(show_progress, len(texts)),
            strategy=self.strategy,
        )
        if dim is not None:
            vectors = vectors[:, :dim]
        return l2_normalize(vectors) if normalize else vectors

    @property
    def width(self) -> int:
        """The dimensions of the model's full vectors."""
        return int(self.model.output_shape[-1])

    def _described(self, spec: ModelSpec) -> list[str]:
        trained = f", trained widths {spec.matryoshka_dims}" if spec.matryoshka_dims else ""
        return [f"pooling={spec.pooling}", f"width={self.width}{trained}"]

    def check_dim(self, dim: int | None) -> int | None:
        """``dim`` for this model (:func:`~cosent_tf.inference.vectors.check_dim`): None for the full
        width; a ConfigError above it; a warning, once per encoder and width, when the model was not
        trained for it (a search or an evaluation encodes several times at one width)."""
        if dim is None:
            return None
        if isinstance(dim, (int, np.integer)) and dim in self._checked_dims:
            return self._checked_dims[dim]
        trained = self.spec.matryoshka_dims if self.spec is not None else None
        checked = check_dim(dim, self.width, trained, self.path or "this model")
        self._checked_dims[int(dim)] = checked  # reached only by a width check_dim took
        return checked

    # one str is one text (or one pair), though a str is an Iterable[str] too
    @overload
    def similarity(  # type: ignore[overload-overlap]
        self,
        texts_a: str,
        texts_b: str,
        batch_size: int = 64,
        show_progress: bool | None = None,
        dim: int | None = None,
    ) -> float: ...

    @overload
    def similarity(
        self,
        texts_a: Iterable[str],
        texts_b: Iterable[str],
        batch_size: int = 64,
        show_progress: bool | None = None,
        dim: int | None = None,
    ) -> np.ndarray: ...

    def similarity(
        self,
        texts_a: Iterable[str],
        texts_b: Iterable[str],
        batch_size: int = 64,
        show_progress: bool | None = None,
        dim: int | None = None,
    ) -> np.ndarray | float:
        """Cosine of each aligned pair (texts_a[i], texts_b[i]), of the vectors cut to ``dim`` if given;
        of one pair given as two strings, its cosine (a float)."""
        if one_pair(texts_a, texts_b):
            return float(self.similarity([texts_a], [texts_b], batch_size, show_progress, dim)[0])  # type: ignore[list-item]
        texts_a, texts_b = check_pairs(texts_a, texts_b)
        vectors = self.encode(texts_a + texts_b, batch_size, True, show_progress, dim)
        return np.sum(vectors[: len(texts_a)] * vectors[len(texts_a) :], axis=1)

    def build_index(
        self,
        corpus: Iterable[str],
        batch_size: int = 64,
        show_progress: bool | None = None,
        dim: int | None = None,
        precision: str = "float32",
        kind: str | None = None,
        **ann_settings: Any,
    ) -> VectorIndex:
        """A :class:`VectorIndex` of ``corpus``, recording this encoder's model folder
        (:meth:`VectorIndex.build`).

        Args:
            corpus: the texts.
            batch_size: texts per model call.
            show_progress: progress bars of the encoding and of an approximate index's build; None
                shows them from :data:`PROGRESS_FROM` texts on.
            dim: the vectors' width: cut to their first ``dim`` dimensions (:meth:`check_dim`).
            precision: how the index stores and first searches its vectors
                (:data:`~cosent_tf.choices.VECTOR_PRECISIONS`); the float32 vectors are kept too, to
                re-score candidates.
            kind: the search structure (:data:`~cosent_tf.choices.INDEX_KINDS`); None chooses by
                the corpus's size.
            **ann_settings: an approximate index's settings (:meth:`VectorIndex.build`).

        Raises:
            TypeError: ``corpus`` is not a sequence of strings.
            ConfigError: ``dim`` above the model's width, an unknown precision or kind.

        Example:
            >>> index = encoder.build_index(corpus, dim=128, precision="binary", kind="hnsw")
        """
        corpus = check_texts(corpus, "corpus")
        vectors = self.encode(corpus, batch_size, True, show_progress, dim)
        return VectorIndex.build(
            vectors,
            corpus,
            model_dir=self.path,
            precision=precision,
            kind=kind,
            show_progress=_show(show_progress, len(corpus)),
            model_width=self.width,
            **ann_settings,
        )

    @overload
    def search(
        self,
        queries: Iterable[str],
        corpus_or_index: Iterable[str] | VectorIndex,
        top_k: int = 10,
        batch_size: int = 64,
        show_progress: bool | None = None,
        rerank: None = None,
        rerank_top: None = None,
        dim: int | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> list[list[Hit]]: ...

    @overload
    def search(
        self,
        queries: Iterable[str],
        corpus_or_index: Iterable[str] | VectorIndex,
        top_k: int = 10,
        batch_size: int = 64,
        show_progress: bool | None = None,
        *,
        rerank: PairScorer,
        rerank_top: int | None = None,
        dim: int | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> list[list[RerankedHit]]: ...

    @overload
    def search(
        self,
        queries: Iterable[str],
        corpus_or_index: Iterable[str] | VectorIndex,
        top_k: int = 10,
        batch_size: int = 64,
        show_progress: bool | None = None,
        rerank: PairScorer | None = None,
        rerank_top: int | None = None,
        dim: int | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> list[list[Hit]] | list[list[RerankedHit]]: ...

    def search(
        self,
        queries: Iterable[str],
        corpus_or_index: Iterable[str] | VectorIndex,
        top_k: int = 10,
        batch_size: int = 64,
        show_progress: bool | None = None,
        rerank: PairScorer | None = None,
        rerank_top: int | None = None,
        dim: int | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> list[list[Hit]] | list[list[RerankedHit]]:
        """The ``top_k`` most similar corpus texts of each query by cosine (exact for a list of texts;
        an index searches as it was built, :meth:`VectorIndex.search`), or reranked by an
        interaction model.

        With ``rerank``, the first ``max(top_k, rerank_top)`` texts by cosine are all re-scored by
        the interaction model (:func:`rerank`), and the best ``top_k`` of
        them by its score come back: a text cosine ranked below ``top_k`` can rise into them.

        Args:
            queries: the query texts.
            corpus_or_index: a list of texts (encoded now) or a :class:`VectorIndex`.
            top_k: hits per query (fewer when the corpus is smaller).
            batch_size: texts (or pairs) per model call.
            show_progress: a progress bar; None shows one from :data:`PROGRESS_FROM` texts on.
            rerank: a :class:`PairScorer` that re-orders the cosine hits; None keeps the cosine order.
            rerank_top: how many cosine hits per query it re-scores, at least ``top_k``
                (default :data:`~cosent_tf.inference.index.RERANK_TOP`, or ``top_k`` when larger).
            dim: the vectors' width: a corpus is encoded cut to it; an index's own width is used
                when None, and another one is refused.
            rescore_multiplier: an index of int8 or binary vectors, or an approximate one, takes
                this many times the hits asked for as candidates and re-scores them with its float32
                vectors (:meth:`VectorIndex.search`; default
                :data:`~cosent_tf.choices.RESCORE_MULTIPLIER`).
            ef_search: an hnsw index's candidate list for this search (default: the index's own).
            nprobe: the lists an ivf index searches this time (default: the index's own).

        Returns:
            One list per query, best first: :class:`Hit` (index, score, text), ties to the lower
            corpus index; with ``rerank``, :class:`~cosent_tf.inference.index.RerankedHit` (the
            interaction score, and the cosine and rank the first stage gave), ties to the better
            cosine rank.

        Raises:
            TypeError: ``rerank`` is not a PairScorer.
            ValueError: ``top_k`` is below 1, ``rerank_top`` is below ``top_k``, or ``rerank_top``
                is given without ``rerank``.

        Example:
            >>> hits = encoder.search(["花呗怎么还款"], index, top_k=5)
            >>> reranked = encoder.search(["花呗怎么还款"], index, top_k=5, rerank=scorer, rerank_top=50)
        """
        if rerank is None and rerank_top is not None:
            raise ValueError("rerank_top is how many hits the interaction model re-scores: pass rerank=a PairScorer")
        if rerank is not None and not isinstance(rerank, PairScorer):
            raise TypeError(f"rerank must be a PairScorer (an interaction model), not a {type(rerank).__name__}")
        if rerank_top is not None and rerank_top < top_k:
            raise ValueError(
                f"rerank_top={rerank_top} is below top_k={top_k}: the hits past {rerank_top} would have no "
                "interaction score; rerank at least top_k"
            )
        depth = top_k if rerank is None else rerank_depth(top_k, rerank_top)
        if isinstance(corpus_or_index, VectorIndex):
            index = corpus_or_index
            if dim is not None and dim != index.dimension:
                raise ConfigError(
                    f"{index.directory or 'the index'} holds vectors of {index.dimension} dimensions, not {dim}: "
                    f"query it without --dim, or build an index with --dim {dim}"
                )
            index.check_model(self.path, "search it with the model that built it")
            built_width = index.model_width if index.model_width is not None else index.dimension
            if built_width != self.width:
                raise ConfigError(
                    f"{index.directory or 'the index'} was built from a model whose vectors have {built_width} "
                    f"dimensions, and this model ({self.path or 'in memory'}) makes {self.width}: another model's "
                    "vectors cannot be compared with the index's; search it with the model that built it"
                )
            dim = index.dimension if index.dimension != self.width else None
        else:
            # a list is searched exactly, whatever its size, as it always was
            index = self.build_index(corpus_or_index, batch_size, show_progress, dim, kind="exact")
        queries = check_texts(queries, "queries")
        query_vectors = self.encode(queries, batch_size, True, show_progress, dim)
        scores, indices = index.search(
            query_vectors, depth, rescore_multiplier=rescore_multiplier, ef_search=ef_search, nprobe=nprobe
        )
        hits = [
            [Hit(int(i), float(s), index.texts[i]) for s, i in zip(row_scores, row_indices)]
            for row_scores, row_indices in zip(scores, indices)
        ]
        if rerank is None:
            return hits
        return _rerank_hits(rerank, queries, hits, top_k, batch_size, show_progress)


class PairScorer(_Matcher):
    """Scores of sentence pairs from an interaction (cross-encoder) model.

    The score is the head's output: an unbounded value for a CoSENT-trained model, and
    P(similar) for a cross-entropy one. Higher means more similar in both cases.

    Args:
        model: a Keras model from a pair's (token ids, segment ids) to its head's outputs.
        tokenizer: the :class:`cosent_tf.SentenceTokenizer` of the model's vocabulary.
        spec: the model folder's description (set by :meth:`load`).
        path: the model folder (set by :meth:`load`), named in messages.
        decision: the match decision shipped with the model (set by :meth:`load`).
        strategy: the ``tf.distribute`` strategy the model was built under (set by :meth:`load`): its
            replicas share every batch.

    Example:
        >>> scorer = PairScorer.load("runs/bq-interaction/model")
        >>> scores = scorer.score(["花呗如何还钱"], ["花呗怎么还款"])
        >>> labels = scorer.predict(["花呗如何还钱"], ["花呗怎么还款"])  # at the tuned threshold
    """

    KIND = INTERACTION.name

    # one str is one text (or one pair), though a str is an Iterable[str] too
    @overload
    def similarity(  # type: ignore[overload-overlap]
        self, texts_a: str, texts_b: str, batch_size: int = 64, show_progress: bool | None = None
    ) -> float: ...

    @overload
    def similarity(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray: ...

    def similarity(
        self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64, show_progress: bool | None = None
    ) -> np.ndarray | float:
        """The model's score of each aligned pair (texts_a[i], texts_b[i]); of one pair given as two
        strings, its score (a float)."""
        if one_pair(texts_a, texts_b):
            return float(self.similarity([texts_a], [texts_b], batch_size, show_progress)[0])  # type: ignore[list-item]
        texts_a, texts_b = check_pairs(texts_a, texts_b)
        return interaction_scores(
            self.model,
            self.tokenizer.encode_pairs(texts_a, texts_b),
            batch_size,
            _show(show_progress, len(texts_a)),
            self.tokenizer.sep_id if self.spec is not None and self.spec.pair_segments else None,
            self.strategy,
        )

    score = similarity

    def _described(self, spec: ModelSpec) -> list[str]:
        return [f"head={spec.head}"]

    def rank(
        self,
        query: str,
        documents: Iterable[str],
        top_k: int | None = None,
        batch_size: int = 64,
        show_progress: bool | None = None,
    ) -> list[Hit]:
        """``documents`` ordered by the model's score of (query, document), best first.

        Ties go to the lower position in ``documents`` (as sentence-transformers' ``CrossEncoder.rank``).

        Args:
            query: the text every document is scored against.
            documents: the texts to rank.
            top_k: how many to return; all when None.
            batch_size: pairs per model call.
            show_progress: a progress bar; None shows one from :data:`PROGRESS_FROM` documents on.

        Returns:
            :class:`Hit` (index: the document's position in ``documents``, score, text) per document.

        Raises:
            TypeError: ``query`` is not a str, or ``documents`` not a sequence of strings.
            ValueError: ``top_k`` is below 1.

        Example:
            >>> scorer.rank("花呗怎么还款", ["借呗额度", "花呗如何还钱"], top_k=1)
            [Hit(index=1, score=..., text='花呗如何还钱')]
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not a {type(query).__name__}")
        documents = check_texts(documents, "documents")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be at least 1 (or None for every document), got {top_k}")
        scores = self.similarity([query] * len(documents), documents, batch_size, show_progress)
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [Hit(int(i), float(scores[i]), documents[i]) for i in order]


def rerank(
    scorer: PairScorer,
    queries: Iterable[str],
    hits: Sequence[Sequence[Hit]],
    top_k: int | None = None,
    batch_size: int = 64,
    show_progress: bool | None = None,
) -> list[list[RerankedHit]]:
    """Re-order each query's first-stage hits by an interaction model's score of (query, hit text).

    Every pair of every query is scored in one batched ``scorer.similarity`` call, so pairs of
    similar length share batches across queries. Each query's hits are sorted by that score, best
    first; ties keep the first stage's order (a stable sort), so a tie goes to the better cosine.

    Args:
        scorer: a :class:`~cosent_tf.inference.matchers.PairScorer` (or anything whose
            ``similarity(texts_a, texts_b, batch_size, show_progress)`` scores aligned pairs).
        queries: the queries, one per list of hits.
        hits: each query's hits as the first stage ranked them, best first (any number per query;
            a ``SentenceEncoder.search`` result); a hit's place in its list is its ``cosine_rank``.
        top_k: hits kept per query after reranking; all of them when None.
        batch_size: pairs per model call.
        show_progress: a progress bar; None shows one from ``PROGRESS_FROM`` pairs on.

    Returns:
        One list of :class:`RerankedHit` per query, best first by the interaction score.

    Raises:
        TypeError: ``queries`` is not a sequence of strings.
        ValueError: ``hits`` does not hold one list per query, ``top_k`` is below 1, or the
            interaction model gave a score that is not finite (the model is broken).

    Example:
        >>> first = encoder.search(queries, index, top_k=50)
        >>> best = rerank(scorer, queries, first, top_k=10)
    """
    queries = check_texts(queries, "queries")
    if len(hits) != len(queries):
        raise ValueError(f"{len(queries)} queries but {len(hits)} lists of hits; give one list per query")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 (or None for every hit), got {top_k}")
    pair_queries = [query for query, row in zip(queries, hits) for _ in row]
    pair_texts = [hit.text for row in hits for hit in row]
    scores = np.asarray(scorer.similarity(pair_queries, pair_texts, batch_size, show_progress), dtype=np.float32)
    if not np.isfinite(scores).all():
        bad = int(np.argmin(np.isfinite(scores)))
        raise ValueError(
            f"the interaction model scored the pair ({pair_queries[bad]!r:.40}, {pair_texts[bad]!r:.40}) "
            f"{scores[bad]}: its weights are broken"
        )
    reranked, start = [], 0
    for row in hits:
        row_scores = scores[start : start + len(row)]
        start += len(row)
        order = np.argsort(-row_scores, kind="stable")[:top_k]
        reranked.append(
            [
                RerankedHit(int(row[i].index), float(row_scores[i]), row[i].text, float(row[i].score), int(i) + 1)
                for i in order
            ]
        )
    return reranked


# search() has a parameter called rerank, which hides the function there.
_rerank_hits = rerank


MATCHERS: dict[str, type[SentenceEncoder] | type[PairScorer]] = {
    SentenceEncoder.KIND: SentenceEncoder,
    PairScorer.KIND: PairScorer,
}


def load_matcher(path: str, precision: str = "float32", runtime: str = "tensorflow") -> SentenceEncoder | PairScorer:
    """The :class:`SentenceEncoder` or :class:`PairScorer` of a model folder, as its kind says.

    Args:
        path: a model folder written by training (or ``save_model_dir``); with ``runtime="onnx"``, an
            ONNX export.
        precision: ``"float32"``, or ``"bf16"`` to compute in bfloat16 with bfloat16 weights; with
            ``runtime="onnx"``, ``"float32"`` or ``"int8"``.
        runtime: ``tensorflow`` or ``onnx`` (:meth:`SentenceEncoder.load`).

    Returns:
        A SentenceEncoder for a feature model, a PairScorer for an interaction model.

    Raises:
        ConfigError: ``path`` is not a readable model folder.

    Example:
        >>> matcher = load_matcher("runs/bq-cosent/model")
        >>> matcher.predict(["花呗如何还钱"], ["花呗怎么还款"])
    """
    kind = (read_onnx_spec(path) if runtime == "onnx" else read_spec(path)).kind
    return MATCHERS[kind].load(path, precision, runtime=runtime)
