"""The vector maths of widths and precisions (cosent_tf.inference.vectors), each against a
computation written here from its definition, and sentence-transformers' ``quantize_embeddings``
where the two agree by design."""

from __future__ import annotations

import json
import logging
import subprocess
import tracemalloc

import numpy as np
import pytest

from cosent_tf import ConfigError
from cosent_tf.inference import vectors as vectors_module
from cosent_tf.inference.vectors import (
    INT8_STEPS,
    approximate_scores,
    check_dim,
    check_precision,
    dequantize_int8,
    hamming_scores,
    int8_ranges,
    quantize,
    truncate,
)
from tests.helpers import reference_python


def units(rng, count, dim):
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def ranges_of(vectors):
    return np.stack([vectors.min(axis=0), vectors.max(axis=0)]).astype(np.float32)


# ---- widths


def test_truncate_is_the_first_dimensions_renormalised():
    vectors = units(np.random.default_rng(0), 50, 40)
    vectors[3] = 0.0  # a zero row stays zero rather than becoming NaN
    cut = truncate(vectors, 12)
    manual = vectors[:, :12] / np.linalg.norm(vectors[:, :12], axis=1, keepdims=True).clip(min=1e-30)
    np.testing.assert_allclose(cut, manual, atol=1e-6)
    assert cut.dtype == np.float32 and cut.shape == (50, 12)
    np.testing.assert_allclose(np.linalg.norm(np.delete(cut, 3, axis=0), axis=1), 1.0, atol=1e-6)
    assert not cut[3].any()
    assert truncate(vectors.astype(np.float64), None).dtype == np.float32
    np.testing.assert_allclose(truncate(vectors, 40), vectors, atol=1e-6)
    for dim in (0, 41):
        with pytest.raises(ValueError, match=f"cannot cut vectors of 40 dimensions to {dim}"):
            truncate(vectors, dim)


def test_check_dim_refuses_widths_the_vectors_do_not_have(caplog):
    assert check_dim(None, 312, [312, 128], "model") is None
    assert check_dim(312, 312, None, "model") is None  # the full width is no cut
    for dim in (0, -4, True, 128.0, "128"):
        with pytest.raises(ConfigError, match=r"--dim .*: a width is a positive integer"):
            check_dim(dim, 312, [312, 128], "model")
    with pytest.raises(ConfigError, match="--dim 313: runs/m makes vectors of 312 dimensions; ask for at most 312"):
        check_dim(313, 312, None, "runs/m")
    assert not caplog.records


def test_check_dim_warns_for_a_width_the_model_was_not_trained_for(caplog):
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        assert check_dim(128, 312, [312, 128, 64], "runs/m") == 128
        assert check_dim(np.int64(64), 312, [312, 128, 64], "runs/m") == 64
    assert not caplog.records  # trained widths: no warning
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        assert check_dim(100, 312, [312, 128, 64], "runs/m") == 100
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.name == "cosent_tf"
    assert "--dim 100: runs/m was trained for the widths 312, 128, 64 (--matryoshka-dims)" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        check_dim(128, 312, None, "runs/plain")
    [record] = caplog.records
    assert "runs/plain was trained for its full width 312 only (no --matryoshka-dims)" in record.getMessage()
    assert "train with --matryoshka-dims to cut it" in record.getMessage()


# ---- int8


def test_int8_ranges_are_each_dimensions_minimum_and_maximum_read_in_blocks(monkeypatch, tmp_path):
    vectors = units(np.random.default_rng(1), 1000, 9)
    path = tmp_path / "vectors.npy"
    np.save(path, vectors)
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 64)  # 16 blocks, the last one short
    ranges = int8_ranges(np.load(path, mmap_mode="r"))
    np.testing.assert_array_equal(ranges, [vectors.min(axis=0), vectors.max(axis=0)])
    assert ranges.dtype == np.float32 and ranges.shape == (2, 9)
    with pytest.raises(ValueError, match="at least one vector"):
        int8_ranges(np.zeros((0, 9), np.float32))
    vectors[700, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        int8_ranges(vectors)


def test_int8_codes_follow_the_formula_and_come_back_within_half_a_step(monkeypatch):
    rng = np.random.default_rng(2)
    calibration = units(rng, 400, 16)
    ranges = ranges_of(calibration)
    vectors = np.concatenate([calibration[:200], units(rng, 100, 16) * 1.5])  # some values outside the ranges
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 37)
    codes = quantize(vectors, "int8", ranges)
    assert codes.dtype == np.int8 and codes.shape == (300, 16)
    # The definition in float64: 256 steps between each dimension's minimum and maximum, rounded
    # to the nearest step, values outside clipped to the ends, stored as step - 128.
    step = (ranges[1].astype(np.float64) - ranges[0]) / 255
    position = (vectors.astype(np.float64) - ranges[0]) / step
    expected = np.clip(np.rint(position), 0, 255) - 128
    near_half = np.abs(position - np.floor(position) - 0.5) < 1e-3  # float32 rounding may go either way there
    assert (np.abs(codes - expected) <= 1).all()
    np.testing.assert_array_equal(codes[~near_half], expected[~near_half])
    # Back to floats: within half a step of a value inside the ranges; an outside one at the nearer end.
    restored = dequantize_int8(codes, ranges).astype(np.float64)
    inside = (vectors >= ranges[0]) & (vectors <= ranges[1])
    error = np.abs(restored - vectors)
    assert (error[inside] <= (step / 2 + 1e-6)[np.nonzero(inside)[1]]).all()
    ends = np.where(vectors < ranges[0], ranges[0], ranges[1])
    np.testing.assert_allclose(restored[~inside], ends[~inside], atol=1e-6)
    assert codes.min() == -128 and codes.max() == 127


def test_int8_of_a_constant_dimension_and_bad_input():
    vectors = np.array([[0.5, 0.1], [0.5, -0.3], [0.5, 0.2]], np.float32)
    ranges = ranges_of(vectors)
    codes = quantize(vectors, "int8", ranges)
    np.testing.assert_array_equal(codes[:, 0], -128)  # no span: every code the lowest, which stands for it
    np.testing.assert_allclose(dequantize_int8(codes, ranges)[:, 0], 0.5)
    assert (codes[:, 1].astype(int) + 128).tolist() == [204, 0, INT8_STEPS]  # (0.1 + 0.3) / (0.5 / 255) = 204
    with pytest.raises(ValueError, match="int8 vectors need the calibration ranges"):
        quantize(vectors, "int8")
    with pytest.raises(ValueError, match=r"int8 ranges of shape \(2, 3\) do not fit vectors of 2 dimensions"):
        quantize(vectors, "int8", np.zeros((2, 3), np.float32))
    vectors[1, 1] = np.inf
    with pytest.raises(ValueError, match="vector 1 holds NaN or infinite values: it has no code"):
        quantize(vectors, "int8", ranges)
    with pytest.raises(ConfigError, match="unknown vector precision 'int4'; choose one of float32, int8, binary"):
        check_precision("int4")
    assert quantize(vectors, "float32") is not None and quantize(vectors, "float32").dtype == np.float32


# ---- binary


def test_binary_codes_are_the_signs_packed_first_dimension_highest(monkeypatch):
    vectors = units(np.random.default_rng(3), 200, 21)  # 21 bits: 3 bytes, the last 3 bits padding
    vectors[0, :4] = [0.0, -0.0, 1e-30, -1e-30]  # only a value above 0 sets its bit
    monkeypatch.setattr(vectors_module, "BLOCK_ROWS", 16)
    bits = quantize(vectors, "binary")
    assert bits.dtype == np.uint8 and bits.shape == (200, 3)
    np.testing.assert_array_equal(np.unpackbits(bits, axis=1, count=21), vectors > 0)
    assert not np.unpackbits(bits, axis=1)[:, 21:].any()  # padding bits are 0
    assert np.unpackbits(bits[:1], axis=1)[0, :4].tolist() == [0, 0, 1, 0]
    assert quantize(np.array([[0.5, -0.5, 0.1]]), "binary").tolist() == [[0b10100000]]
    vectors[150, 0] = np.nan
    with pytest.raises(ValueError, match="vector 150 holds NaN"):
        quantize(vectors, "binary")


@pytest.mark.parametrize("dim", [8, 21, 64])
def test_hamming_scores_equal_a_loop_over_every_pair(dim):
    rng = np.random.default_rng(dim)
    queries, corpus = units(rng, 7, dim), units(rng, 30, dim)
    query_bits, corpus_bits = quantize(queries, "binary"), quantize(corpus, "binary")
    expected = np.zeros((7, 30))
    for i in range(7):
        for j in range(30):
            differing = sum((queries[i, d] > 0) != (corpus[j, d] > 0) for d in range(dim))
            expected[i, j] = 1 - 2 * differing / dim
    scores = hamming_scores(query_bits, corpus_bits, dim)
    assert scores.dtype == np.float32 and scores.shape == (7, 30)
    np.testing.assert_allclose(scores, expected, atol=1e-7)
    # The sign vectors' cosine, as the docstring says.
    signs_q, signs_c = np.where(queries > 0, 1.0, -1.0), np.where(corpus > 0, 1.0, -1.0)
    np.testing.assert_allclose(scores, signs_q @ signs_c.T / dim, atol=1e-7)
    np.testing.assert_array_equal(approximate_scores(queries, corpus_bits, "binary"), scores)
    with pytest.raises(ValueError, match=f"do not hold {dim + 8} dimensions"):
        hamming_scores(query_bits, corpus_bits, dim + 8)


def test_hamming_scores_hold_no_matrix_of_query_corpus_and_bytes():
    rng = np.random.default_rng(4)
    query_bits = rng.integers(0, 256, size=(64, 32), dtype=np.uint8)
    corpus_bits = rng.integers(0, 256, size=(8192, 32), dtype=np.uint8)
    tracemalloc.start()
    scores = hamming_scores(query_bits, corpus_bits, 256)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # A per-byte difference of every pair would be 64 x 8192 x 32 entries (16.8 MB as bytes).
    assert peak < 64 * 8192 * 32, f"peak {peak / 1e6:.1f} MB"
    spot = np.unpackbits(query_bits[5] ^ corpus_bits[4000]).sum()
    assert scores[5, 4000] == pytest.approx(1 - 2 * spot / 256, abs=1e-7)


def test_approximate_scores_are_dot_products_with_what_the_codes_stand_for():
    rng = np.random.default_rng(5)
    queries, corpus = units(rng, 5, 12), units(rng, 40, 12)
    ranges = ranges_of(corpus)
    codes = quantize(corpus, "int8", ranges)
    np.testing.assert_allclose(
        approximate_scores(queries, codes, "int8", ranges), queries @ dequantize_int8(codes, ranges).T, atol=1e-6
    )
    np.testing.assert_allclose(approximate_scores(queries, corpus, "float32"), queries @ corpus.T, atol=1e-6)
    with pytest.raises(ValueError, match="int8 scores need the calibration ranges"):
        approximate_scores(queries, codes, "int8")


# ---- sentence-transformers


@pytest.mark.slow
def test_codes_agree_with_sentence_transformers_quantize_embeddings(tmp_path):
    """sentence-transformers' "ubinary" is cosent-tf's binary; its "int8" floors where cosent-tf rounds to
    the nearest step (so its codes are cosent-tf's or one lower), with the same ranges and step."""
    python = reference_python("this test compares")
    rng = np.random.default_rng(6)
    vectors = units(rng, 120, 30)
    ranges = ranges_of(vectors[:80])  # calibrated on part: the rest may fall outside
    np.savez(tmp_path / "inputs.npz", vectors=vectors, ranges=ranges)
    script = (
        "import sys, numpy as np\n"
        "from sentence_transformers.util.quantization import quantize_embeddings\n"
        "inputs = np.load(sys.argv[1])\n"
        "np.savez(sys.argv[2], int8=quantize_embeddings(inputs['vectors'], 'int8', ranges=inputs['ranges']),\n"
        "         ubinary=quantize_embeddings(inputs['vectors'], 'ubinary'))\n"
    )
    done = subprocess.run(
        [python, "-c", script, str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz")], capture_output=True, text=True
    )
    assert done.returncode == 0, f"sentence-transformers failed:\n{done.stderr}"
    reference = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(quantize(vectors, "binary"), reference["ubinary"])
    ours = quantize(vectors, "int8", ranges).astype(np.int16)
    floored = reference["int8"].astype(np.int16)
    assert set(np.unique(ours - floored).tolist()) <= {0, 1}, json.dumps(np.unique(ours - floored).tolist())
    position = (vectors.astype(np.float64) - ranges[0]) / ((ranges[1].astype(np.float64) - ranges[0]) / 255)
    fraction = position - np.floor(position)
    # Away from where float32 may round or floor either way (a half step, a whole one):
    clear = (position > 0) & (position < 255) & (np.abs(fraction - 0.5) > 1e-3) & (np.abs(fraction - 0.5) < 0.499)
    np.testing.assert_array_equal((ours - floored)[clear], (fraction[clear] > 0.5).astype(np.int16))
