"""Sentence vectors in files: a corpus encoded in shards and put back together, and int8 codes
written with the ranges they were quantised in.

* **Parts.** A corpus too large for one machine is cut into ``N`` shards of consecutive lines
  (:func:`shard_lines`); each is encoded on its own and written as a *part*: ``NAME.npy`` (float32
  unit vectors) and its record ``NAME.part.json`` (:class:`PartRecord`: the shard, the text file's
  digest, the model's weights fingerprint, the width, the part's own digest). :func:`check_parts`
  checks that a set of parts is one encoding of a corpus by a model, each shard once, and
  :func:`assemble_parts` copies them, in order, into one matrix (a memory map, so that the corpus
  need not fit in memory): ``cosent-tf encode --shard I/N`` and ``search build --parts``.
* **int8 ranges.** int8 codes mean something only with the ranges they were quantised in
  (:func:`~cosent_tf.inference.vectors.int8_ranges`), so :func:`save_vectors` writes them beside
  the codes as ``NAME.ranges.npy`` (:func:`ranges_path`), and :func:`read_int8_ranges` reads such a
  file (or an int8 index's ``ranges.npy``) back, to quantise queries in the corpus's ranges.

A file and the file that says what it holds (a part's record, codes' ranges) are written both or
neither, and never left side by side with the other's earlier content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from ..calibration import weights_fingerprint
from ..errors import ConfigError, DataError
from ..io import atomic_path, file_digest, json_field, json_text, output_target, read_json

PART_FORMAT = "cosent-tf-part"
PART_FORMAT_VERSION = 1
# Rows of a part read at a time while it is copied: bounded memory for a part of any size.
COPY_ROWS = 65536


def shard_lines(shard: int, shards: int, count: int) -> tuple[int, int]:
    """The lines ``[first, stop)`` (0-based) of ``count`` that shard ``shard`` of ``shards`` holds:
    ``floor(shard * count / shards)`` up to the next shard's first line, so the shards cover every
    line once and differ in size by one line at most.

    Args:
        shard: the shard, counted from 0.
        shards: how many shards the lines are cut into.
        count: how many lines there are.

    Returns:
        ``(first, stop)``.

    Raises:
        ValueError: ``shards`` below 1, or ``shard`` not from 0 to ``shards - 1``.

    Example:
        >>> [shard_lines(i, 3, 10) for i in range(3)]
        [(0, 3), (3, 6), (6, 10)]
    """
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard {shard} of {shards}: shards count from 0 to {shards - 1}")
    return shard * count // shards, (shard + 1) * count // shards


def _companion(output: str, suffix: str) -> str:
    """``NAME`` + ``suffix`` beside the output ``NAME.npy`` (a name without ``.npy``: the whole name)."""
    stem, extension = os.path.splitext(output)
    return (stem if extension.lower() == ".npy" else output) + suffix


def ranges_path(output: str) -> str:
    """Where :func:`save_vectors` (``encode --vector-precision int8``) writes the int8 ranges of the
    codes in ``output``: ``NAME.ranges.npy`` beside ``NAME.npy``.

    Example:
        >>> ranges_path("vectors/corpus.npy")
        'vectors/corpus.ranges.npy'
    """
    return _companion(output, ".ranges.npy")


def part_record_path(part: str) -> str:
    """Where the record of the part ``NAME.npy`` lies: ``NAME.part.json``.

    Example:
        >>> part_record_path("parts/corpus-0.npy")
        'parts/corpus-0.part.json'
    """
    return _companion(part, ".part.json")


class _WriteOnly:
    """A file seen only through its ``write``: numpy writes a real file with ``tofile``, which
    needs a file it can seek in, and so fails on a pipe (``/dev/stdout``)."""

    def __init__(self, file):
        self.write = file.write


def save_npy(path: str, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` as a .npy file, as is (no temporary file: see :func:`save_vectors`);
    ``path`` may be a pipe or a device (``/dev/stdout``)."""
    with open(path, "wb") as f:
        np.save(_WriteOnly(f), array)


def save_vectors(path: str, vectors: np.ndarray, ranges: Optional[np.ndarray] = None) -> None:
    """Write ``vectors`` (float32, or the codes of :func:`~cosent_tf.inference.vectors.quantize`) to
    ``path`` as a .npy file, atomically (a pipe or device such as ``/dev/stdout`` as a stream);
    with ``ranges``, int8 codes' ranges, also those to :func:`ranges_path` beside it, both or
    neither.

    Args:
        path: the .npy file to write.
        vectors: the matrix to write.
        ranges: the (2, D) float32 ranges ``vectors`` were quantised in, or None.

    Raises:
        ConfigError: ``ranges`` with a ``path`` that is a stream (the ranges need a file beside it).
        OSError: the files cannot be written (neither is, then).

    Example:
        >>> ranges = int8_ranges(vectors)
        >>> save_vectors("corpus.npy", quantize(vectors, "int8", ranges), ranges)  # and corpus.ranges.npy
    """
    if ranges is None:
        with atomic_path(path) as tmp:
            save_npy(tmp, vectors)
        return
    if output_target(path)[1]:
        raise ConfigError(
            f"{path}: is a stream, and int8 codes need their ranges in a file beside them: give the path of a .npy file"
        )
    ranges = np.asarray(ranges, dtype=np.float32)
    _write_together(path, lambda tmp: save_npy(tmp, vectors), ranges_path(path), lambda tmp, _: save_npy(tmp, ranges))


def read_int8_ranges(path: str) -> np.ndarray:
    """The int8 ranges in ``path``: a float32 .npy of shape (2, D), each dimension's minimum (row 0)
    and maximum (row 1), as :func:`save_vectors` writes beside int8 codes and an int8 index keeps
    as ``ranges.npy``.

    Args:
        path: the .npy file.

    Returns:
        The ranges, float32 (2, D).

    Raises:
        DataError: ``path`` cannot be read as a .npy file, or holds no such ranges.

    Example:
        >>> queries = quantize(encoder.encode(texts), "int8", read_int8_ranges("index/ranges.npy"))
    """
    try:
        ranges = np.load(path, allow_pickle=False)
    except OSError as error:
        raise DataError(path, f"cannot read it ({error.strerror or error})") from None
    except ValueError as error:
        raise DataError(path, f"not a .npy array file ({error})") from None
    if ranges.ndim != 2 or ranges.shape[0] != 2 or ranges.shape[1] < 1 or ranges.dtype.kind != "f":
        raise DataError(
            path,
            f"holds a {ranges.dtype} array of shape {ranges.shape}, not int8 ranges (float32, shape (2, D): "
            "each dimension's minimum, then maximum); give the NAME.ranges.npy of an int8 encode, or an index's "
            "ranges.npy",
        )
    ranges = ranges.astype(np.float32)
    if not np.isfinite(ranges).all() or (ranges[0] > ranges[1]).any():
        raise DataError(path, "its ranges hold NaN or infinite values, or a minimum above its maximum")
    return ranges


def _write_together(
    data_path: str, write_data: Callable[[str], None], marker_path: str, write_marker: Callable[[str, str], None]
) -> None:
    """Write the file ``data_path`` and the file beside it that says what it holds (``marker_path``:
    int8 ranges, a part record) so that a marker never describes other data than its own.

    ``write_data(tmp)`` writes the data, ``write_marker(tmp, data_tmp)`` the marker (given the
    data's temporary file, to read a digest). Both are written first; then an earlier marker is
    removed, the data takes its place, and the marker last. An interruption between leaves data
    without a marker, which its readers refuse (a part without its record), never data with the
    marker of an earlier run.
    """
    with atomic_path(marker_path) as marker_tmp:
        with atomic_path(data_path) as data_tmp:
            write_data(data_tmp)
            write_marker(marker_tmp, data_tmp)
            earlier = output_target(marker_path)[0]
            if os.path.isfile(earlier):
                os.remove(earlier)


@dataclasses.dataclass(frozen=True)
class PartRecord:
    """What a part says of itself (``NAME.part.json`` beside ``NAME.npy``), so that the parts of a
    corpus can be checked to fit together and with the corpus and the model before they are used.

    Attributes:
        shard: the part's shard, counted from 0.
        shards: how many shards the texts were cut into.
        first_line: the first line it encodes, counted from 0 (:func:`shard_lines`).
        lines: how many lines it encodes: the rows of its vectors.
        texts: the text file it encoded (absolute; said in messages, not checked).
        texts_lines: how many lines that file had.
        texts_sha256: that file's digest (:func:`cosent_tf.io.file_digest`).
        model_dir: the model folder that encoded it (absolute).
        model_fingerprint: that model's weights fingerprint
            (:func:`cosent_tf.calibration.weights_fingerprint`); None for a folder without one.
        dim: the vectors' width.
        model_width: the model's full width (``dim`` or more).
        vectors_sha256: the digest of the .npy file itself, so that a part is never taken with the
            record of another ("" until :func:`write_part` writes it).

    Example:
        >>> record = PartRecord.for_shard("corpus.txt", len(lines), 0, 4, "runs/bq/model", dim=128, model_width=768)
        >>> first = record.first_line
        >>> write_part("part-0.npy", encoder.encode(lines[first : first + record.lines], dim=128), record)
    """

    shard: int
    shards: int
    first_line: int
    lines: int
    texts: str
    texts_lines: int
    texts_sha256: str
    model_dir: str
    model_fingerprint: Optional[str]
    dim: int
    model_width: int
    vectors_sha256: str = ""

    @classmethod
    def for_shard(
        cls, texts: str, texts_lines: int, shard: int, shards: int, model_dir: str, dim: int, model_width: int
    ) -> PartRecord:
        """The record of shard ``shard`` of ``shards`` of the text file ``texts`` (of ``texts_lines``
        lines), encoded by ``model_dir`` at width ``dim``: its lines, the file's digest and the
        model's fingerprint filled in (the vectors' digest is added by :func:`write_part`).

        Raises:
            ValueError: a shard that is not from 0 to ``shards - 1``.
            OSError: ``texts`` cannot be read.
        """
        first, stop = shard_lines(shard, shards, texts_lines)
        return cls(
            shard=shard,
            shards=shards,
            first_line=first,
            lines=stop - first,
            texts=os.path.abspath(texts),
            texts_lines=texts_lines,
            texts_sha256=file_digest(texts),
            model_dir=os.path.abspath(model_dir),
            model_fingerprint=weights_fingerprint(model_dir),
            dim=dim,
            model_width=model_width,
        )

    def write(self, path: str, vectors_path: str) -> None:
        """Write the record to ``path``, with the digest of the part's .npy at ``vectors_path``."""
        fields = dataclasses.asdict(self)
        fields.update(vectors_sha256=file_digest(vectors_path))
        with open(path, "w", encoding="utf-8") as f:
            f.write(
                json_text({"format": PART_FORMAT, "format_version": PART_FORMAT_VERSION, **fields}, indent=2) + "\n"
            )

    @classmethod
    def read(cls, part: str) -> PartRecord:
        """The record of the part ``part`` (``NAME.npy``): its ``NAME.part.json``, checked.

        Raises:
            DataError: naming the part: no part, no record beside it (not written as a part, or its
                writing was interrupted), or a record that is not one.
        """
        path = part_record_path(part)
        if not os.path.isfile(part):
            raise DataError(part, "cannot open: no such file (a part written by encode --shard)")
        if not os.path.isfile(path):
            raise DataError(
                part,
                f"has no part record beside it ({os.path.basename(path)}): it was not written by encode --shard, or "
                "its encoding did not finish; encode that shard again",
            )
        try:
            raw = read_json(path, "a cosent-tf part record")
            if raw.get("format") != PART_FORMAT:
                raise ConfigError(f"{path}: not a cosent-tf part record (its format is not {PART_FORMAT!r})")
            if json_field(raw, "format_version", int, path) != PART_FORMAT_VERSION:
                raise ConfigError(
                    f"{path}: a part record of format version {raw['format_version']}, which this cosent-tf does "
                    f"not read (it reads {PART_FORMAT_VERSION}); encode the shard again with this version"
                )
            fields = {}
            for name, expect in _PART_FIELD_TYPES.items():
                if name not in raw:
                    raise ConfigError(f"{path}: has no {name!r}; encode the shard again")
                fields[name] = json_field(raw, name, expect, path)
            record = cls(**fields)
        except ConfigError as error:
            raise DataError(part, f"its record: {error}") from None
        if not (0 <= record.shard < record.shards and record.lines >= 0 and record.dim >= 1):
            raise DataError(part, f"its record {path} is not consistent (shard {record.shard} of {record.shards})")
        return record


# Each field of a part record and its JSON type.
_PART_FIELD_TYPES: dict[str, Any] = {
    "shard": int,
    "shards": int,
    "first_line": int,
    "lines": int,
    "texts": str,
    "texts_lines": int,
    "texts_sha256": str,
    "model_dir": str,
    "model_fingerprint": (str, type(None)),
    "dim": int,
    "model_width": int,
    "vectors_sha256": str,
}


def write_part(path: str, vectors: np.ndarray, record: PartRecord) -> None:
    """Write a part: ``vectors`` to ``path`` and ``record``, with the digest of that file, to
    :func:`part_record_path` beside it; both or neither, and an earlier part's record is removed
    before the new part takes its place, so a part never stands beside another's record.

    Args:
        path: the part's .npy file.
        vectors: float32 (``record.lines``, ``record.dim``), the unit vectors of the record's lines.
        record: from :meth:`PartRecord.for_shard`.

    Raises:
        ConfigError: ``path`` is a stream (a part needs its record beside it).
        ValueError: vectors of another shape or type than the record says.
        OSError: the files cannot be written (neither is, then).

    Example:
        >>> write_part("parts/corpus-0.npy", vectors, record)  # and parts/corpus-0.part.json
    """
    if output_target(path)[1]:
        raise ConfigError(
            f"{path}: is a stream, but a part needs its record beside it ({part_record_path(path)}): give the path "
            "of a .npy file"
        )
    if vectors.dtype != np.float32 or vectors.shape != (record.lines, record.dim):
        raise ValueError(
            f"a {vectors.dtype} matrix of shape {vectors.shape} is not the part its record says: {record.lines} "
            f"float32 vectors of {record.dim} dimensions"
        )
    _write_together(path, lambda tmp: save_npy(tmp, vectors), part_record_path(path), record.write)


def check_parts(
    parts: Sequence[str], corpus: str, corpus_lines: int, model_dir: str, dim: Optional[int] = None
) -> list[tuple[str, PartRecord]]:
    """The parts in shard order, each with its record, once every record fits: one part for each
    shard 0..N-1 of the same N, encoded from the file ``corpus`` (its ``corpus_lines`` lines, its
    digest) by the model ``model_dir`` (its weights fingerprint; its folder where either side
    has none), all at one width (``dim`` when given). The vectors themselves are checked as
    :func:`assemble_parts` reads them.

    Args:
        parts: the parts' .npy files, in any order.
        corpus: the text file they should have encoded.
        corpus_lines: its lines.
        model_dir: the model that should have encoded them.
        dim: the width they should have (None: any, the same for all).

    Returns:
        ``[(part, PartRecord), ...]`` by shard.

    Raises:
        DataError, ConfigError: naming the part whose record does not fit, and what to do.

    Example:
        >>> checked = check_parts(["p-1.npy", "p-0.npy"], "corpus.txt", len(lines), "runs/bq/model")
        >>> [record.shard for _, record in checked]
        [0, 1]
    """
    if not parts:
        raise ConfigError("no parts given: give the part of each shard 0 to N-1")
    records = [(part, PartRecord.read(part)) for part in parts]
    first_part, first = records[0]
    by_shard: dict[int, str] = {}
    for part, record in records:
        if record.shards != first.shards:
            raise DataError(
                part,
                f"is shard {record.shard} of {record.shards}, but {first_part} is shard {first.shard} of "
                f"{first.shards}: give the parts of one encoding, cut into one number of shards",
            )
        if record.shard in by_shard:
            raise DataError(
                part,
                f"is shard {record.shard} of {record.shards}, as {by_shard[record.shard]} is: give each shard once",
            )
        by_shard[record.shard] = part
    missing = sorted(set(range(first.shards)) - set(by_shard))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise ConfigError(
            f"--parts: shard(s) {shown} of {first.shards} missing: give the parts of every shard 0 to "
            f"{first.shards - 1} (encode --shard I/{first.shards})"
        )
    corpus_digest = file_digest(corpus)
    fingerprint = weights_fingerprint(model_dir)
    for part, record in records:
        if record.texts_lines != corpus_lines:
            raise DataError(
                part,
                f"was encoded from {record.texts} of {record.texts_lines} lines, but {corpus} has {corpus_lines}: "
                "give the text file the parts were encoded from",
            )
        if record.texts_sha256 != corpus_digest:
            raise DataError(
                part,
                f"was encoded from another text file than {corpus} (or one that has changed since: its digest "
                f"differs; the part's file was {record.texts}): give the file the parts were encoded from, or "
                "encode the parts again",
            )
        if (record.first_line, record.first_line + record.lines) != shard_lines(
            record.shard, record.shards, corpus_lines
        ):
            raise DataError(
                part,
                f"holds lines {record.first_line} to {record.first_line + record.lines} (from 0), not those of shard "
                f"{record.shard} of {record.shards} of {corpus_lines} lines; encode it again",
            )
        same_model = (
            record.model_fingerprint == fingerprint
            if record.model_fingerprint is not None and fingerprint is not None
            else os.path.realpath(record.model_dir) == os.path.realpath(model_dir)
        )
        if not same_model:
            raise ConfigError(
                f"{part}: was encoded by the model {record.model_dir}, not by {model_dir} (their weights differ), "
                "and one model's vectors cannot be searched with another's queries: pass the model that encoded "
                "the parts, or encode them again with this one"
            )
        if record.dim != first.dim or (dim is not None and record.dim != dim):
            wanted = dim if dim is not None else first.dim
            raise DataError(
                part,
                f"holds vectors of {record.dim} dimensions, not {wanted}"
                + (" (--dim)" if dim is not None else f" as {first_part}'s")
                + ": give parts encoded at one width, the --dim of search build",
            )
    return [(by_shard[shard], record) for shard, record in sorted((r.shard, r) for _, r in records)]


def copy_part(part: str, record: PartRecord, into: np.ndarray, block_rows: int = COPY_ROWS) -> None:
    """Copy the vectors of the part ``part`` into its rows of ``into`` (from ``record.first_line``),
    reading it once, in blocks, and checking it as it goes: a float32 .npy of ``record.lines`` rows of
    ``record.dim``, whose digest is the one its record holds.

    Args:
        part: the part's .npy file.
        record: its record (:meth:`PartRecord.read`).
        into: the corpus's matrix, float32 (at least the record's lines, ``record.dim``).
        block_rows: rows read at a time.

    Raises:
        DataError: naming the part: unreadable, of another shape or type, truncated, or not the file
            its record was written with (its rows in ``into`` may have been written by then).

    Example:
        >>> copy_part("part-1.npy", PartRecord.read("part-1.npy"), vectors)
    """
    digest = hashlib.sha256()
    try:
        with open(part, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
                shape, fortran_order, dtype = read_header[version](f)
            except (ValueError, KeyError) as error:
                raise DataError(part, f"not a .npy file of vectors ({error or 'an unknown .npy version'})") from None
            if dtype != np.dtype("<f4") or fortran_order or shape != (record.lines, record.dim):
                raise DataError(
                    part,
                    f"holds a {dtype} array of shape {shape}, but its record says {record.lines} float32 vectors of "
                    f"{record.dim} dimensions: it is not the file its record was written with; encode the shard again",
                )
            header = f.tell()
            f.seek(0)
            digest.update(f.read(header))
            row_bytes = 4 * record.dim
            for start in range(0, record.lines, block_rows):
                rows = min(block_rows, record.lines - start)
                block = f.read(rows * row_bytes)
                digest.update(block)
                if len(block) != rows * row_bytes:
                    raise DataError(part, "is truncated (ends before its last vector); encode the shard again")
                first = record.first_line + start
                into[first : first + rows] = np.frombuffer(block, dtype="<f4").reshape(rows, record.dim)
            digest.update(f.read())  # anything after the last vector makes the digest differ
    except OSError as error:
        raise DataError(part, f"cannot read it ({error.strerror or error})") from None
    if f"sha256:{digest.hexdigest()}" != record.vectors_sha256:
        raise DataError(
            part,
            "is not the file its record was written with (its digest differs: changed or replaced since); encode the "
            "shard again",
        )


def assemble_parts(checked: Sequence[tuple[str, PartRecord]], into: np.ndarray) -> np.ndarray:
    """Copy every part of ``checked`` (:func:`check_parts`) into its rows of ``into``, one part at a
    time (:func:`copy_part`), and return ``into``: the corpus's vectors in line order.

    Args:
        checked: the parts with their records, as :func:`check_parts` returns them.
        into: float32 (the corpus's lines, the parts' width); a memory map
            (:meth:`~cosent_tf.inference.index.IndexFolder.new_vectors`, or
            ``numpy.lib.format.open_memmap``) holds a corpus larger than memory.

    Returns:
        ``into``, filled.

    Raises:
        ValueError: ``into`` is not of the corpus's shape, or not float32.
        DataError: a part that is not the file its record describes (:func:`copy_part`).

    Example:
        >>> checked = check_parts(parts, "corpus.txt", len(lines), "runs/bq/model")
        >>> vectors = assemble_parts(checked, np.empty((len(lines), checked[0][1].dim), np.float32))
    """
    if not checked:
        raise ValueError("no parts to assemble")
    record = checked[0][1]
    if into.dtype != np.float32 or into.shape != (record.texts_lines, record.dim):
        raise ValueError(
            f"a {into.dtype} matrix of shape {into.shape} cannot take the parts: they hold {record.texts_lines} "
            f"float32 vectors of {record.dim} dimensions"
        )
    for part, part_record in checked:
        copy_part(part, part_record, into)
    return into
