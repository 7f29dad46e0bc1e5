"""The independent side of the ONNX export's sentence-transformers tests; runs in the ONNX
reference environment (sentence-transformers 5.x with its onnx extra: optimum-onnx and
onnxruntime, which need transformers < 4.58, so not the environment of hf_reference.py).

Imports sentence-transformers, never cosent_tf or TensorFlow: the tests
(tests/export/test_onnx_sentence_transformers.py) call it with ``COSENT_ONNX_REFERENCE_PYTHON``.

    onnx_reference.py FOLDER TEXTS.json OUT.npz [--batch-size N]

FOLDER is an export of ``cosent-tf export --format onnx``: a sentence-transformers folder
(modules.json) is loaded with ``SentenceTransformer(FOLDER, backend="onnx")`` and encodes
TEXTS.json's ``sentences``; any other is loaded with ``CrossEncoder(FOLDER, backend="onnx")`` and
scores its ``pairs`` (raw logits: the identity activation). Each ONNX file of the folder that
exists is loaded in turn, named by ``model_kwargs={"file_name": ...}``, with ``export=False`` so
that a missing file fails rather than being exported anew from the folder's PyTorch weights.

OUT.npz holds, for each precision loaded (``float32``: onnx/model.onnx, ``int8``:
onnx/model_qint8.onnx): ``<precision>`` (the vectors, as the folder's modules give them, or the
logits: [pairs] for one label, [pairs, 2] for two), ``<precision>_class`` (the class of the model
under sentence-transformers' Transformer module) and ``<precision>_file`` (the ONNX file its
ONNX Runtime session was made from), so that the test can assert that the ONNX backend ran on
the file it wrote; ``float32_io_binding``, the float32 outputs again with optimum's IO binding
(its default on a GPU), or ``float32_io_binding_error``, why that failed; and ``kind``
(``sentence-transformers`` or ``cross-encoder``).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from sentence_transformers import CrossEncoder, SentenceTransformer

FILES = {"float32": "onnx/model.onnx", "int8": "onnx/model_qint8.onnx"}


def read_texts(path):
    with open(path, encoding="utf-8") as f:
        texts = json.load(f)
    return texts.get("sentences", []), [tuple(pair) for pair in texts.get("pairs", [])]


def onnx_model(loaded):
    """(the class name of the model under the first module, the file its ONNX Runtime session
    was made from, or '' when it has none)."""
    inner = loaded[0].model
    session = getattr(inner, "session", None)
    path = getattr(session, "_model_path", "") if session is not None else ""
    return type(inner).__name__, os.path.abspath(path) if path else ""


def predict(folder, is_st, sentences, pairs, batch_size, **model_kwargs):
    """(the model loaded with the ONNX backend, its outputs on the texts)."""
    model_kwargs = {"export": False, "provider": "CPUExecutionProvider", **model_kwargs}
    if is_st:
        model = SentenceTransformer(folder, backend="onnx", device="cpu", model_kwargs=model_kwargs)
        values = model.encode(sentences, batch_size=batch_size, convert_to_numpy=True)
    else:
        model = CrossEncoder(folder, backend="onnx", device="cpu", model_kwargs=model_kwargs)
        values = model.predict(pairs, batch_size=batch_size, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    return model, np.asarray(values, dtype=np.float32)


def run(folder, texts_path, out, batch_size):
    sentences, pairs = read_texts(texts_path)
    is_st = os.path.exists(os.path.join(folder, "modules.json"))
    outputs = {"kind": np.array("sentence-transformers" if is_st else "cross-encoder")}
    for precision, file_name in FILES.items():
        if not os.path.exists(os.path.join(folder, file_name)):
            continue
        model, outputs[precision] = predict(folder, is_st, sentences, pairs, batch_size, file_name=file_name)
        name, path = onnx_model(model)
        outputs[f"{precision}_class"] = np.array(name)
        outputs[f"{precision}_file"] = np.array(path)
    if "float32" in outputs:
        # IO binding (optimum's default with CUDAExecutionProvider) sizes each output from the
        # names of the graph's dynamic dimensions, which must therefore match the inputs' names
        try:
            _, outputs["float32_io_binding"] = predict(
                folder, is_st, sentences, pairs, batch_size, file_name=FILES["float32"], use_io_binding=True
            )
        except Exception as error:  # recorded for the test to show
            outputs["float32_io_binding_error"] = np.array(f"{type(error).__name__}: {error}")
    if "float32" not in outputs:
        sys.exit(f"{folder}: no {FILES['float32']} in it: not an ONNX export")
    np.savez(out, **outputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("texts")
    parser.add_argument("out")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    run(args.folder, args.texts, args.out, args.batch_size)


if __name__ == "__main__":
    main()
