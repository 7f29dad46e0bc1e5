"""The README's Keras 3 quickstart, run as it is written, on the backend of this run of the suite.

Its block is fenced ```` ```python keras3 ````: tests/test_readme.py runs the plain ``python`` blocks
in a Keras 2 process, which could not import cosent_tf.keras3; this one runs here, in a Keras 3
process, once per backend (``make test-keras3``).
"""

import os
import re

import numpy as np
import pytest

from tests.keras3.support import ROOT, SHARED_DATA, SHARED_VOCAB

README = os.path.join(ROOT, "README.md")
SECTION = "## Quickstart: Keras 3"


def readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def keras3_blocks(text):
    return re.findall(r"^```python keras3\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def quickstart():
    text = readme()
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    (block,) = keras3_blocks(section)
    return section, block


def test_the_readme_has_one_keras3_block_in_its_keras3_section():
    section, _ = quickstart()
    assert len(keras3_blocks(readme())) == 1
    # what the section promises besides the code: the extra, and the one-Keras-per-process rule
    assert "pip install 'cosent-tf[keras3]'" in section
    assert "One Keras per process" in section and "docs/keras3.md" in section


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason=f"needs the shared data ({SHARED_DATA})")
def test_the_keras3_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    import keras

    from cosent_tf.keras3 import CoSENTLoss
    from cosent_tf.models.tokenization import SentenceTokenizer

    # a clone's layout: the repository root as the working folder, the shared data at ../shared/data
    (tmp_path / "shared").mkdir()
    os.symlink(os.path.abspath(SHARED_DATA), tmp_path / "shared" / "data")
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path / "clone")
    _, block = quickstart()
    namespace = {"__name__": "readme_keras3"}
    exec(compile(block, "README.md python keras3 block", "exec"), namespace)

    encoder, ids, labels = namespace["encoder"], namespace["ids"], namespace["labels"]
    assert isinstance(encoder.loss, CoSENTLoss) and encoder.loss.scale == 20
    # the rows are the interleaved pairs, tokenised by this project's tokenizer and padded with 0
    tokenizer = SentenceTokenizer(SHARED_VOCAB, maxlen=32)
    for row, text in zip(ids, namespace["texts"]):
        expected = tokenizer.encode(text)
        assert row[: len(expected)].tolist() == expected and not row[len(expected) :].any()
    assert namespace["texts"][::2] == [first for first, _, _ in namespace["pairs"]]
    np.testing.assert_array_equal(labels[::2], labels[1::2])
    # one epoch of one batch of 4 pairs, a finite positive CoSENT loss (two pairs are ordered against two)
    (loss,) = namespace["history"].history["loss"]
    assert np.isfinite(loss) and loss > 0
    assert f"(2, {encoder.output_shape[-1]})" in capsys.readouterr().out
    assert encoder.output_shape[-1] == 32 and namespace["vectors"].dtype == np.float32
    assert keras.backend.backend() == os.environ["KERAS_BACKEND"]
