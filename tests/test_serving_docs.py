"""The guide's serving section (docs/guide.md, 'Serving') and the README's ONNX Runtime quickstart,
run as they are written.

Every ``cosent-tf`` line of their ``sh`` blocks runs, in order, in a folder laid out like a clone
(``runs/mine/model``, a feature model; ``runs/cross/model``, an interaction model trained with
``--head pooler``; ``test.tsv`` and ``sentences.txt``), and what the commands write is checked
against the model folders themselves. Their ``python onnx-reference`` blocks need onnxruntime with
transformers or sentence-transformers and no TensorFlow: they run in the ONNX reference environment
(``COSENT_ONNX_REFERENCE_PYTHON``, default ``.venv-onnx-reference/bin/python``, which ``make test``
builds), and their cosines, vectors and scores are compared with cosent-tf's on the model folders.
(tests/test_readme.py runs the pages' plain ``python`` blocks in this environment; the info string
``onnx-reference`` keeps these out of them.)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess

import numpy as np
import pytest

from cosent_tf.cli import main as cosent_tf
from tests.helpers import ROOT, make_model_dir, tiny_pairs, write_config

# absolute: the examples run in a folder of their own, and `make test` names it relative to the clone
REFERENCE_PYTHON = os.path.abspath(
    os.environ.get("COSENT_ONNX_REFERENCE_PYTHON", os.path.join(ROOT, ".venv-onnx-reference", "bin", "python"))
)
# The texts the pages' examples encode: the cosine of the first two is what the ONNX Runtime examples print.
TEXTS = ["花呗怎么还款", "花呗如何还钱"]
TOLERANCE = 1e-5


def read_page(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def section(text, heading):
    """From the line ``heading`` to the next heading of the same or a higher level (outside code blocks)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n")
    level, fenced = heading.index(" "), False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
    else:
        end = len(lines)
    return "".join(lines[start:end])


SERVING = section(read_page("docs/guide.md"), "### Serving")
README_ONNX = section(read_page("README.md"), "## Quickstart: ONNX Runtime")
SECTIONS = {"docs/guide.md, 'Serving'": SERVING, "README.md, 'Quickstart: ONNX Runtime'": README_ONNX}


def blocks(text, info):
    return re.findall(rf"^```{re.escape(info)}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def commands(text):
    """The ``cosent-tf`` lines of ``text``'s sh blocks, each as its arguments (comments dropped)."""
    found = []
    for block in blocks(text, "sh"):
        for line in block.splitlines():
            if line.startswith("cosent-tf "):
                found.append(shlex.split(line, comments=True)[1:])
    return found


def reference_blocks(text, needs):
    return [block for block in blocks(text, "python onnx-reference") if needs in block]


def test_each_route_of_the_serving_section_has_what_runs_in_a_test():
    """The blocks these tests run are there: a failure here means a page changed, not the code."""
    exports = [args for args in commands(SERVING) if args[0] == "export"]
    assert any("--format" not in args for args in exports)  # the SavedModel on raw strings
    assert any(args[args.index("--inputs") + 1] == "ids" for args in exports if "--inputs" in args)
    onnx = [args for args in exports if "onnx" in args]
    assert any({"--quantize", "int8", "--check"} <= set(args) for args in onnx)
    assert any("--runtime" in args for args in commands(SERVING))
    assert len(reference_blocks(SERVING, "onnxruntime")) == 1
    assert len(reference_blocks(SERVING, "SentenceTransformer(")) == 1
    assert len(reference_blocks(README_ONNX, "onnxruntime")) == 1
    assert any("--format" in args and "onnx" in args for args in commands(README_ONNX))
    for text in (SERVING, README_ONNX):
        for block in reference_blocks(text, "onnxruntime"):
            assert all(sentence in block for sentence in TEXTS), block
    # test_readme.py runs the pages' ```python blocks in the main environment, which has no transformers
    from tests.test_readme import PYTHON_BLOCKS

    assert not any("onnxruntime" in block or "sentence_transformers" in block for _, block in PYTHON_BLOCKS)


def test_each_page_that_loads_an_export_in_sentence_transformers_says_which_version_to_install():
    """sentence-transformers 6 cannot install its ONNX extra: a page that shows ``backend="onnx"``
    gives the install command of the environment the tests check that route in (the Makefile's)."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        (requirement,) = set(re.findall(r'"(sentence-transformers\[onnx\][^"]*)"', f.read()))
    for name, text in SECTIONS.items():
        assert 'backend="onnx"' in text, name
        assert f'pip install "{requirement}"' in " ".join(text.split()), name


def write_inputs(root):
    """The folders and files the sections' commands read, as a user would have them."""
    config = write_config(root / "config.json")
    from tests.helpers import made_vocab

    vocab = made_vocab()  # CJK ideographs from U+4E00 on: the examples' texts are in it
    # Mean pooling: a random model's [CLS] vectors are nearly all alike, which would compare nothing
    make_model_dir(root / "runs" / "mine" / "model", config, pooling="last-avg", maxlen=32, vocab=vocab)
    make_model_dir(
        root / "runs" / "cross" / "model", config, kind="interaction", head_input="pooler", maxlen=32, vocab=vocab
    )
    rows = tiny_pairs(np.random.default_rng(0), 60, scores=False)
    (root / "test.tsv").write_text("".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows), encoding="utf-8")
    sentences = TEXTS + [a for a, _, _ in rows[:6]] + ["为什么我的花呗不能用了？" * 5]  # a padded batch, a cut text
    (root / "sentences.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A folder where every cosent-tf line of the two sections has run, in order; (the folder,
    {the command line: what it printed})."""
    root = tmp_path_factory.mktemp("serving-docs")
    write_inputs(root)
    printed = {}
    with contextlib.chdir(root):
        for text in SECTIONS.values():
            for args in commands(text):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    status = cosent_tf(args)
                assert status in (None, 0), f"cosent-tf {shlex.join(args)}: exit status {status}"
                printed[shlex.join(args)] = out.getvalue()
    return root, printed


def engine_encoder(root, **load):
    from cosent_tf import SentenceEncoder

    return SentenceEncoder.load(str(root / "runs" / "mine" / "model"), **load)


def run_reference(root, code, torch=True, args=()):
    """Run ``code`` (with the command-line arguments ``args``) in the ONNX reference environment, in
    ``root``, with transformers told not to use TensorFlow (nor PyTorch, unless ``torch``); fail if
    one of them was imported. Its stdout."""
    if not os.path.isfile(REFERENCE_PYTHON):
        pytest.fail(
            f"the ONNX reference environment is missing: {REFERENCE_PYTHON} does not exist. Build it with "
            "`make test` (it makes .venv-onnx-reference), or point COSENT_ONNX_REFERENCE_PYTHON at a Python with "
            'onnxruntime, transformers<4.58 and "sentence-transformers[onnx]>=5,<6"'
        )
    guard = "\nimport sys\nassert 'tensorflow' not in sys.modules, 'the block imported TensorFlow'\n"
    if not torch:
        guard += "assert 'torch' not in sys.modules, 'the block imported PyTorch'\n"
    env = {**os.environ, "USE_TF": "0", "USE_TORCH": "1" if torch else "0", "PYTHONPATH": ""}
    # the blocks' own environment (onnxruntime, transformers, no TensorFlow), and the guard needs a
    # fresh interpreter to see what the block alone imported
    completed = subprocess.run(
        [REFERENCE_PYTHON, "-c", code + guard, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed.stdout


@pytest.mark.slow
def test_the_serving_commands_write_what_the_section_says(clone):
    root, printed = clone
    assert os.path.isfile(root / "exports" / "mine" / "saved_model.pb")
    assert os.path.isfile(root / "exports" / "mine-ids" / "assets.extra" / "vocab.txt")
    with open(root / "exports" / "mine-onnx" / "cosent_tf_export.json", encoding="utf-8") as f:
        record = json.load(f)
    assert record["export"] == "sentence-transformers"
    assert set(record["onnx"]) == {"onnx/model.onnx", "onnx/model_qint8.onnx"}
    assert record["check"]["pairs"] == 60 and set(record["check"]["int8"]) == {"spearman", "accuracy"}
    with open(root / "exports" / "cross-onnx" / "cosent_tf_export.json", encoding="utf-8") as f:
        assert json.load(f)["export"] == "sequence-classification"
    (said,) = [out for line, out in printed.items() if line.startswith("export") and "exports/mine-onnx" in line]
    assert "exports/mine-onnx: ONNX export (sentence-transformers): onnx/model.onnx, onnx/model_qint8.onnx" in said
    figures = r"on test\.tsv \(60 pairs\): spearman -?\d+\.\d\d, accuracy \d+\.\d\d"
    assert re.search("float32 " + figures, said) and re.search("int8 " + figures, said), said

    # encode --runtime onnx: the float32 file gives the model folder's vectors
    sentences = (root / "sentences.txt").read_text(encoding="utf-8").splitlines()
    expected = engine_encoder(root).encode(sentences)
    np.testing.assert_allclose(np.load(root / "vectors.npy"), expected, atol=TOLERANCE)

    # similarity --runtime onnx --precision int8: the int8 file's cosine, computed here with onnxruntime
    (similarity,) = [out for line, out in printed.items() if line.startswith("similarity") and "int8" in line]
    import onnxruntime

    from cosent_tf.models.tokenization import SentenceTokenizer

    tokenizer = SentenceTokenizer(str(root / "exports" / "mine-onnx" / "vocab.txt"), 32)
    session = onnxruntime.InferenceSession(str(root / "exports" / "mine-onnx" / "onnx" / "model_qint8.onnx"))
    # one text a call, as similarity encodes two texts: int8 activations are scaled per batch, so a text's
    # int8 vector depends on what else is in its batch
    vectors = []
    for row in tokenizer.encode_all(TEXTS):
        ids = np.asarray([row], np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        vectors.append(session.run(["sentence_embedding"], feed)[0][0])
    vectors = np.asarray(vectors) / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert float(similarity.split()[0]) == pytest.approx(float(vectors[0] @ vectors[1]), abs=TOLERANCE)


@pytest.fixture(scope="module")
def onnx_runtime_printed(clone):
    """{page: what its ONNX Runtime block printed}. The pages' blocks differ, and each runs as written,
    one after the other in one interpreter of the reference environment (starting one, with
    transformers, costs more than the blocks), each in a namespace of its own, and each is checked
    to have imported neither TensorFlow nor PyTorch before the next runs."""
    root, _ = clone
    program = (
        "import contextlib, io, json, sys\n"
        "printed = {}\n"
        "for page, block in json.loads(sys.argv[1]):\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        exec(compile(block, page, 'exec'), {'__name__': '__main__'})\n"
        "    for module in ('tensorflow', 'torch'):\n"
        "        assert module not in sys.modules, f'{page}: the block imported {module}'\n"
        "    printed[page] = out.getvalue()\n"
        "print(json.dumps(printed))\n"
    )
    pages = [(page, block) for page in SECTIONS for block in reference_blocks(SECTIONS[page], "onnxruntime")]
    assert len(pages) == len(SECTIONS)
    out = run_reference(root, program, torch=False, args=[json.dumps(pages)])  # the tokenizer alone: no PyTorch
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("page", list(SECTIONS))
def test_the_onnx_runtime_example_prints_cosent_tf_s_cosine(clone, onnx_runtime_printed, page):
    root, _ = clone
    printed = onnx_runtime_printed[page]
    expected = float(engine_encoder(root).similarity(TEXTS[:1], TEXTS[1:])[0])
    assert float(printed.strip().splitlines()[-1]) == pytest.approx(expected, abs=TOLERANCE)


@pytest.mark.slow
def test_the_sentence_transformers_block_gives_cosent_tf_s_vectors_and_scores(clone):
    from cosent_tf import PairScorer, SentenceEncoder

    root, _ = clone
    (block,) = reference_blocks(SERVING, "SentenceTransformer(")
    save = (
        "\nimport numpy as np\n"
        f"np.savez('st.npz', vectors=vectors, scores=scores, int8=int8.encode({TEXTS!r}), "
        "int8_file=int8[0].auto_model.session._model_path)\n"
    )
    run_reference(root, block + save)
    got = np.load(root / "st.npz")
    np.testing.assert_allclose(got["vectors"], engine_encoder(root).encode(TEXTS), atol=TOLERANCE)
    scorer = PairScorer.load(str(root / "runs" / "cross" / "model"))
    np.testing.assert_allclose(np.ravel(got["scores"]), scorer.score(TEXTS[:1], TEXTS[1:]), atol=TOLERANCE)
    assert str(got["int8_file"]).endswith(os.path.join("onnx", "model_qint8.onnx"))
    onnx_int8 = SentenceEncoder.load(str(root / "exports" / "mine-onnx"), runtime="onnx", precision="int8")
    np.testing.assert_allclose(got["int8"], onnx_int8.encode(TEXTS), atol=TOLERANCE)
