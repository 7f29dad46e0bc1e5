"""encode --shard I/N and search build --parts: N machines each encode a shard of a corpus, one builds
the index from the parts; every check of the parts names the part, and nothing is half-written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from cosent_tf import VectorIndex
from cosent_tf.cli import main, shard_spec
from cosent_tf.inference.parts import PartRecord, part_record_path, shard_lines
from cosent_tf.io import file_digest
from tests.helpers import distinct_texts, make_model_dir, write_config

CORPUS_LINES = 40
SHARDS = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A feature model and another one (other weights), a corpus and another text file, queries,
    the parts of the corpus's 3 shards, and an index built from the corpus in one go."""
    root = tmp_path_factory.mktemp("cli-shards")
    config = write_config(root / "config.json")
    make_model_dir(root / "model", config, pooling="last-avg")
    make_model_dir(root / "other", config, pooling="last-avg")
    corpus = distinct_texts(5, CORPUS_LINES)
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    (root / "edited.txt").write_text("\n".join(corpus[:-1] + ["改了"]) + "\n", encoding="utf-8")
    (root / "queries.txt").write_text("\n".join(distinct_texts(6, 5, avoid=corpus)) + "\n", encoding="utf-8")
    (root / "parts").mkdir()
    for shard in range(SHARDS):
        # batches of 4: a shard's batches are not the whole corpus's, and the vectors must not care
        encode(root, "model", "corpus.txt", f"parts/part-{shard}.npy", "--shard", f"{shard}/{SHARDS}")
    main(["search", "build", str(root / "model"), str(root / "corpus.txt"), str(root / "whole")])
    return root


def encode(root, model, texts, output, *extra):
    main(["encode", str(root / model), str(root / texts), str(root / output), "--batch-size", "4", *extra])


def parts(root, names=None, folder="parts"):
    return [str(root / folder / f"part-{name}.npy") for name in (range(SHARDS) if names is None else names)]


def build(root, index_dir, part_paths, *extra, corpus="corpus.txt", model="model"):
    main(["search", "build", str(root / model), str(root / corpus), str(index_dir), "--parts", *part_paths, *extra])


def copy_parts(root, tmp_path):
    """The parts copied to ``tmp_path`` (with their records), to spoil one there."""
    for path in parts(root):
        shutil.copy(path, tmp_path)
        shutil.copy(part_record_path(path), tmp_path)
    return [str(tmp_path / os.path.basename(path)) for path in parts(root)]


def test_shards_cover_every_line_once():
    assert [shard_lines(i, 3, 40) for i in range(3)] == [(0, 13), (13, 26), (26, 40)]
    for count in range(0, 30):
        for shards in range(1, 8):
            covered = [line for i in range(shards) for line in range(*shard_lines(i, shards, count))]
            assert covered == list(range(count))
    assert shard_spec(" 2 / 5 ") == (2, 5)


@pytest.mark.parametrize("text", ["3/3", "-1/3", "1/0", "1", "a/b", "1/2/3"])
def test_a_shard_that_does_not_exist_is_refused(text, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["encode", "m", "t.txt", "v.npy", "--shard", text])
    assert stopped.value.code == 2 and "argument --shard" in capsys.readouterr().err


@pytest.mark.heavy
def test_each_part_holds_its_lines_and_a_record_of_them(folder):
    whole = VectorIndex.load(folder / "whole")
    for shard, path in enumerate(parts(folder)):
        first, stop = shard_lines(shard, SHARDS, CORPUS_LINES)
        vectors = np.load(path)
        assert vectors.dtype == np.float32 and vectors.shape == (stop - first, 16)
        np.testing.assert_allclose(vectors, whole.vectors[first:stop], atol=1e-6)
        record = json.loads(Path(part_record_path(path)).read_text(encoding="utf-8"))
        assert record == {
            "format": "cosent-tf-part",
            "format_version": 1,
            "shard": shard,
            "shards": SHARDS,
            "first_line": first,
            "lines": stop - first,
            "texts": str(folder / "corpus.txt"),
            "texts_lines": CORPUS_LINES,
            "texts_sha256": file_digest(folder / "corpus.txt"),
            "model_dir": str(folder / "model"),
            "model_fingerprint": file_digest(folder / "model" / "bert_model.ckpt.index"),
            "dim": 16,
            "model_width": 16,
            "vectors_sha256": file_digest(path),
        }


@pytest.mark.parametrize("precision, kind", [("float32", "exact"), ("binary", "hnsw")])
def test_an_index_built_from_the_parts_is_the_index_built_in_one_go(folder, tmp_path, precision, kind, capsys):
    whole = VectorIndex.load(folder / "whole")
    index_dir = tmp_path / "index"
    build(folder, index_dir, parts(folder, [2, 0, 1]), "--vector-precision", precision, "--index", kind)
    assert f"{CORPUS_LINES} vectors of dimension 16 from the 3 parts of" in capsys.readouterr().out
    index = VectorIndex.load(index_dir)
    assert (index.precision, index.kind, len(index)) == (precision, kind, CORPUS_LINES)
    assert index.texts == whole.texts and index.model_width == 16
    np.testing.assert_allclose(index.vectors, whole.vectors, atol=1e-6)
    assert index.model_fingerprint == file_digest(folder / "model" / "bert_model.ckpt.index")
    for name, built in (("parts", index_dir), ("whole", folder / "whole")):
        main(
            [
                "search",
                "query",
                str(built),
                str(folder / "queries.txt"),
                str(tmp_path / f"{name}.jsonl"),
                "--top-k",
                "5",
                *(["--rescore-multiplier", "8"] if name == "parts" and precision != "float32" else []),
            ]
        )
    hits = {
        name: [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
        for name in ("parts", "whole")
    }
    for from_parts, in_one_go in zip(hits["parts"], hits["whole"]):
        assert [h["index"] for h in from_parts["hits"]] == [h["index"] for h in in_one_go["hits"]]
        assert [h["score"] for h in from_parts["hits"]] == pytest.approx([h["score"] for h in in_one_go["hits"]])
    # No file of the build is left beside the index.
    assert sorted(os.listdir(tmp_path)) == ["index", "parts.jsonl", "whole.jsonl"]


@pytest.mark.heavy
def test_one_shard_of_one_is_the_whole_corpus_as_a_part(folder, tmp_path, capsys):
    # the one-machine route from encode to search build --parts (docs/guide.md, --parts' help)
    encode(folder, "model", "corpus.txt", tmp_path / "all.npy", "--shard", "0/1")
    build(folder, tmp_path / "index", [str(tmp_path / "all.npy")], "--vector-precision", "int8")
    assert f"{CORPUS_LINES} vectors of dimension 16 from the 1 part of" in capsys.readouterr().out
    np.testing.assert_allclose(
        VectorIndex.load(tmp_path / "index").vectors, VectorIndex.load(folder / "whole").vectors, atol=1e-6
    )


def test_parts_at_a_width_build_an_index_at_that_width(folder, tmp_path):
    for shard in range(2):
        encode(folder, "model", "corpus.txt", tmp_path / f"part-{shard}.npy", "--shard", f"{shard}/2", "--dim", "8")
    two = [str(tmp_path / "part-0.npy"), str(tmp_path / "part-1.npy")]
    build(folder, tmp_path / "index", two)
    whole = VectorIndex.load(folder / "whole").vectors[:, :8]
    expected = whole / np.linalg.norm(whole, axis=1, keepdims=True)
    np.testing.assert_allclose(VectorIndex.load(tmp_path / "index").vectors, expected, atol=1e-6)
    with pytest.raises(SystemExit, match=r"part-0.npy: holds vectors of 8 dimensions, not 16 \(--dim\)"):
        build(folder, tmp_path / "index16", two, "--dim", "16")
    # a shard at another width than the other
    encode(folder, "model", "corpus.txt", tmp_path / "full-1.npy", "--shard", "1/2")
    with pytest.raises(SystemExit, match=r"full-1.npy: holds vectors of 16 dimensions, not 8 as .*part-0.npy's"):
        build(folder, tmp_path / "mixed", [two[0], str(tmp_path / "full-1.npy")])
    assert not os.path.exists(tmp_path / "index16") and not os.path.exists(tmp_path / "mixed")


# Each way a set of parts can be spoilt: what is done to copies of the parts (given the corpus's
# folder, the test's and the copies' paths; returns the parts to give), and the message.
CASES = {
    "a shard missing": (lambda root, tmp, paths: paths[:2], r"--parts: shard\(s\) 2 of 3 missing"),
    "a shard twice": (
        lambda root, tmp, paths: [paths[0], paths[1], paths[1]],
        r"part-1.npy: is shard 1 of 3, as .*part-1.npy is: give each shard once",
    ),
    "no record": (
        lambda root, tmp, paths: (os.remove(part_record_path(paths[1])), paths)[1],
        r"part-1.npy: has no part record beside it \(part-1.part.json\): it was not written by encode --shard",
    ),
    "a record that is no JSON": (
        lambda root, tmp, paths: (Path(part_record_path(paths[2])).write_text("{"), paths)[1],
        r"part-2.npy: its record: .*part-2.part.json.*not valid JSON",
    ),
    "a record without a field": (
        lambda root, tmp, paths: (_edit_record(paths[0], drop="texts_sha256"), paths)[1],
        r"part-0.npy: its record: .*part-0.part.json: has no 'texts_sha256'; encode the shard again",
    ),
    "a part replaced": (
        lambda root, tmp, paths: (np.save(paths[1], np.load(paths[1]) * 0.5), paths)[1],
        r"part-1.npy: is not the file its record was written with \(its digest differs",
    ),
    "a part of another shape": (
        lambda root, tmp, paths: (np.save(paths[1], np.load(paths[1])[:-1]), paths)[1],
        r"part-1.npy: holds a float32 array of shape \(12, 16\), but its record says 13 float32 vectors of 16",
    ),
    "a part cut short": (
        lambda root, tmp, paths: (_cut_short(paths[2]), paths)[1],
        r"part-2.npy: is truncated \(ends before its last vector\)",
    ),
    "a part that is no .npy": (
        lambda root, tmp, paths: (Path(paths[0]).write_bytes(b"not numpy"), paths)[1],
        r"part-0.npy: not a .npy file of vectors",
    ),
    "a part that is not there": (
        lambda root, tmp, paths: [*paths[:2], str(tmp / "nothere.npy")],
        r"nothere.npy: cannot open",
    ),
    "shards of another count": (
        lambda root, tmp, paths: (_edit_record(paths[2], shards=4), paths)[1],
        r"part-2.npy: is shard 2 of 4, but .*part-0.npy is shard 0 of 3",
    ),
}


def _edit_record(part, drop=None, **changes):
    path = part_record_path(part)
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    record.update(changes)
    record.pop(drop, None)
    Path(path).write_text(json.dumps(record), encoding="utf-8")


def _cut_short(part):
    Path(part).write_bytes(Path(part).read_bytes()[:-10])


@pytest.mark.parametrize("case", sorted(CASES))
def test_parts_that_do_not_fit_together_are_refused_naming_the_part(folder, tmp_path, case):
    spoil, message = CASES[case]
    (tmp_path / "copies").mkdir()
    given = spoil(folder, tmp_path, copy_parts(folder, tmp_path / "copies"))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SystemExit, match=message):
        build(folder, tmp_path / "index", given)
    assert sorted(os.listdir(tmp_path)) == before  # no index, no temporary file


@pytest.mark.heavy
def test_parts_of_another_text_file_or_model_are_refused(folder, tmp_path):
    # the corpus edited since the parts were encoded: the same lines, another digest
    with pytest.raises(SystemExit, match=r"part-0.npy: was encoded from another text file than .*edited.txt"):
        build(folder, tmp_path / "index", parts(folder), corpus="edited.txt")
    (tmp_path / "longer.txt").write_text((folder / "corpus.txt").read_text(encoding="utf-8") + "多一行\n")
    with pytest.raises(
        SystemExit, match=r"part-0.npy: was encoded from .*corpus.txt of 40 lines, but .*longer.txt has 41"
    ):
        main(
            ["search", "build", str(folder / "model"), str(tmp_path / "longer.txt"), str(tmp_path / "index")]
            + ["--parts", *parts(folder)]
        )
    with pytest.raises(SystemExit, match=r"part-0.npy: was encoded by the model .*model, not by .*other"):
        build(folder, tmp_path / "index", parts(folder), model="other")
    # one part of another model among the others
    encode(folder, "other", "corpus.txt", tmp_path / "other-1.npy", "--shard", f"1/{SHARDS}")
    mixed = [parts(folder)[0], str(tmp_path / "other-1.npy"), parts(folder)[2]]
    with pytest.raises(SystemExit, match=r"other-1.npy: was encoded by the model .*other, not by .*model"):
        build(folder, tmp_path / "index", mixed)
    with pytest.raises(SystemExit, match="--strategy mirrored encodes on several devices, but --parts builds"):
        build(folder, tmp_path / "index", parts(folder), "--strategy", "mirrored")
    assert not os.path.exists(tmp_path / "index")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vector-precision", "int8"], "--shard with --vector-precision int8: a part holds float32 vectors"),
        (["--vector-precision", "binary"], "--shard with --vector-precision binary"),
        (["--no-normalize"], "--shard with --no-normalize: a part goes into an index, which searches unit vectors"),
    ],
)
def test_a_shard_is_float32_unit_vectors(folder, tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        encode(folder, "model", "corpus.txt", tmp_path / "part.npy", "--shard", "0/2", *extra)
    assert os.listdir(tmp_path) == []


def test_a_part_and_its_record_are_written_together_or_not_at_all(folder, tmp_path, monkeypatch):
    output = tmp_path / "part-0.npy"
    encode(folder, "model", "corpus.txt", output, "--shard", "0/2")
    before = {name: (tmp_path / name).read_bytes() for name in sorted(os.listdir(tmp_path))}
    assert sorted(before) == ["part-0.npy", "part-0.part.json"]

    def no_record(self, path, vectors_path):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:  # the record cannot be written: the earlier pair stays
        patched.setattr(PartRecord, "write", no_record)
        with pytest.raises(SystemExit, match="No space left on device"):
            encode(folder, "model", "corpus.txt", output, "--shard", "1/2", "--overwrite")
    assert {name: (tmp_path / name).read_bytes() for name in sorted(os.listdir(tmp_path))} == before

    # Stopped between the two renames: the new part is in place, its record not yet; the earlier
    # record was removed first, so the part is never taken with the record of another shard.
    real_replace = os.replace

    def stopped_before_the_record(source, target):
        if str(target).endswith(".part.json"):
            raise KeyboardInterrupt
        real_replace(source, target)

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", stopped_before_the_record)
        with pytest.raises(SystemExit, match="stopped: SIGINT received"):
            encode(folder, "model", "corpus.txt", output, "--shard", "1/2", "--overwrite")
    assert sorted(os.listdir(tmp_path)) == ["part-0.npy"]
    with pytest.raises(SystemExit, match=r"part-0.npy: has no part record beside it"):
        build(folder, tmp_path / "index", [str(output)])
