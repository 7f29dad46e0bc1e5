"""The command line: the ``cosent-tf`` command (train on one's own pair files; evaluate, encode,
similarity, search and export with a trained model folder).

``cosent-tf train`` takes RunConfig's own options (:func:`cosent_tf.training.config.add_run_options`);
the paper's training scripts have their entry points in :mod:`cosent_tf.experiments.scripts`.

Every output is written through a temporary file and a rename, so an interrupted
command leaves either the previous file or none, never a truncated one (a device or pipe,
``/dev/stdout``, is written as a stream). Outputs are checked before the work starts: an
output file may not be a folder, an input or inside one, nor lie inside a folder this tool
writes (:func:`cosent_tf.experiments.scripts.output_kinds`); an output folder (index, export)
must be new, empty, or (with ``--overwrite``) an earlier output of the same kind that holds no input. A failure ends the
command with one ``error: ...`` line naming the file (:func:`cosent_tf.console.errors_reported`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Callable, Optional, TextIO

import numpy as np

from . import environment
from .calibration import MIN_CALIBRATION_PAIRS, MIN_PAIRS_PER_CLASS, RULES, format_threshold
from .choices import (
    EXPORT_INPUTS,
    INDEX_KINDS,
    INT8_LOSS_WARNING,
    ONNX_QUANTIZATIONS,
    RESCORE_MULTIPLIER,
    RUNTIMES,
    VECTOR_PRECISIONS,
)
from .console import (  # noqa: F401 (console_logging and errors_reported: also their old home)
    VERBOSE_HELP,
    console_logging,
    error_message,
    errors_reported,
    tensorflow_start_up_shown,
)
from .data.files import EXTENSION_FORMATS, PairFileFormat, read_lines, read_pair_lines
from .errors import ConfigError, CosentError, DataError
from .experiments.scripts import (  # noqa: F401 (the training scripts' entry points: also their old home)
    output_kinds,
    report_main,
    train_main,
    training_parser,
)
from .experiments.scripts import run_training as _run_training
from .inference import ann
from .inference.index import EXACT_INDEX_LIMIT, RERANK_TOP, rerank_depth
from .inference.parts import (
    PartRecord,
    assemble_parts,
    check_parts,
    part_record_path,
    ranges_path,
    read_int8_ranges,
    save_vectors,
    shard_lines,
    write_part,
)
from .io import (
    check_folder_apart,
    check_not_in_tool_folder,
    check_output_file,
    check_output_folder,
    json_text,
    output_target,
    write_json,
    write_text,
)
from .training.config import (
    ENGINE,
    FILE_FORMAT,
    KERAS_VERSIONS,
    MODEL_KIND,
    OWN_FILES,
    add_run_options,
    finite_number,
    number_in_range,
    run_config,
)


def summary_stream(output: str) -> TextIO:
    """Where a command says what it wrote: stdout, unless the output is stdout itself
    (``/dev/stdout``), where the line would be mixed into the result."""
    try:
        if os.path.samestat(os.stat(output), os.fstat(sys.stdout.fileno())):
            return sys.stderr
    except (OSError, ValueError):  # not there yet, or a stdout without a file (captured)
        pass
    return sys.stdout


def _remove_stale(path):
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _encode(args):
    from .inference.matchers import SentenceEncoder
    from .inference.vectors import int8_ranges, quantize

    outputs = _encode_outputs(args)
    inputs = [args.model_dir, args.texts, args.int8_ranges]
    # an earlier int8 encode's ranges beside OUTPUT would describe codes no longer there
    stale_ranges = ranges_path(args.output) if args.vector_precision != "int8" or args.shard is not None else None
    if stale_ranges is not None and (output_target(args.output)[1] or not os.path.exists(stale_ranges)):
        stale_ranges = None
    for path in outputs + ([stale_ranges] if stale_ranges else []):
        check_output_file(path, inputs, output_kinds(), args.overwrite)
    said = summary_stream(args.output)
    texts = read_lines(args.texts, args.strict)  # bad files are said before the model's load
    given_ranges = None if args.int8_ranges is None else read_int8_ranges(args.int8_ranges)
    if args.vector_precision == "int8" and given_ranges is None and not texts:
        raise DataError(args.texts, "holds no lines, so there are no vectors to fit int8 ranges on; pass --int8-ranges")
    first, stop = (0, len(texts)) if args.shard is None else shard_lines(*args.shard, len(texts))
    encoder = SentenceEncoder.load(args.model_dir, args.precision, runtime=args.runtime, strategy=_strategy(args))
    width = args.dim or encoder.width
    if given_ranges is not None and given_ranges.shape[1] != width:
        raise ConfigError(
            f"--int8-ranges {args.int8_ranges}: holds the ranges of vectors of {given_ranges.shape[1]} dimensions, "
            f"but these have {width}: give the ranges of vectors of this width (an index's ranges.npy built with "
            "the same --dim)"
        )
    vectors = encoder.encode(texts[first:stop], args.batch_size, normalize=not args.no_normalize, dim=args.dim)
    dimension = vectors.shape[1]
    if args.shard is not None:
        shard, shards = args.shard
        record = PartRecord.for_shard(args.texts, len(texts), shard, shards, args.model_dir, dimension, encoder.width)
        write_part(args.output, vectors, record)
        _remove_stale(stale_ranges)
        which = f"lines {first + 1} to {stop}" if stop > first else "none of the lines"
        print(
            f"{args.output}: {len(vectors)} vectors of dimension {dimension}, {which} of {args.texts} (shard "
            f"{shard} of {shards}, counted from 0); its record in {outputs[1]}",
            file=said,
        )
        return
    ranges = None
    if args.vector_precision == "int8":
        ranges = int8_ranges(vectors) if given_ranges is None else given_ranges
    stored = quantize(vectors, args.vector_precision, ranges)
    # int8 to a file: the ranges beside it, never a codes file with other ranges
    save_vectors(args.output, stored, ranges if len(outputs) > 1 else None)
    _remove_stale(stale_ranges)
    stored_as = {
        "float32": "",
        "int8": f" as int8 codes, the ranges {'given' if given_ranges is not None else 'of these vectors'}"
        + (f" in {outputs[1]}" if len(outputs) > 1 else f" in {args.int8_ranges}"),
        "binary": f" as sign bits, packed 8 to a byte ({stored.shape[1]} bytes a vector)",
    }[args.vector_precision]
    print(f"{args.output}: {len(stored)} vectors of dimension {dimension}{stored_as}", file=said)


def _encode_outputs(args: argparse.Namespace) -> list[str]:
    """The files ``encode`` writes: OUTPUT, then its ranges (int8) or its part record (``--shard``);
    the option combinations that cannot be written are refused first."""

    if args.int8_ranges is not None and args.vector_precision != "int8":
        raise ConfigError(
            "--int8-ranges gives the ranges of int8 codes: pass --vector-precision int8 with it (or drop it)"
        )
    stream = output_target(args.output)[1]
    if args.shard is not None:
        if args.vector_precision != "float32":
            raise ConfigError(
                f"--shard with --vector-precision {args.vector_precision}: a part holds float32 vectors, which "
                "search build --parts needs whole (an index keeps them to re-score, and fits its int8 ranges on the "
                "whole corpus); drop --vector-precision, and give it to search build instead"
            )
        if args.no_normalize:
            raise ConfigError(
                "--shard with --no-normalize: a part goes into an index, which searches unit vectors by their dot "
                "product; drop --no-normalize"
            )
        if stream:
            raise ConfigError(
                f"--shard: {args.output} is a stream, but a part needs its record beside it "
                f"({part_record_path(args.output)}): give the path of a .npy file"
            )
        return [args.output, part_record_path(args.output)]
    if args.vector_precision == "int8":
        if not stream:
            return [args.output, ranges_path(args.output)]
        if args.int8_ranges is None:
            raise ConfigError(
                f"--vector-precision int8: {args.output} is a stream, and the int8 ranges fitted on the vectors "
                "need a file beside it: give the path of a .npy file, or pass --int8-ranges FILE.npy (the ranges "
                "the reader already has)"
            )
    return [args.output]


def shard_spec(text: str) -> tuple[int, int]:
    """An argparse type: ``I/N``, shard ``I`` (counted from 0) of ``N`` (``encode --shard``).

    Args:
        text: the option's value as typed.

    Returns:
        ``(I, N)``.

    Raises:
        argparse.ArgumentTypeError: not two whole numbers joined by ``/``, N below 1, or I not
            below N.

    Example:
        >>> shard_spec("2/8")
        (2, 8)
    """
    shard_text, slash, shards_text = (part.strip() for part in text.partition("/"))
    if not (slash and all(t.isascii() and t.isdigit() for t in (shard_text, shards_text))):
        raise argparse.ArgumentTypeError(f"expected I/N, shard I (from 0) of N, such as 0/4, got {text!r}")
    shard, shards = int(shard_text), int(shards_text)
    if shards < 1 or shard >= shards:
        raise argparse.ArgumentTypeError(f"shards count from 0 to N-1: {text} has no shard {shard}")
    return shard, shards


# What makes a similarity argument a file's name rather than a text: a text holds no path separator
# and ends in none of the pair files' extensions, so a missing file is "cannot open", never scored.
def _names_a_file(argument: str) -> bool:
    return (
        os.path.lexists(argument)
        or "/" in argument
        or os.sep in argument
        or os.path.splitext(argument)[1].lower() in EXTENSION_FORMATS
    )


def _two_texts(args: argparse.Namespace) -> Optional[tuple[str, str]]:
    """The two texts of ``similarity MODEL_DIR TEXT_A TEXT_B`` (or ``--texts``), or None for a pair file."""
    if args.texts:
        if args.output is None:
            raise ConfigError("--texts: give two texts after the model folder: similarity MODEL_DIR --texts A B")
        return args.pairs, args.output
    if args.output is None or _names_a_file(args.pairs) or _names_a_file(args.output):
        return None
    return args.pairs, args.output


def _score_fields(score: float, threshold: Optional[float]) -> list[str]:
    return [f"{score:.6f}"] + ([] if threshold is None else [str(int(score > threshold))])


# What ``similarity --decide`` holds when no rule follows it: decide by the decision's own rule. Not a
# string, which argparse would pass through the option's type as if typed.
_OWN_RULE = True


def decision_rule(text: str) -> str:
    """An argparse type: the rule of ``similarity --decide RULE``, one of
    :data:`cosent_tf.calibration.RULES`.

    Args:
        text: the option's value as typed.

    Returns:
        The rule.

    Raises:
        argparse.ArgumentTypeError: ``text`` is no rule; the message says that a text or file taken
            for the rule belongs before ``--decide``.

    Example:
        >>> decision_rule("f1")
        'f1'
    """
    from .calibration import RULES

    if text not in RULES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a rule ({', '.join(RULES)}); to decide by the decision's own rule, put --decide "
            "after the texts or files"
        )
    return text


def _decision_fields(decided, i: int) -> list[str]:
    """Pair ``i``'s columns under ``--decide``: the score, match or no match, and the probability
    (to 9 decimals, so that it agrees with ``predict_proba`` within 1e-6) when there is a map."""
    fields = [f"{float(decided.scores[i]):.6f}", "match" if decided.matches[i] else "no match"]
    if decided.probabilities is not None:
        fields.append(f"{float(decided.probabilities[i]):.9f}")
    return fields


def probability_note(decided) -> Optional[str]:
    """One line for a run of ``similarity --decide`` whose decisions disagree with the probability
    read at 0.5: how many pairs are a match at a probability below it (or no match above it), and
    why (the rule's threshold is not where the probability crosses 0.5); None when none does, or
    there is no probability.

    Args:
        decided: the :class:`~cosent_tf.inference.matchers.Decisions` of the run.

    Returns:
        The note, or None.

    Example:
        >>> import numpy as np
        >>> from cosent_tf.inference.matchers import Decisions
        >>> decided = Decisions(np.array([0.7]), np.array([0.12]), np.array([True]), 0.6, "f1")
        >>> probability_note(decided).split(":")[0]
        '1 of the 1 pairs decided "match" have a probability of a match below 0.5 (down to 0.1200)'
    """
    from .calibration import RULE_MEANINGS

    if decided.probabilities is None:
        return None
    probabilities, matches = np.asarray(decided.probabilities), np.asarray(decided.matches, dtype=bool)
    below, above = matches & (probabilities < 0.5), ~matches & (probabilities > 0.5)
    said = []
    if below.any():
        said.append(
            f'{int(below.sum())} of the {len(matches)} pairs decided "match" have a probability of a match below 0.5 '
            f"(down to {float(probabilities[below].min()):.4f})"
        )
    if above.any():
        said.append(
            f'{int(above.sum())} of the {len(matches)} pairs decided "no match" have a probability of a match above '
            f"0.5 (up to {float(probabilities[above].max()):.4f})"
        )
    if not said:
        return None
    return (
        "; ".join(said)
        + f": the {decided.rule} threshold {format_threshold(decided.threshold)} is {RULE_MEANINGS[decided.rule]}, "
        "not where the probability crosses 0.5; to decide by the probability, compare the last column with a cut "
        "of your own"
    )


def _check_dim_kind(args: argparse.Namespace) -> None:
    """Refuse ``--dim`` for an interaction model, before any weights load: its score is no vector."""
    from .inference.onnx_model import read_onnx_spec
    from .models.kinds import get_kind
    from .models.spec import read_spec

    if args.dim is None:
        return
    spec = read_onnx_spec(args.model_dir) if args.runtime == "onnx" else read_spec(args.model_dir)
    if not get_kind(spec.kind).sentence_vectors:
        raise ConfigError(
            f"--dim {args.dim}: {args.model_dir} is {get_kind(spec.kind).described}, which scores a pair as a whole: "
            "it has no sentence vectors to cut; --dim is for a feature model"
        )


def _width(args: argparse.Namespace, matcher) -> Optional[int]:
    """``--dim`` when it cuts the loaded model's vectors, None for the full width (or no --dim)."""
    return args.dim if args.dim is not None and args.dim != matcher.width else None


def _pair_scores(matcher, texts_a: list[str], texts_b: list[str], batch_size: int, dim: Optional[int]) -> np.ndarray:
    """The matcher's scores of aligned pairs; with ``dim`` (a sentence encoder's), the cosines of
    the vectors cut to that width."""
    if dim is None:
        return matcher.similarity(texts_a, texts_b, batch_size)
    return matcher.similarity(texts_a, texts_b, batch_size, dim=dim)


def _similarity(args: argparse.Namespace) -> None:
    from .inference.matchers import load_matcher

    rule = args.decide if isinstance(args.decide, str) else None  # None: the decision's own
    _check_dim_kind(args)
    texts = _two_texts(args)
    if texts is None:
        if args.output is not None:
            check_output_file(args.output, [args.model_dir, args.pairs], output_kinds(), args.overwrite)
        file_format = PairFileFormat(args.file_format, args.text_a_field, args.text_b_field)
        # a bad file is said before the model's load
        texts_a, texts_b, lines = read_pair_lines(args.pairs, args.strict, file_format)
    matcher = load_matcher(args.model_dir, args.precision, runtime=args.runtime)
    dim = _width(args, matcher)
    if dim is not None and args.decide is not None:
        raise ConfigError(
            f"--decide with --dim {dim}: {args.model_dir}'s match decision was fitted on the cosines of its full "
            f"vectors, and does not hold for vectors cut to {dim} dimensions; drop --decide (the scores alone), or "
            "drop --dim"
        )
    # The tuned threshold was fitted on full-width cosines: no 0/1 at another width.
    threshold = matcher.threshold if dim is None else None
    if texts is not None:
        if args.decide is not None:
            decided = matcher.decide([texts[0]], [texts[1]], rule, 1)
            print("\t".join(_decision_fields(decided, 0)))
            _say_probability_note(decided)
            return
        score = float(_pair_scores(matcher, [texts[0]], [texts[1]], 1, dim)[0])
        print("\t".join(_score_fields(score, threshold)))
        return
    if args.decide is not None:
        decided = matcher.decide(texts_a, texts_b, rule, args.batch_size)
        rows = [[line, *_decision_fields(decided, i)] for i, line in enumerate(lines)]
        extra = f", match or no match at the {decided.rule} threshold {format_threshold(decided.threshold)}"
        if decided.probabilities is not None:
            assert matcher.decision is not None and matcher.decision.calibration is not None
            extra += f" and the probability of a match ({matcher.decision.calibration.method} calibration)"
    else:
        scores = _pair_scores(matcher, texts_a, texts_b, args.batch_size, dim)
        rows = [[line, *_score_fields(s, threshold)] for line, s in zip(lines, scores)]
        extra = f" and 0/1 at the tuned threshold {format_threshold(threshold)}" if threshold is not None else ""
        if dim is not None:
            extra = f" (the cosine of the vectors cut to {dim} dimensions)"
            if matcher.threshold is not None:
                extra += "; no 0/1: the tuned threshold was fitted on full-width cosines"
    text = "".join("\t".join(row) + "\n" for row in rows)
    if args.output is None:
        sys.stdout.write(text)
        said, written = sys.stderr, "stdout"
    else:
        write_text(args.output, text)
        said, written = summary_stream(args.output), args.output
    print(f"{written}: {len(rows)} pairs, each line with its score{extra}", file=said)
    if args.decide is not None:
        _say_probability_note(decided)


def _say_probability_note(decided) -> None:
    note = probability_note(decided)
    if note is not None:  # on stderr, as the other notes: stdout may be the decisions themselves
        print(f"note: {note}", file=sys.stderr)


def _strategy(args: argparse.Namespace):
    """The ``tf.distribute`` strategy of ``--strategy`` (None for ``default``: one device); says on the
    console how many devices encode."""
    if args.strategy == "default":
        return None
    if args.runtime == "onnx":
        raise ConfigError(
            f"--strategy {args.strategy} shares the batches among TensorFlow's devices; with --runtime onnx, ONNX "
            "Runtime uses the CPU's cores by itself: drop --strategy"
        )
    from .training.distribute import get_strategy

    strategy = get_strategy(args.strategy)
    devices = [device.rpartition("device:")[2] for device in strategy.extended.worker_devices]
    logging.getLogger("cosent_tf").info(
        "encoding on %d device%s (%s), each a share of every batch of %d texts",
        len(devices),
        "s" if len(devices) > 1 else "",
        ", ".join(devices),
        args.batch_size,
    )
    return strategy


def _search_build(args):
    from .inference.index import VectorIndex
    from .inference.matchers import SentenceEncoder

    parts = args.parts or []
    inputs = [args.model_dir, args.corpus, *parts, *map(part_record_path, parts), args.from_index]
    check_output_folder(args.index_dir, VectorIndex.FOLDER, args.overwrite, inputs, output_kinds())
    if parts and args.from_index is not None:
        raise ConfigError(
            "--parts and --from-index: an index is built from the parts of encode --shard or from the vectors of an "
            "earlier index, not both; give one"
        )
    built_from = "--parts" if parts else "--from-index" if args.from_index is not None else None
    if built_from and args.strategy != "default":
        raise ConfigError(
            f"--strategy {args.strategy} encodes on several devices, but {built_from} builds the index from vectors "
            "encoded already: drop --strategy" + (" (give it to encode --shard)" if parts else "")
        )
    if args.from_index is not None and args.precision != "float32":
        raise ConfigError(
            f"--precision {args.precision} is what the model computes in, but --from-index runs no model: drop it "
            "(--vector-precision says how the index stores its vectors)"
        )
    settings = _index_settings(args, args.index)
    corpus = read_lines(args.corpus, args.strict)  # a bad file is said before the model's load
    if args.from_index is not None:
        index = _build_from_index(args, corpus, inputs, settings)
        source = f"the vectors of {args.from_index} (no encoding)"
    elif parts:
        SentenceEncoder.check_folder(args.model_dir, runtime=args.runtime)
        checked = check_parts(parts, args.corpus, len(corpus), args.model_dir, args.dim)
        record = checked[0][1]
        index = _index_of_vectors(
            args, inputs, corpus, record.dim, lambda into: assemble_parts(checked, into), record.model_width, settings
        )
        source = f"the {len(parts)} part{'s' if len(parts) > 1 else ''} of {args.corpus}"
    else:
        encoder = SentenceEncoder.load(args.model_dir, args.precision, runtime=args.runtime, strategy=_strategy(args))
        index = encoder.build_index(
            corpus, args.batch_size, dim=args.dim, precision=args.vector_precision, kind=args.index, **settings
        )
        index.save(args.index_dir, args.overwrite, inputs)
        source = args.corpus
    print(
        f"{args.index_dir}: {len(index)} vectors of dimension {index.dimension} from {source}, "
        f"{_index_described(index)}"
    )


def _build_from_index(args: argparse.Namespace, corpus: list[str], inputs: list, settings: dict):
    """``search build --from-index``: the index of ``corpus`` built, and saved, from the float32
    vectors of the earlier index ``args.from_index`` (cut to ``--dim``), once that index is found to
    hold ``corpus``'s lines, encoded by ``args.model_dir``'s weights; the model is not loaded."""
    from .inference.index import VectorIndex
    from .inference.matchers import SentenceEncoder
    from .inference.vectors import check_dim

    spec = SentenceEncoder.check_folder(args.model_dir, runtime=args.runtime)
    earlier = VectorIndex.load(args.from_index)
    earlier.check_model(
        args.model_dir, f"pass the model that built {args.from_index}, or leave --from-index out to encode the corpus"
    )
    for number, (line, text) in enumerate(zip(corpus, earlier.texts), start=1):
        if line != text:
            raise DataError(
                args.corpus,
                f"{line!r} differs from {args.from_index}'s text {number} ({text!r}): give the corpus "
                f"{args.from_index} was built from, or leave --from-index out to encode this one",
                line=number,
            )
    if len(corpus) != len(earlier):
        raise DataError(
            args.corpus,
            f"has {len(corpus)} lines, but {args.from_index} holds {len(earlier)} texts (its first "
            f"{min(len(corpus), len(earlier))} are these lines): give the corpus {args.from_index} was built from, "
            "or leave --from-index out to encode this one",
        )
    dim = None if args.dim == earlier.dimension else args.dim
    if dim is not None and dim > earlier.dimension:
        model_width = earlier.model_width or earlier.dimension
        raise ConfigError(
            f"--dim {dim}: {args.from_index} holds vectors of {earlier.dimension} dimensions"
            + (f" (cut from the model's {model_width})" if model_width != earlier.dimension else "")
            + f", and a cut keeps at most those: ask for at most {earlier.dimension}, or leave --from-index out to "
            "encode the corpus at that width"
        )
    if dim is not None:  # the model's widths warn of a cut it was not trained for, as encoding at dim does
        check_dim(dim, earlier.model_width or earlier.dimension, spec.matryoshka_dims, args.model_dir)
    return _index_of_vectors(
        args,
        inputs,
        corpus,
        dim or earlier.dimension,
        lambda into: earlier.copy_vectors(into, dim),
        earlier.model_width,
        settings,
    )


def _index_of_vectors(
    args: argparse.Namespace,
    inputs: list,
    corpus: list[str],
    dimension: int,
    fill: Callable[[np.ndarray], np.ndarray],
    model_width: Optional[int],
    settings: dict,
):
    """The index of ``corpus`` over float32 vectors encoded already, saved in ``args.index_dir``:
    ``fill`` puts them into the folder being written (its vectors.npy, memory-mapped), where the
    index keeps them, so that they are on the disk once."""
    from .inference.index import VectorIndex

    with VectorIndex.writing(args.index_dir, args.overwrite, inputs) as folder:
        index = VectorIndex.build(
            fill(folder.new_vectors(len(corpus), dimension)),
            corpus,
            model_dir=args.model_dir,
            precision=args.vector_precision,
            kind=args.index,
            model_width=model_width,
            **settings,
        )
        folder.save(index)
    return index


def _index_described(index) -> str:
    """An index's precision and search structure, as a command says them."""
    kind = {"exact": "exact search", "hnsw": "an HNSW graph", "ivf": "IVF lists"}.get(index.kind, index.kind)
    stored = {"float32": "float32", "int8": "int8 codes", "binary": "sign bits"}.get(index.precision, index.precision)
    rescored = "" if index.precision == "float32" and index.kind == "exact" else ", hits re-scored by float32 vectors"
    return f"{stored}, {kind}{rescored}"


# The options of an approximate index's settings: (option, the setting's name, the kind it belongs to).
ANN_OPTIONS = (
    ("--hnsw-m", "m", "hnsw"),
    ("--ef-construction", "ef_construction", "hnsw"),
    ("--ef-search", "ef_search", "hnsw"),
    ("--nlist", "nlist", "ivf"),
    ("--nprobe", "nprobe", "ivf"),
)


def _index_settings(args: argparse.Namespace, kind: Optional[str]) -> dict:
    """The approximate structure's settings given on the command line, as
    :meth:`~cosent_tf.inference.index.VectorIndex.build` takes them; an option of another kind of
    index than ``kind`` (the one built or searched), or with no ``--index`` to say which, is refused."""
    given = {}
    for option, name, owner in ANN_OPTIONS:
        value = getattr(args, name, None)
        if value is None:
            continue
        if kind is None:  # chosen by the corpus's size, it might not be the structure the option sets
            raise ConfigError(f"{option} is a setting of an {owner} index: pass --index {owner} with it")
        if kind != owner:
            raise ConfigError(
                f"{option} is a setting of an {owner} index, and this index is {kind}: drop it"
                + (f", or pass --index {owner}" if args.command == "search" and args.action == "build" else "")
            )
        given[name] = value
    return given


def _search_query(args):
    from .inference.index import VectorIndex
    from .inference.matchers import PairScorer, SentenceEncoder

    _check_rerank_top(args)
    if args.rerank_top is not None and args.rerank_top < args.top_k:
        raise ConfigError(
            f"--rerank-top {args.rerank_top} is below --top-k {args.top_k}: the hits past {args.rerank_top} "
            "would have no interaction score; rerank at least --top-k"
        )
    inputs = [args.index_dir, args.queries, args.model_dir, args.rerank]
    check_output_file(args.output, inputs, output_kinds(), args.overwrite)
    said = summary_stream(args.output)
    index = VectorIndex.load(args.index_dir)
    if args.rescore_multiplier is not None and index.precision == "float32" and index.kind == "exact":
        raise ConfigError(
            f"--rescore-multiplier: {args.index_dir} is searched exactly over float32 vectors, so there are no "
            "candidates to re-score; it is for an index of int8 or binary vectors, or an approximate one"
        )
    if args.dim is not None and args.dim != index.dimension:
        raise ConfigError(
            f"--dim {args.dim}: {args.index_dir} holds vectors of {index.dimension} dimensions; query it without "
            f"--dim (its own width is used), or build an index with --dim {args.dim}"
        )
    settings = _index_settings(args, index.kind)
    model_dir = index.model_path(args.model_dir)
    check_output_file(args.output, [model_dir], output_kinds(), args.overwrite)  # the model the index names
    if args.rerank is not None:  # a wrong folder is said before any weights load
        PairScorer.check_folder(args.rerank, "--rerank", args.runtime)
    queries = read_lines(args.queries, args.strict)  # a bad file is said before the model's load
    encoder = SentenceEncoder.load(model_dir, args.precision, runtime=args.runtime)
    searched = dict(dim=args.dim, rescore_multiplier=args.rescore_multiplier, **settings)
    if args.rerank is None:
        hits = encoder.search(queries, index, args.top_k, args.batch_size, **searched)
        how = "by cosine"
    else:
        scorer = PairScorer.load(args.rerank, args.precision, option="--rerank", runtime=args.runtime)
        rerank_top = rerank_depth(args.top_k, args.rerank_top)
        hits = encoder.search(
            queries, index, args.top_k, args.batch_size, rerank=scorer, rerank_top=rerank_top, **searched
        )
        how = f"reranked by {args.rerank} from the top {rerank_top} by cosine"
    write_text(
        args.output,
        "".join(
            json_text({"query": query, "hits": [hit._asdict() for hit in row]}, ensure_ascii=False) + "\n"
            for query, row in zip(queries, hits)
        ),
    )
    if not (index.precision == "float32" and index.kind == "exact"):
        multiplier = RESCORE_MULTIPLIER if args.rescore_multiplier is None else args.rescore_multiplier
        how += f" ({_index_described(index)}: {multiplier} times the hits asked for as candidates)"
    print(f"{args.output}: top {args.top_k} of {len(index)} for {len(queries)} queries, {how}", file=said)


def _check_rerank_top(args: argparse.Namespace) -> None:
    if args.rerank_top is not None and args.rerank is None:
        raise ConfigError(
            "--rerank-top is how many cosine hits --rerank re-scores: pass --rerank INTERACTION_DIR with it"
        )


def rank_range(text: str) -> tuple[int, int]:
    """An argparse type: ``LO-HI``, a window of 1-based ranks, both included (``mine --range``).

    Args:
        text: the option's value as typed.

    Returns:
        ``(lo, hi)``.

    Raises:
        argparse.ArgumentTypeError: not two whole numbers joined by ``-``, a rank below 1, or HI below LO.

    Example:
        >>> rank_range("10-50")
        (10, 50)
    """
    lo_text, dash, hi_text = text.partition("-")
    lo_text, hi_text = lo_text.strip(), hi_text.strip()
    if not (dash and lo_text.isascii() and lo_text.isdigit() and hi_text.isascii() and hi_text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected LO-HI, two whole numbers such as 10-50, got {text!r}")
    lo, hi = int(lo_text), int(hi_text)
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"ranks start at 1 and HI may not be below LO, got {text}")
    return lo, hi


def _mine(args: argparse.Namespace) -> None:
    from .data.groups import read_group_file
    from .inference.index import VectorIndex
    from .inference.matchers import PairScorer, SentenceEncoder
    from .mining import (
        check_index_model,
        check_output_name,
        default_corpus,
        mine_hard_negatives,
        rank_window,
        summary_paths,
    )

    if args.rescore_margin is not None and args.rescore is None:
        raise ConfigError("--rescore-margin is the margin of --rescore's guard: pass --rescore INTERACTION_DIR with it")
    check_output_name(args.output, args.output_format)
    inputs = [args.data, args.model, args.corpus, args.rescore]
    for path in (args.output, *summary_paths(args.output)):
        check_output_file(path, inputs, output_kinds(), args.overwrite)
    said = summary_stream(args.output)
    # Bad input files, and a window the corpus cannot fill, are said before any model loads.
    data = read_group_file(args.data, _file_format(args), args.strict)
    corpus: Optional[VectorIndex | list[str]] = None
    if args.corpus is not None:
        corpus = VectorIndex.load(args.corpus) if os.path.isdir(args.corpus) else read_lines(args.corpus, args.strict)
    named = args.corpus or f"the corpus of {args.data}'s distinct second texts"
    try:
        rank_window(args.range, len(corpus) if corpus is not None else len(default_corpus(data)))
    except ConfigError as error:
        raise ConfigError(f"--range {args.range[0]}-{args.range[1]}: {named}: {error}") from None
    SentenceEncoder.check_folder(args.model, "--model", args.runtime)
    if args.rescore is not None:
        PairScorer.check_folder(args.rescore, "--rescore", args.runtime)
    if isinstance(corpus, VectorIndex):
        check_index_model(corpus, os.path.abspath(args.model))
    encoder = SentenceEncoder.load(args.model, args.precision, option="--model", runtime=args.runtime)
    rescorer = (
        None
        if args.rescore is None
        else PairScorer.load(args.rescore, args.precision, option="--rescore", runtime=args.runtime)
    )
    mined = mine_hard_negatives(
        encoder,
        data,
        corpus,
        rank_range=args.range,
        margin=args.margin,
        num_negatives=args.num_negatives,
        sampling=args.sampling,
        seed=args.seed,
        rescorer=rescorer,
        rescore_margin=args.rescore_margin or 0.0,
        batch_size=args.batch_size,
    )
    if args.corpus is not None:
        mined.settings["corpus"] = os.path.abspath(args.corpus)
    print(mined.summary_table(), file=sys.stderr)
    output, json_path, png_path = mined.write(args.output, args.output_format, args.overwrite)
    what = "examples (query, pos, neg)" if args.output_format == "tuples" else "examples as labelled pairs"
    print(f"{output}: {len(mined)} {what}; the summary in {json_path} and {png_path}", file=said)


def _export(args):
    if args.keras == 3:
        # as train --keras 3: nothing imported so far holds Keras 2, and importing cosent_tf.keras3
        # chooses Keras 3 for the process, on which the export modules then build the model
        import cosent_tf.keras3  # noqa: F401
    from .export.huggingface import export_hf
    from .export.onnx_export import export_onnx
    from .export.savedmodel import export_saved_model

    check_folder_apart(args.output_dir, [args.model_dir])
    check_not_in_tool_folder(args.output_dir, output_kinds())  # the rest is checked by the export
    if args.format != "onnx" and (args.quantize is not None or args.check is not None):
        raise ConfigError("--quantize and --check are for --format onnx")
    if args.format == "onnx":
        if args.precision != "float32":
            raise ConfigError("--precision is for --format savedmodel; for a smaller ONNX file use --quantize int8")
        if args.inputs != "strings":
            raise ConfigError(
                "--inputs is for --format savedmodel; an ONNX export takes token ids and carries its tokenizer"
            )
        # a bad file is said before the model's load
        check_pairs = None if args.check is None else _labelled_pairs(args.check, args, PairFileFormat())
        exported = export_onnx(
            args.model_dir,
            args.output_dir,
            args.overwrite,
            args.quantize,
            args.check,
            check_pairs=check_pairs,
            dim=args.dim,
        )
        print(f"{args.output_dir}: ONNX export ({exported.layout}): {', '.join(exported.files)}{_cut_to(args)}")
        if exported.reason is not None:
            print(f"  sentence-transformers cannot load it: {exported.reason}")
        if exported.check is not None:
            check = exported.check
            for precision in exported.files.values():
                figures = ", ".join(f"{name} {value:.2f}" for name, value in check[precision].items())
                print(f"  {precision} on {args.check} ({check['pairs']} pairs): {figures}")
        return
    if args.format == "hf":
        if args.precision != "float32":
            raise ConfigError("--precision is for --format savedmodel; a Hugging Face folder holds float32 weights")
        if args.inputs != "strings":
            raise ConfigError("--inputs is for --format savedmodel; a Hugging Face folder carries its tokenizer")
        written = export_hf(args.model_dir, args.output_dir, args.overwrite, dim=args.dim)
        print(f"{args.output_dir}: Hugging Face folder ({written}){_cut_to(args)}")
        return
    signatures = export_saved_model(
        args.model_dir, args.output_dir, args.overwrite, args.precision, args.inputs, dim=args.dim
    )
    print(f"{args.output_dir}: SavedModel with signatures {', '.join(signatures)}{_cut_to(args)}")


def _cut_to(args: argparse.Namespace) -> str:
    """What an export says of ``--dim``."""
    return "" if args.dim is None else f"; vectors cut to their first {args.dim} dimensions, renormalised"


def _train(args):
    task = args.name or os.path.splitext(os.path.basename(args.train_file))[0]
    _run_training(run_config(args, task=task), args.overwrite, args.print_config)


def _file_format(args: argparse.Namespace) -> PairFileFormat:
    return PairFileFormat(args.file_format, args.text_a_field, args.text_b_field, args.label_field)


def _labelled_pairs(path: str, args: argparse.Namespace, file_format: Optional[PairFileFormat] = None):
    """The labelled pairs of ``path`` as ``evaluate`` and ``calibrate`` read them: a pair file as it is,
    a file of queries with positives (and negatives) as the labelled pairs training scores.
    ``file_format``: for a command without the file-format options (default: theirs)."""
    from .data.groups import GroupData, read_group_file

    pairs = read_group_file(path, file_format or _file_format(args), args.strict)
    if isinstance(pairs, GroupData):  # scored as training scores them: each text against its anchor
        read_as = pairs.notes[0] if pairs.notes else path
        print(
            f"{read_as}; scored as labelled pairs: (anchor, positive) 1 and (anchor, negative) 0, and an example "
            "without negatives (anchor, another example's positive) 0",
            file=sys.stderr,
        )
        pairs = pairs.labelled_pairs(seed=0)
    return pairs


def _check_calibration_folder(model_dir: str):
    """The description of ``model_dir``, which ``calibrate`` writes its decision into: a cosent-tf
    model folder. An export or a Hugging Face folder is refused, saying what to calibrate instead."""
    from .exports import EXPORT_RECORD
    from .io import read_json
    from .models.spec import SPEC_FILE, how_to_calibrate, hugging_face_format, read_spec

    if os.path.isdir(model_dir) and not os.path.exists(os.path.join(model_dir, SPEC_FILE)):
        record_path = os.path.join(model_dir, EXPORT_RECORD)
        if os.path.isfile(record_path):
            source = read_json(record_path, "cosent-tf's record of an export").get("model_dir", "MODEL_DIR")
            raise ConfigError(
                f"{model_dir}: is an export of the cosent-tf model folder {source}, and an export is written whole "
                f"from its model folder: calibrate that folder (cosent-tf calibrate {source} FILE), then export it "
                "again; the export carries its decision"
            )
        if hugging_face_format(model_dir) is not None:
            raise ConfigError(
                f"{model_dir}: is a Hugging Face folder, not a cosent-tf model folder, and cosent-tf writes nothing "
                "into another program's folder: calibrate the cosent-tf model folder it was exported from, or fit a "
                f"decision without saving it: {how_to_calibrate(model_dir)}"
            )
    return read_spec(model_dir)


def _threshold_changes(before, after) -> str:
    """The thresholds of two decisions side by side, per rule (``none`` where one has none)."""
    from .calibration import RULES

    def shown(decision, rule: str) -> str:
        if decision is None or decision.thresholds is None or rule not in decision.thresholds:
            return "none"
        return format_threshold(decision.thresholds[rule])

    return ", ".join(f"{rule} {shown(before, rule)} -> {shown(after, rule)}" for rule in RULES)


def _calibrate(args: argparse.Namespace) -> None:
    from .calibration import DECISION_FILE, check_decision_labels
    from .inference.matchers import MATCHERS
    from .inference.model_dir import read_model_decision

    spec = _check_calibration_folder(args.model_dir)
    pairs = _labelled_pairs(args.file, args)  # a bad file is said before the model's load
    if pairs.label_kind == "nli":
        raise DataError(
            args.file,
            "its labels are NLI words (entailment, neutral, contradiction), not 0/1 or graded similarity, so no "
            "match decision can be fitted on them; give 0/1 or graded labels",
        )
    graded = pairs.label_kind != "binary"
    check_decision_labels(pairs.labels, args.file, graded, args.cut)  # said before the model loads
    try:
        before = read_model_decision(args.model_dir, spec.kind, spec.threshold)
        unusable = None
    except ConfigError as error:
        before, unusable = None, str(error)
    # without its decision: calibrate is how a decision.json that load refuses (fitted for other
    # weights, edited by hand) gets replaced
    matcher = MATCHERS[spec.kind].load(args.model_dir, with_decision=False)
    decision = matcher.calibrate(
        pairs.texts_a,
        pairs.texts_b,
        pairs.labels,
        os.path.abspath(args.file),
        graded=graded,
        cut=args.cut,
        rule=args.rule,
        save=True,
        batch_size=args.batch_size,
    )
    print(f"{os.path.join(args.model_dir, DECISION_FILE)}: the match decision of {args.model_dir}")
    for line in decision.summary():
        print(f"  {line}")
    for message in decision.fit_warnings():
        logging.getLogger("cosent_tf").warning("%s", message)
    if not decision.binary:
        print(
            "  no match decision: graded labels say how alike two texts are, not whether they match; pass --cut "
            "LABEL (a label above LABEL is a match) for thresholds and a probability too"
        )
    if unusable is not None:
        print(f"replaced a decision.json that could not be used: {unusable}")
    elif before is not None:
        print(f"thresholds before -> after: {_threshold_changes(before, decision)}")


def _evaluate(args):
    from .calibration import decision_metrics, decision_warnings
    from .data.retrieval import read_retrieval_files
    from .evaluation import evaluate_pairs, retrieval_by, retrieval_with_rerank
    from .inference.matchers import PairScorer, load_matcher
    from .models.kinds import get_kind
    from .models.spec import how_to_calibrate, read_spec

    beir = [args.queries, args.corpus, args.qrels]
    if any(beir) and not all(beir):
        raise CosentError("--queries, --corpus and --qrels go together: pass all three")
    if not args.file and not any(beir):
        raise CosentError("nothing to evaluate: pass a pair FILE, or --queries, --corpus and --qrels")
    _check_rerank_top(args)
    if args.rerank is not None and not (args.retrieval or any(beir)):
        raise ConfigError(
            "--rerank re-orders retrieval results: pass --retrieval (with a pair FILE), or --queries, "
            "--corpus and --qrels"
        )
    rerank_top = RERANK_TOP if args.rerank_top is None else args.rerank_top
    inputs = [args.model_dir, args.file, *beir, args.rerank]
    outputs = evaluation_outputs(args.output) if args.output else ()
    if args.reliability is not None and not args.file:
        raise ConfigError("--reliability draws the pairs of a labelled pair FILE: pass one")
    if args.reliability is not None and args.dim is not None:
        raise ConfigError(
            f"--reliability with --dim {args.dim}: the diagram draws the model's calibration map, fitted on cosines "
            "of its full width, which does not hold for cut vectors; drop one of them"
        )
    for path in [*outputs[: 2 if args.file else 1], args.reliability]:  # the .tsv holds the pair file's scores
        if path is not None:
            check_output_file(path, inputs, output_kinds(), args.overwrite)
    from .inference.onnx_model import read_onnx_spec

    spec = read_onnx_spec(args.model_dir) if args.runtime == "onnx" else read_spec(args.model_dir)
    if (args.retrieval or any(beir)) and not get_kind(spec.kind).sentence_vectors:
        raise CosentError(
            f"{args.model_dir}: retrieval metrics need a feature model (sentence vectors), this one is {spec.kind}"
        )
    _check_dim_kind(args)
    if args.rerank is not None:  # a wrong folder is said before any weights load
        PairScorer.check_folder(args.rerank, "--rerank", args.runtime)
    # Bad input files are said before the model's load.
    pairs = _labelled_pairs(args.file, args) if args.file else None
    retrieval_data = read_retrieval_files(*beir) if any(beir) else None
    matcher = load_matcher(args.model_dir, args.precision, runtime=args.runtime)
    if args.reliability is not None:
        assert pairs is not None
        _check_reliability(args, pairs.labels, matcher.decision)
    scorer = (
        None
        if args.rerank is None
        else PairScorer.load(args.rerank, args.precision, option="--rerank", runtime=args.runtime)
    )
    dim = _width(args, matcher)
    # A decision fitted on full-width cosines says nothing of cut vectors' cosines.
    decision = matcher.decision if dim is None else None
    metrics, lines = {"model_dir": args.model_dir}, None
    if dim is not None:
        metrics["dim"] = dim
    if pairs is not None:
        pair_metrics, scores, predictions = evaluate_pairs(
            matcher,
            pairs,
            args.threshold,
            args.retrieval,
            args.batch_size,
            scorer if args.retrieval else None,
            rerank_top,
            dim=dim,
        )
        metrics.update(file=args.file, **pair_metrics)
        if "retrieval" in pair_metrics:
            _say_own_texts_excluded("--retrieval", args.file, pair_metrics["retrieval"])
        if pairs.label_kind == "binary" and predictions is None:
            if dim is None:
                print(
                    f"no accuracy: {args.model_dir} has no match decision; pass --threshold, or fit one: "
                    f"{how_to_calibrate(args.model_dir)}",
                    file=sys.stderr,
                )
            else:
                print(
                    f"no accuracy at a shipped threshold: {args.model_dir}'s thresholds were fitted on cosines of its "
                    f"full {matcher.width} dimensions, not of vectors cut to {dim}; this file's own best threshold "
                    "follows, or pass --threshold",
                    file=sys.stderr,
                )
        measured = decision_metrics(scores, pairs.labels, decision)
        if measured:
            metrics["decision"] = measured
            print("\n".join(_decision_report(measured, decision, dim)), file=sys.stderr)
        warnings = decision_warnings(measured, args.file, len(pairs))
        if args.threshold is not None and "accuracy" in pair_metrics:  # a threshold the decision does not hold
            warnings += decision_warnings(pair_metrics, args.file, len(pairs), "--threshold")
        for message in warnings:
            logging.getLogger("cosent_tf").warning("%s", message)
        if args.reliability is not None:
            _plot_reliability(args, scores, pairs.labels, matcher.decision)
        columns = [pairs.texts_a, pairs.texts_b, [f"{y:g}" for y in pairs.labels], [f"{x:.6f}" for x in scores]]
        if predictions is not None:
            columns.append([str(p) for p in predictions])
        lines = ["\t".join(row) for row in zip(*columns)]
    if retrieval_data is not None:
        queries, corpus, relevant = retrieval_data

        def encode(texts):
            return matcher.encode(texts, args.batch_size, dim=dim)

        if scorer is None:
            metrics["beir"] = retrieval_by(encode, queries, corpus, relevant, source=args.qrels)
        else:
            metrics["beir"], metrics["beir_reranked"] = retrieval_with_rerank(
                encode, scorer, queries, corpus, relevant, rerank_top, batch_size=args.batch_size, source=args.qrels
            )
        _say_own_texts_excluded("--queries", args.queries, metrics["beir"])
    print(json_text(metrics, indent=2, ensure_ascii=False))
    if outputs:
        write_json(outputs[0], metrics)
        if lines is not None:
            write_text(outputs[1], "".join(line + "\n" for line in lines))


def _say_own_texts_excluded(option: str, path: str, retrieval: dict) -> None:
    """Say how many queries of a retrieval test had their own text taken out of their rankings
    (cosent_tf.evaluation.without_own_text), when any had."""
    own, only = retrieval["own_text_excluded"], retrieval["own_text_only_left_out"]
    if not own:
        return
    given = retrieval["queries"] + only
    line = (
        f"{option} {path}: {own} of {given} queries have their own text in the corpus; it is left out of their "
        "rankings, since a query's own text is not an answer to it"
    )
    if only:
        line += f"; left out of the metrics, having no other relevant text: {only} of them"
    print(line, file=sys.stderr)


def _check_reliability(args: argparse.Namespace, labels: np.ndarray, decision) -> None:
    """Refuse ``--reliability`` before the pairs are scored when there is nothing to draw: no
    matches to compare with (graded labels without a cut) or no calibration map."""
    from .calibration import label_matches
    from .models.spec import how_to_calibrate

    if label_matches(labels, None if decision is None else decision.cut) is None:
        raise ConfigError(
            f"--reliability {args.reliability}: {args.file}'s labels are graded ({float(np.min(labels)):g} to "
            f"{float(np.max(labels)):g}), and {args.model_dir}'s decision has no cut that makes them match / no "
            f"match; a reliability diagram needs matches: {how_to_calibrate(args.model_dir)}, with a cut (--cut "
            "LABEL, or cut=LABEL in Python: a label above LABEL is a match)"
        )
    if decision is None or decision.calibration is None:
        why = "it has no match decision" if decision is None else (decision.note or "its decision has no map")
        raise ConfigError(
            f"--reliability {args.reliability}: {args.model_dir} has no calibration map to draw ({why}); fit one "
            f"on labelled pairs: {how_to_calibrate(args.model_dir)}"
        )


def _plot_reliability(args: argparse.Namespace, scores: np.ndarray, labels: np.ndarray, decision) -> None:
    from .calibration import label_matches, plot_reliability, reliability_curves

    matches = label_matches(labels, None if decision is None else decision.cut)
    assert matches is not None
    plot_reliability(
        args.reliability, reliability_curves(scores, matches, decision), f"{args.model_dir} on {args.file}"
    )
    print(f"{args.reliability}: the reliability diagram of {len(matches)} pairs", file=sys.stderr)


def _decision_report(measured: dict, decision, dim: Optional[int] = None) -> list[str]:
    """Lines for people of what ``evaluate`` measured of the model's match decision: accuracy and F1
    at the shipped thresholds next to the best ones on the file itself, and the calibration's
    log-loss, Brier score and ECE next to the ECE of the score read as a probability. At a width
    (``dim``) only the file's own: the shipped decision was fitted on full-width cosines."""
    from .calibration import majority_said

    if dim is not None:
        heading = f"match decision at --dim {dim} (the shipped one was fitted on full-width cosines, so not applied):"
    elif decision is None:
        heading = "match decision:"
    else:
        heading = f"match decision (fitted on {decision.fitted_on.get('file')}):"
    lines = [heading]
    for name, threshold in (("accuracy", "threshold"), ("f1", "f1_threshold")):
        # an accuracy is read against that of answering every pair alike
        baseline = f"; {majority_said(measured)}" if name == "accuracy" else ""
        if name + "_oracle" not in measured:
            continue
        best = (
            f"{measured[name + '_oracle']:.4f} at this file's best {format_threshold(measured[threshold + '_oracle'])}"
        )
        if name in measured:
            shipped = format_threshold(measured[threshold])
            lines.append(f"  {name} {measured[name]:.4f} at the shipped threshold {shipped}; {best}{baseline}")
        else:
            lines.append(f"  {name}: no shipped threshold; {best}{baseline}")
    if "ece" in measured:
        lines.append(
            f"  probability ({measured['calibration']} calibration): log-loss {measured['log_loss']:.4f}, Brier "
            f"{measured['brier']:.4f}, ECE {measured['ece']:.4f} (the score read as a probability: ECE "
            f"{measured['ece_uncalibrated']:.4f})"
        )
    elif "ece_uncalibrated" in measured:
        unmapped = measured["ece_uncalibrated"]
        lines.append(f"  no calibration map; the score read as a probability has ECE {unmapped:.4f}")
    if "expected_label_mae" in measured:
        lines.append(f"  expected label: mean absolute error {measured['expected_label_mae']:.4f}")
    return lines


def evaluation_outputs(output: str) -> tuple[str, str]:
    """The metrics file and the scores file of ``evaluate --output OUTPUT``: a name ending in
    ``.json`` is the metrics file, with the scores beside it (``eval.json``: ``eval.json`` and
    ``eval.tsv``); any other name is a prefix (``eval``: ``eval.json`` and ``eval.tsv``).

    Args:
        output: the ``--output`` argument.

    Returns:
        (the metrics file's path, the scores file's path).

    Example:
        >>> evaluation_outputs("runs/eval.json")
        ('runs/eval.json', 'runs/eval.tsv')
    """
    if output.lower().endswith(".json"):
        return output, output[: -len(".json")] + ".tsv"
    return output + ".json", output + ".tsv"


def argument_parser() -> argparse.ArgumentParser:
    """The ``cosent-tf`` parser; building it imports no TensorFlow (the tables its options list
    are plain data), so ``--help`` answers at once."""
    parser = argparse.ArgumentParser(
        prog="cosent-tf",
        description="Train on your own pair files, and evaluate and use a trained model folder "
        "(a training run's OUTPUT_DIR/model).",
    )
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, handler, help_text, parent=commands):
        sub = parent.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    def inference_options(sub):
        sub.add_argument("--batch-size", type=number_in_range(int, 1), default=64)
        sub.add_argument(
            "--precision",
            default="float32",
            choices=["float32", "bf16", *ONNX_QUANTIZATIONS],
            help="bf16: compute in bfloat16 (the tensorflow runtime); int8: the export's int8 file (--runtime onnx)",
        )
        sub.add_argument(
            "--runtime",
            default="tensorflow",
            choices=list(RUNTIMES),
            help="onnx: run the ONNX file of an export written by `export --format onnx` with ONNX Runtime "
            "(MODEL_DIR is that export; needs the [onnx] extra)",
        )
        sub.add_argument("--strict", action="store_true", help="an empty line or text is an error, not a warning")

    def dim_option(sub, what, after=""):
        sub.add_argument(
            "--dim",
            type=number_in_range(int, 1),
            metavar="D",
            help=f"{what} the first D dimensions of each vector, renormalised to unit length (a model trained with "
            f"--matryoshka-dims loses least at its widths; another width works, with a warning){after}",
        )

    def vector_precision_option(sub, what):
        sub.add_argument(
            "--vector-precision",
            default=VECTOR_PRECISIONS[0],
            choices=list(VECTOR_PRECISIONS),
            help=f"{what}: float32 (default); int8, one byte a dimension, 256 steps between its minimum and "
            "maximum over the vectors; binary, one bit a dimension (its sign), packed 8 to a byte",
        )

    def strategy_option(sub):
        sub.add_argument(
            "--strategy",
            default="default",
            choices=["default", "mirrored"],
            help="mirrored: encode on every local device (each GPU; without one, the logical CPU devices of "
            "COSENT_TF_CPU_DEVICES=N), each a share of every batch, as training's --strategy mirrored; the vectors "
            "are one device's (default: one device)",
        )

    def ann_options(sub, building):
        setting = "the index's own (recorded in its index.json)"
        helps = {
            "--hnsw-m": f"with --index hnsw: the links each vector keeps in the graph (default: {ann.HNSW_M}); "
            "more: better recall, a larger index",
            "--ef-construction": "with --index hnsw: the candidates weighed for each vector's links while building "
            f"(default: {ann.HNSW_EF_CONSTRUCTION})",
            "--ef-search": "hnsw: the candidates the graph search keeps, never fewer than the candidates asked for; "
            f"more: better recall, slower (default: {ann.HNSW_EF_SEARCH if building else setting})",
            "--nlist": "with --index ivf: the k-means cells, each a list of vectors (default: about 4 sqrt(count), "
            f"at most count/{ann.IVF_TRAIN_PER_LIST})",
            "--nprobe": f"ivf: the lists searched per query (default: {ann.IVF_NPROBE if building else setting})",
        }
        for option, name, _ in ANN_OPTIONS:
            if building or name in ("ef_search", "nprobe"):
                sub.add_argument(option, dest=name, type=number_in_range(int, 1), metavar="N", help=helps[option])

    def overwrite_option(sub, replaced="OUTPUT if it exists"):
        sub.add_argument("--overwrite", action="store_true", help=f"replace {replaced} (refused without this)")

    def rerank_options(sub, reported):
        sub.add_argument(
            "--rerank",
            metavar="INTERACTION_DIR",
            help=f"an interaction model folder that re-orders each query's top cosine hits by its score: {reported}",
        )
        sub.add_argument(
            "--rerank-top",
            type=number_in_range(int, 1),
            metavar="K",
            help=f"how many cosine hits per query --rerank re-scores (default: {RERANK_TOP})",
        )

    sub = command(
        "train",
        _train,
        "Train a matcher on your own pair files (TSV, CSV or JSONL; labels 0/1, graded scores or NLI words) "
        "with the engine of the benchmark scripts: the same outputs, resume and checks.",
    )
    add_run_options(sub, OWN_FILES, MODEL_KIND, FILE_FORMAT, ENGINE, overwrite=True)
    sub.add_argument("--name", help="the task's name in outputs (default: the train file's name)")

    sub = command(
        "evaluate",
        _evaluate,
        "Spearman, Pearson and (binary labels) accuracy at the model's tuned threshold on a pair file, with "
        "the model's match decision measured (accuracy and F1 at its thresholds next to the file's best and "
        "to the accuracy of answering every pair with the majority label, log-loss, Brier score and ECE of its "
        "probability) under decision, and a warning when the decision does no better than that majority or "
        "decides (nearly) every pair alike; --retrieval adds Recall@1/5/10, "
        "MRR@10 and nDCG@10 for a feature model, and --rerank those of the same search with each query's top "
        "hits re-ordered by an interaction model.",
    )
    sub.add_argument("model_dir")
    sub.add_argument(
        "file",
        nargs="?",
        help="pair file (TSV, CSV or JSONL, as for train); a file of queries with positives and negatives (as "
        "--loss mnrl trains on) is scored as labelled pairs, each text against its query",
    )
    sub.add_argument(
        "--threshold", type=finite_number, help="for accuracy (default: the model folder's tuned one)", metavar="SCORE"
    )
    sub.add_argument(
        "--retrieval",
        action="store_true",
        help="rank, for each first text with a positive pair, every distinct second text other than the first "
        "text itself (equal once case, width, spaces and punctuation are set aside, as mine takes it): a query's "
        "own text is not an answer to it, and a query whose only match is itself is left out",
    )
    sub.add_argument("--queries", help="BEIR/MTEB-layout queries.jsonl (with --corpus and --qrels)")
    sub.add_argument("--corpus", help="BEIR/MTEB-layout corpus.jsonl")
    sub.add_argument("--qrels", help="BEIR/MTEB-layout qrels TSV (query-id, corpus-id, score)")
    rerank_options(sub, "that order's metrics come as retrieval_reranked (beir_reranked with --queries)")
    sub.add_argument(
        "--output",
        metavar="PREFIX|NAME.json",
        help="write the metrics to NAME.json and each pair with its label, score and 0/1 prediction to "
        "NAME.tsv beside it; a name not ending in .json is a prefix: PREFIX.json and PREFIX.tsv",
    )
    sub.add_argument(
        "--reliability",
        metavar="FILE.png",
        help="write the reliability diagram of FILE's pairs: the share that match against the probability, "
        "for the score read as a probability and for the model's calibration map (needs 0/1 labels, or "
        "a decision with a cut, and a calibration map)",
    )
    dim_option(
        sub,
        "score and search with",
        "; a feature model only. The shipped match decision was fitted at full width, so accuracy and F1 come at "
        "this file's own best thresholds (or --threshold)",
    )
    overwrite_option(sub, "the --output and --reliability files if they exist")
    add_run_options(sub, FILE_FORMAT)
    inference_options(sub)

    sub = command(
        "calibrate",
        _calibrate,
        "Fit a model folder's match decision on a labelled pair file (your own domain's pairs) without "
        "retraining, and write it into the folder as decision.json, replacing the one there: the thresholds "
        "best for accuracy and for F1, and a calibration map from score to the probability of a match "
        "(isotonic or Platt, whichever has the lower held-out log-loss); for graded labels also a map from "
        "score to the expected label. Prints the decision, its accuracy on FILE beside that of answering every "
        "pair with the majority label, and the thresholds before and after; warns when a threshold decides "
        "(nearly) every pair of FILE alike.",
    )
    sub.add_argument("model_dir", help="a cosent-tf model folder (a training run's OUTPUT_DIR/model)")
    sub.add_argument(
        "file",
        help="labelled pair file (TSV, CSV or JSONL, as for evaluate): 0/1 labels, or graded ones with --cut; "
        f"a calibration map needs at least {MIN_CALIBRATION_PAIRS} pairs, at least {MIN_PAIRS_PER_CLASS} of each class",
    )
    sub.add_argument(
        "--cut",
        type=finite_number,
        metavar="LABEL",
        help="for graded labels (STS-B's 0 to 5): a label above LABEL is a match; without it graded labels get "
        "only the expected-label map, no match decision",
    )
    sub.add_argument(
        "--rule",
        default=RULES[0],
        choices=RULES,
        help="whose threshold decides by default (similarity and its --decide, evaluate's predictions, the "
        "exports' decide, predict and decide in Python): the one best for accuracy or for F1 on FILE "
        f"(default: {RULES[0]})",
    )
    sub.add_argument("--batch-size", type=number_in_range(int, 1), default=64)
    sub.add_argument("--strict", action="store_true", help="an empty line or text is an error, not a warning")
    add_run_options(sub, FILE_FORMAT)

    sub = command(
        "encode",
        _encode,
        "Embed a text file (one sentence a line) into an .npy matrix; with --shard, one part of it, for search "
        "build --parts (N machines each encode a shard, one builds the index).",
    )
    sub.add_argument("model_dir")
    sub.add_argument("texts", help="UTF-8 text file, one sentence a line (row i of the output is line i)")
    sub.add_argument(
        "output",
        help=".npy file to write: one row per line, float32 (int8 or uint8 with --vector-precision); with int8 "
        "also NAME.ranges.npy beside NAME.npy, with --shard NAME.part.json",
    )
    sub.add_argument("--no-normalize", action="store_true", help="keep raw vectors instead of unit length")
    dim_option(sub, "write")
    vector_precision_option(sub, "how OUTPUT stores the vectors")
    sub.add_argument(
        "--int8-ranges",
        metavar="FILE.npy",
        help="with --vector-precision int8: the ranges to quantise with (float32, shape (2, D): each dimension's "
        "minimum, then maximum), such as an int8 index's ranges.npy or another encode's NAME.ranges.npy, so that "
        "these codes compare with those (default: the ranges of these vectors)",
    )
    sub.add_argument(
        "--shard",
        type=shard_spec,
        metavar="I/N",
        help="encode shard I (counted from 0) of N: lines floor(I*n/N)+1 to floor((I+1)*n/N) of the n of TEXTS, "
        "written as OUTPUT with its record NAME.part.json (TEXTS' digest, the model, the width, the vectors' "
        "digest) for search build --parts; float32 unit vectors only",
    )
    strategy_option(sub)
    overwrite_option(sub)
    inference_options(sub)

    sub = command(
        "similarity",
        _similarity,
        "Score two texts, or the pairs of a file. similarity MODEL_DIR TEXT_A TEXT_B prints the score "
        "(cosine, or the interaction model's score) and, when the model has a tuned threshold, 0/1 at it; "
        "two arguments are taken for texts only when neither names an existing file, holds a / or ends "
        "in .tsv, .txt, .data, .csv, .jsonl or .json (--texts says they are texts). "
        "similarity MODEL_DIR PAIRS [OUTPUT] reads a pair file in TSV (text_a<TAB>text_b[<TAB>...]), "
        "CSV or JSONL, labelled or not, and writes OUTPUT (default: stdout) in TSV: a TSV line as it "
        "is, a CSV or JSONL pair as text_a<TAB>text_b (tabs and line breaks in a text become spaces), "
        "then the score and the 0/1. --decide puts the model's match decision in place of the 0/1: "
        "match or no match, and the probability of a match when the decision has a calibration map.",
    )
    sub.add_argument("model_dir")
    sub.add_argument("pairs", metavar="PAIRS|TEXT_A", help="pair file, or the first text")
    sub.add_argument(
        "output", nargs="?", metavar="OUTPUT|TEXT_B", help="file to write (default: stdout), or the second text"
    )
    sub.add_argument("--texts", action="store_true", help="PAIRS|TEXT_A and OUTPUT|TEXT_B are two texts to score")
    sub.add_argument(
        "--decide",
        nargs="?",
        const=_OWN_RULE,
        type=decision_rule,
        metavar="RULE",
        help="after the score, match or no match at the threshold of RULE (accuracy or f1; default: the "
        "decision's own) and the probability of a match (9 decimals), from the model folder's decision.json; "
        "put it after the texts or files, or write --decide=RULE. Neither threshold is where the probability "
        "crosses 0.5: f1's is the score that maximises F1 on the pairs the decision was fitted on, which lies "
        "where the probability is about half that F1, so f1 decides matches at probabilities below 0.5; a note "
        "says how many pairs are decided against their probability",
    )
    dim_option(
        sub,
        "score the cosine of",
        "; a feature model only, without the 0/1 column or --decide (the model's threshold and decision were "
        "fitted at full width)",
    )
    overwrite_option(sub)
    add_run_options(
        sub,
        "file_format",
        "text_a_field",
        "text_b_field",
        overrides={
            "file_format": {"help": "default: from the extension (.csv: CSV; .jsonl .json: JSONL; any other: TSV)"}
        },
    )
    inference_options(sub)

    search = command("search", None, "Build a vector index of a corpus, or query one.")
    actions = search.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub = command(
        "build",
        _search_build,
        "Encode a corpus file (one text a line) into an index folder, or build it from vectors encoded already: "
        "the parts that encode --shard wrote (--parts), or an earlier index's (--from-index). The index keeps the "
        "float32 vectors; with --vector-precision int8 or binary it first searches their smaller codes, and with "
        "--index hnsw or ivf an approximate structure (faiss), then re-scores the candidates with the float32 vectors.",
        actions,
    )
    sub.add_argument("model_dir")
    sub.add_argument(
        "corpus",
        help="UTF-8 text file, one text a line (with --parts: the file the parts encoded; with --from-index: the "
        "file that index was built from)",
    )
    sub.add_argument("index_dir", help="a new or empty folder (or an earlier index, with --overwrite)")
    sub.add_argument("--overwrite", action="store_true", help="replace INDEX_DIR if it holds an earlier index")
    dim_option(sub, "index")
    vector_precision_option(sub, "how the index stores the vectors it searches first (it keeps float32 to re-score)")
    sub.add_argument(
        "--index",
        choices=list(INDEX_KINDS),
        help="exact: every vector scored; hnsw: a graph of neighbours; ivf: lists of k-means cells, a few of them "
        'searched (hnsw and ivf are approximate, and need the [ann] extra: pip install "cosent-tf[ann]"); '
        f"default: exact up to {EXACT_INDEX_LIMIT} vectors, hnsw above",
    )
    ann_options(sub, building=True)
    sub.add_argument(
        "--parts",
        nargs="+",
        metavar="PART.npy",
        help="build from the parts of encode --shard I/N instead of encoding: one for each shard 0 to N-1, each with "
        "its NAME.part.json, encoded from CORPUS by MODEL_DIR at one width (encode --shard 0/1 writes the whole "
        "corpus as one part)",
    )
    sub.add_argument(
        "--from-index",
        metavar="INDEX",
        help="build from the float32 vectors an earlier index keeps instead of encoding, to make another precision, "
        "kind or width of it: INDEX must hold CORPUS's lines, encoded by MODEL_DIR's weights; --dim at most its "
        "width (a shorter cut of its vectors, renormalised; default: its width)",
    )
    strategy_option(sub)
    inference_options(sub)
    sub = command(
        "query",
        _search_query,
        "Find the top-k corpus texts of each query line by exact cosine, or (--rerank) by an interaction "
        "model's score of the top --rerank-top by cosine; writes JSON lines.",
        actions,
    )
    sub.add_argument("index_dir")
    sub.add_argument("queries", help="UTF-8 text file, one query a line")
    sub.add_argument(
        "output",
        help=".jsonl file: one {query, hits: [{index, score, text}]} per query; with --rerank each hit also "
        "carries cosine and cosine_rank, and score is the interaction model's",
    )
    sub.add_argument("--model-dir", help="model folder (default: the one that built the index)")
    sub.add_argument("--top-k", type=number_in_range(int, 1), default=10)
    sub.add_argument(
        "--rescore-multiplier",
        type=number_in_range(int, 1),
        metavar="M",
        help="an index of int8 or binary vectors, or an approximate one, takes M times the hits asked for as "
        "candidates and re-scores them with its float32 vectors: more finds more of the exact top hits, and "
        f"takes longer (default: {RESCORE_MULTIPLIER}; 1: no more candidates than hits)",
    )
    ann_options(sub, building=False)
    sub.add_argument(
        "--dim",
        type=number_in_range(int, 1),
        metavar="D",
        help="the width of the index's vectors, checked (queries are cut to the index's own width without it)",
    )
    rerank_options(sub, "the best --top-k of them by that score are written")
    overwrite_option(sub)
    inference_options(sub)

    sub = command(
        "mine",
        _mine,
        "Mine hard negatives for the (anchor, positive) examples of a file: the corpus texts that a feature "
        "model ranks LO to HI for each anchor, less those likely to be its matches (the anchor itself, texts "
        "the file labels as its matches either way round, duplicates of the positive, and with --margin or "
        "--rescore texts scored too close to the positive). Writes the JSON lines (query, pos, neg) that "
        "train --loss mnrl reads, or labelled pairs, with OUTPUT's summary beside it (NAME.summary.json and "
        "the scores' histograms NAME.scores.png); the summary is also printed.",
    )
    sub.add_argument(
        "--data",
        required=True,
        metavar="FILE",
        help="the examples: rows or JSON lines of anchor, positive (and negatives), pairs without labels "
        "(positive pairs), or labelled pairs (those labelled as matches), as train --loss mnrl reads them",
    )
    sub.add_argument(
        "--model", required=True, metavar="MODEL_DIR", help="the feature model folder that ranks the corpus"
    )
    sub.add_argument(
        "--output",
        required=True,
        metavar="FILE",
        help="a .jsonl file for tuples; for pairs .tsv, .csv or .jsonl (the readers tell the format by it)",
    )
    sub.add_argument(
        "--corpus",
        metavar="FILE|INDEX_DIR",
        help="the texts to mine from: a text file, one text a line, or an index folder of MODEL_DIR's (search "
        "build); default: every distinct second text of --data",
    )
    sub.add_argument(
        "--range",
        type=rank_range,
        default=(10, 50),
        metavar="LO-HI",
        help="the candidates' ranks among all corpus texts by cosine with the anchor, both included (default: "
        "10-50); cut to a smaller corpus",
    )
    sub.add_argument(
        "--margin",
        type=finite_number,
        metavar="M",
        help="drop a candidate whose cosine with the anchor is above the positive's minus M (default: no such "
        "guard; a negative M is written --margin=-0.05)",
    )
    sub.add_argument("--num-negatives", type=number_in_range(int, 1), default=3, metavar="K", help="default: 3")
    sub.add_argument(
        "--sampling",
        choices=["top", "random"],
        default="top",
        help="top: the K best-ranked candidates left; random: K drawn among them, seeded (default: top)",
    )
    sub.add_argument("--seed", type=number_in_range(int, 0), default=42, help="of --sampling random (default: 42)")
    sub.add_argument(
        "--rescore",
        metavar="INTERACTION_DIR",
        help="an interaction model folder: drop a candidate it scores at or above the positive's score minus "
        "--rescore-margin",
    )
    sub.add_argument(
        "--rescore-margin",
        type=finite_number,
        metavar="M",
        help="the margin of --rescore's guard (default: 0; a negative M is written --rescore-margin=-0.5)",
    )
    sub.add_argument(
        "--output-format",
        choices=["tuples", "pairs"],
        default="tuples",
        help="tuples: {query, pos, neg} JSON lines for --loss mnrl; pairs: (anchor, positive, 1) and "
        "(anchor, negative, 0) for a pair loss such as cosent (default: tuples)",
    )
    overwrite_option(sub, "OUTPUT and its summary files if they exist")
    add_run_options(sub, FILE_FORMAT)
    inference_options(sub)

    sub = command(
        "export",
        _export,
        "Write a TensorFlow SavedModel whose serving signature takes raw UTF-8 strings "
        "(tokenisation runs in the graph; serving needs tensorflow and tensorflow-text); with --format hf "
        "a Hugging Face folder: sentence-transformers for a feature model, BertForSequenceClassification "
        "for an interaction model trained with --head pooler; with --format onnx an ONNX file for ONNX Runtime "
        "(float32, and int8 with --quantize int8), in that Hugging Face folder where the model has one.",
    )
    sub.add_argument("model_dir", help="a cosent-tf model folder (or a Hugging Face one)")
    sub.add_argument("output_dir", help="a new or empty folder (or an earlier export, with --overwrite)")
    sub.add_argument(
        "--format",
        default="savedmodel",
        choices=["savedmodel", "hf", "onnx"],
        help="savedmodel (default), hf (model.safetensors, tokenizer and sentence-transformers files) or onnx "
        "(the hf folder with onnx/model.onnx where the model has one, else the ONNX file with the tokenizer; "
        "needs the [onnx] extra)",
    )
    sub.add_argument(
        "--quantize",
        choices=list(ONNX_QUANTIZATIONS),
        help="with --format onnx: also write onnx/model_qint8.onnx (onnxruntime's dynamic int8 quantisation)",
    )
    sub.add_argument(
        "--check",
        metavar="FILE",
        help="with --format onnx: labelled pairs on which the export reports the Spearman and accuracy of each ONNX "
        f"file, warning when int8 loses more than {INT8_LOSS_WARNING:g} points (read as evaluate reads its FILE, "
        "the format from its extension, the default field names)",
    )
    sub.add_argument("--strict", action="store_true", help="in --check's FILE, an empty text is an error")
    sub.add_argument("--overwrite", action="store_true", help="replace OUTPUT_DIR if it holds an earlier export")
    sub.add_argument(
        "--dim",
        type=number_in_range(int, 1),
        metavar="D",
        help="a feature model's vectors cut to their first D dimensions and renormalised, in every format (the "
        "SavedModel's outputs, sentence-transformers' modules, the ONNX sentence_embedding); the match decision, "
        "fitted at full width, is left out",
    )
    sub.add_argument(
        "--inputs",
        default="strings",
        choices=list(EXPORT_INPUTS),
        help="what the SavedModel's signatures take: "
        + "; ".join(f"{name}: {meaning}" for name, meaning in EXPORT_INPUTS.items())
        + " (docs/guide.md, 'Serving')",
    )
    sub.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "bf16"],
        help="bf16: serve in bfloat16 with bfloat16 weights, float32 outputs (fast on CPUs with "
        "AVX512-BF16 or AMX, and on GPUs)",
    )
    sub.add_argument(
        "--keras",
        type=int,
        choices=KERAS_VERSIONS,
        default=2,
        help="the Keras the model is built and traced on: 2, tf-keras with bert4keras (the default); 3, Keras 3 "
        "with keras-hub on the backend KERAS_BACKEND names (a SavedModel or ONNX file needs tensorflow; "
        "--precision bf16 is Keras 2's). Either Keras exports a model folder either one wrote",
    )
    return parser


def main(argv=None, *, whole_process=False) -> int:
    """The command line on ``argv`` (default: ``sys.argv[1:]``). ``whole_process``: this call is
    all the process does (the ``cosent-tf`` script), so it may set up TensorFlow for the command
    alone (:func:`cosent_tf.environment.keeps_weights_in_amx_layout`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "--verbose" in argv  # known before parsing, whose errors are reported too
    try:
        with errors_reported(verbose), tensorflow_start_up_shown(verbose):
            args = argument_parser().parse_args(argv)
            with console_logging():
                if whole_process and environment.keeps_weights_in_amx_layout(args, environment.cpu_flags(), os.environ):
                    # Not put back: TensorFlow reads it once, at its first fused matmul, and the
                    # training guard (environment.weights_assumed_frozen) must go on seeing it.
                    os.environ[environment.FROZEN_WEIGHTS_VARIABLE] = "1"
                    logging.getLogger("cosent_tf").info(
                        "AMX CPU, bf16: oneDNN keeps each Dense layer's weights in its AMX layout "
                        "(%s=1; set it to 0 to turn this off)",
                        environment.FROZEN_WEIGHTS_VARIABLE,
                    )
                args.handler(args)
    except KeyboardInterrupt:  # outputs are written atomically: nothing half-done is left
        raise SystemExit("stopped: SIGINT received; nothing was written") from None
    return 0


def console_main() -> int:
    """The ``cosent-tf`` console script: :func:`main` as the whole of its process."""
    return main(whole_process=True)


if __name__ == "__main__":
    sys.exit(main())
