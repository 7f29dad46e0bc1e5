"""Encoding speed of the ONNX export against this engine, plain ONNX Runtime and sentence-transformers.

One command (``make bench-onnx``) measures, for the small model and for BERT-base (random weights,
``common.MODELS``), the encode rate (sentences/s, tokenisation included) of the first BQ test
sentences in batches of 64, maxlen 64, [CLS] pooling, of:

* this engine: ``SentenceEncoder.load(model_dir, precision).encode`` in float32 and bf16;
* its ONNX export (``export_onnx(model_dir, export_dir, quantize="int8")``, the folder
  ``cosent-tf export --format onnx --quantize int8`` writes) run by the project's own path,
  ``SentenceEncoder.load(export_dir, runtime="onnx", precision=...)``, float32 and int8;
* plain ONNX Runtime, as a user of the Hugging Face folder gets it: the export's Hugging Face
  model (the files ``cosent-tf export --format hf`` writes) exported by ``torch.onnx.export``
  (opset 17, ``dynamo=False``, a wrapper module since transformers 5 takes keywords) and quantised
  by ``onnxruntime.quantization.quantize_dynamic`` (QInt8, its defaults), run in an
  ``InferenceSession`` with its default options, the Hugging Face tokenizer, batches sorted by
  length as sentence-transformers sorts them, the [CLS] row of ``last_hidden_state``; int8 and
  float32;
* sentence-transformers on the export folder: its default path (torch, float32) and, where its
  ONNX backend installs (``--onnx-reference-python``), ``backend="onnx"`` on ``onnx/model.onnx``
  and on ``onnx/model_qint8.onnx``.

Each contestant runs in a process of its own, loads its model and warms up once; then the
contestants take turns, ``common.REPEATS`` rounds of one timed ``encode`` call each (the order
rotating between rounds), so that a change in the machine's load falls on all of them alike. Every
call encodes the same first N sentences: N is what the slowest contestant encodes in
``--time-budget / REPEATS`` seconds (judged from its warm-up), at most ``common.ENCODE_SENTENCES``
and at least ``MIN_SENTENCES``. Each contestant's vectors of the first ``DIFF_SENTENCES`` sentences
are compared, normalised, with this engine's float32 ones (largest absolute difference).

It writes ``benchmarks/onnx_results.json`` (every repetition) and ``benchmarks/ONNX.md`` (medians
with min-max, the ratios the issue's targets are stated in). A contestant that fails is recorded
with its error and the others are still measured; the command then exits with status 1. The rows
of a Python that is missing or lacks its packages are recorded as skipped, with the reason.

    .venv/bin/python benchmarks/onnx_bench.py [--bench-python .venv-reference/bin/python]
        [--onnx-reference-python .venv-onnx-reference/bin/python] [--time-budget 24] [--cpus 0,1]

The same file is the contestants' program (``onnx_bench.py worker NAME FOLDER``, in the Python
its row names) and the set-up steps' (``prepare``, ``prepare-plain``); only ``common`` is imported
at its top, so it runs in the reference environments, which have no cosent_tf.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

# Every call encodes at least this many sentences (slow contestants then go past the budget).
MIN_SENTENCES = 256
# The vectors compared with this engine's float32 ones: the first of the encoded sentences.
DIFF_SENTENCES = 256
MARK = "@@onnx-bench "  # starts the lines a worker says to the orchestrator (libraries print too)
ENGINE_REFERENCE = "engine-float32"  # the vectors every other contestant is compared with

# name: (contestant, precision, the Python it runs in: "engine", "plain", "bench" or "onnx-reference")
CONTESTANTS = {
    "engine-float32": ("this engine", "float32", "engine"),
    "engine-bf16": ("this engine", "bf16", "engine"),
    "engine-onnx-float32": ('this engine\'s ONNX export, `runtime="onnx"`', "float32", "engine"),
    "engine-onnx-int8": ('this engine\'s ONNX export, `runtime="onnx"`', "int8", "engine"),
    "plain-ort-float32": ("plain ONNX Runtime, torch.onnx export of the Hugging Face folder", "float32", "plain"),
    "plain-ort-int8": ("plain ONNX Runtime, torch.onnx export + `quantize_dynamic`", "int8", "plain"),
    "st-torch-float32": ("sentence-transformers, torch (its default)", "float32", "bench"),
    "st-onnx-float32": ('sentence-transformers, `backend="onnx"` on the export', "float32", "onnx-reference"),
    "st-onnx-int8": ('sentence-transformers, `backend="onnx"` on the export', "int8", "onnx-reference"),
}
# The project's ONNX paths; the fastest of them is judged against the targets.
PROJECT_ONNX = ("engine-onnx-float32", "engine-onnx-int8")
# (label, this row, the other row, target or None); "fastest" stands for the faster of PROJECT_ONNX.
# The targets are the issue's, for BERT-base; on the small model the ratios are shown without one.
RATIOS = [
    ("fastest ONNX path vs plain ONNX Runtime int8", "fastest", "plain-ort-int8", 1.0),
    ("fastest ONNX path vs sentence-transformers' default (torch float32)", "fastest", "st-torch-float32", 1.2),
    ("ONNX int8 vs plain ONNX Runtime int8", "engine-onnx-int8", "plain-ort-int8", None),
    ("ONNX float32 vs plain ONNX Runtime float32", "engine-onnx-float32", "plain-ort-float32", None),
    ("ONNX int8 vs sentence-transformers ONNX int8", "engine-onnx-int8", "st-onnx-int8", None),
    ("ONNX float32 vs sentence-transformers ONNX float32", "engine-onnx-float32", "st-onnx-float32", None),
    ("ONNX float32 vs this engine float32", "engine-onnx-float32", "engine-float32", None),
    ("ONNX int8 vs this engine bf16", "engine-onnx-int8", "engine-bf16", None),
    ("fastest ONNX path vs this engine's fastest (float32, bf16)", "fastest", "engine-fastest", None),
]
TARGET_MODELS = ("base",)
MODEL_NAMES = {"small": "small (L4 H312 A12 I1248)", "base": "BERT-base (L12 H768 A12 I3072)"}
PLAIN_DIR = "plain"  # the plain ONNX Runtime files, beside the model folder and the export
PLAIN_FILES = {"float32": "model.onnx", "int8": "model_qint8.onnx"}
ST_ONNX_FILES = {"float32": "onnx/model.onnx", "int8": "onnx/model_qint8.onnx"}


# --- the workers (any of the three environments) --------------------------------------------------


def say(**message):
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


def normalized(vectors):
    import numpy as np

    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def engine_encoder(name, folder):
    """``encode(texts)`` of this engine, or of its ONNX export through the project's own path."""
    import cosent_tf as ct

    _, precision, _ = CONTESTANTS[name]
    if name.startswith("engine-onnx-"):
        encoder = ct.SentenceEncoder.load(os.path.join(folder, "export"), precision=precision, runtime="onnx")
    else:
        encoder = ct.SentenceEncoder.load(os.path.join(folder, "model"), precision)
    return lambda texts: encoder.encode(texts, batch_size=common.ENCODE_BATCH, show_progress=False), {}


def plain_encoder(name, folder):
    """``encode(texts)`` as a user of plain ONNX Runtime writes it: the Hugging Face tokenizer, an
    ``InferenceSession`` with default options, texts sorted by length (as sentence-transformers
    sorts them) in batches padded to their longest, the [CLS] row, normalised."""
    import numpy as np
    import onnxruntime
    from transformers import AutoTokenizer

    _, precision, _ = CONTESTANTS[name]
    export = os.path.join(folder, "export")
    tokenizer = AutoTokenizer.from_pretrained(export)
    session = onnxruntime.InferenceSession(
        os.path.join(folder, PLAIN_DIR, PLAIN_FILES[precision]), providers=["CPUExecutionProvider"]
    )
    wanted = {i.name for i in session.get_inputs()}

    def encode(texts):
        order = np.argsort([-len(text) for text in texts], kind="stable")
        parts = []
        for start in range(0, len(texts), common.ENCODE_BATCH):
            batch = [texts[i] for i in order[start : start + common.ENCODE_BATCH]]
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=common.MAXLEN, return_tensors="np")
            feed = {key: value.astype(np.int64) for key, value in encoded.items() if key in wanted}
            (hidden,) = session.run(["last_hidden_state"], feed)
            parts.append(hidden[:, 0])
        vectors = np.concatenate(parts)
        vectors[order] = vectors.copy()  # back into input order
        return normalized(vectors)

    return encode, {"onnxruntime": onnxruntime.__version__}


def st_encoder(name, folder):
    """``encode(texts)`` of ``SentenceTransformer`` on the export folder: torch, or its ONNX backend."""
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    _, precision, _ = CONTESTANTS[name]
    export = os.path.join(folder, "export")
    if name.startswith("st-onnx-"):
        model = SentenceTransformer(
            export, device="cpu", backend="onnx", model_kwargs={"file_name": ST_ONNX_FILES[precision]}
        )
    else:
        model = SentenceTransformer(export, device="cpu")
    model.eval()

    def encode(texts):
        with torch.inference_mode():
            return model.encode(texts, batch_size=common.ENCODE_BATCH, show_progress_bar=False, convert_to_numpy=True)

    return encode, {
        "sentence_transformers": sentence_transformers.__version__,
        "torch_threads": torch.get_num_threads(),
    }


ENCODERS = {"engine": engine_encoder, "plain": plain_encoder, "bench": st_encoder, "onnx-reference": st_encoder}


def worker(name, folder):
    """Load contestant ``name``, warm it up, save its vectors of the first sentences, then encode the
    first N sentences once per ``encode N`` line read, saying each call's rate, until ``quit``."""
    import numpy as np

    sentences = common.test_sentences()
    encode, details = ENCODERS[CONTESTANTS[name][2]](name, folder)
    warmup = sentences[: max(common.WARMUP_BATCHES * common.ENCODE_BATCH, DIFF_SENTENCES)]
    start = time.perf_counter()
    vectors = np.asarray(encode(warmup), dtype=np.float32)
    warmup_rate = len(warmup) / (time.perf_counter() - start)
    np.save(os.path.join(folder, "vectors", f"{name}.npy"), vectors[:DIFF_SENTENCES])
    say(ready=True, warmup_rate=warmup_rate, python=platform.python_version(), **details)
    for line in sys.stdin:
        command = line.split()
        if command[:1] == ["encode"]:
            texts = sentences[: int(command[1])]
            start = time.perf_counter()
            vectors = encode(texts)
            seconds = time.perf_counter() - start
            if len(vectors) != len(texts):
                raise SystemExit(f"{name}: encode returned {len(vectors)} vectors for {len(texts)} sentences")
            say(rate=len(texts) / seconds, seconds=seconds)
        elif command[:1] == ["quit"]:
            break
    say(peak_rss_mib=round(common.peak_rss_mib(), 1))


def prepare(folder):
    """The random model folder (``this_engine.save_random_model``) and its ONNX export with int8."""
    import this_engine

    from cosent_tf.export import export_onnx

    model_dir, export = os.path.join(folder, "model"), os.path.join(folder, "export")
    this_engine.save_random_model(model_dir)
    start = time.perf_counter()
    written = export_onnx(model_dir, export, quantize="int8")
    say(export_seconds=time.perf_counter() - start, layout=written.layout, files=written.files)


def prepare_plain(folder):
    """The plain ONNX Runtime files: the export's Hugging Face model through ``torch.onnx.export``
    and ``quantize_dynamic`` (QInt8), as that route's users write it."""
    import onnxruntime
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    export = os.path.join(folder, "export")
    bert = AutoModel.from_pretrained(export).eval()
    tokenizer = AutoTokenizer.from_pretrained(export)

    class Wrapper(torch.nn.Module):  # transformers 5's models take their inputs as keywords
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tokenizer(["花呗如何还钱", "借呗的额度怎么提高"], padding=True, return_tensors="pt")
    os.makedirs(os.path.join(folder, PLAIN_DIR))
    float_path = os.path.join(folder, PLAIN_DIR, PLAIN_FILES["float32"])
    start = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(
            Wrapper(bert),
            tuple(example[name] for name in names),
            float_path,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "length"} for name in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )
    exported = time.perf_counter()
    quantize_dynamic(float_path, os.path.join(folder, PLAIN_DIR, PLAIN_FILES["int8"]), weight_type=QuantType.QInt8)
    say(
        export_seconds=exported - start,
        quantize_seconds=time.perf_counter() - exported,
        versions={
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    )


# --- the orchestrator (the engine's environment) --------------------------------------------------

PROBES = {  # what a Python needs for its rows
    "plain": "import torch, transformers, onnx, onnxruntime",
    "bench": "import sentence_transformers, torch",
    "onnx-reference": "import sentence_transformers, onnxruntime, optimum.onnxruntime",
}


def probe(python, imports):
    """None when ``python`` runs ``imports``, else why not."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return f"{python}: not found"
    completed = subprocess.run([python, "-c", imports], capture_output=True, text=True)
    if completed.returncode:
        reason = (completed.stderr.strip().splitlines() or [f"exit status {completed.returncode}"])[-1]
        return f"{python}: cannot `{imports}` ({reason})"
    return None


def choose_pythons(args):
    """{role: Python} of the roles that can run, and {role: why not} of those that cannot.

    Plain ONNX Runtime runs in ``--plain-onnx-python``, or else in the first of the benchmark's and
    the ONNX reference's Pythons that has torch, transformers, onnx and onnxruntime."""
    pythons, missing = {"engine": sys.executable}, {}
    for role, python in (("bench", args.bench_python), ("onnx-reference", args.onnx_reference_python)):
        reason = probe(python, PROBES[role])
        if reason is None:
            pythons[role] = python
        else:
            missing[role] = reason
    candidates = [args.plain_onnx_python] if args.plain_onnx_python else [args.bench_python, args.onnx_reference_python]
    reasons = []
    for python in candidates:
        reason = probe(python, PROBES["plain"])
        if reason is None:
            pythons["plain"] = python
            break
        reasons.append(reason)
    else:
        missing["plain"] = "; ".join(reasons)
    return pythons, missing


def check_environment():
    problems = [
        f"{path}: not found; set COSENT_SHARED_DATA to the shared data folder"
        for path in (common.vocab_path(), common.bq_path("test"))
        if not os.path.isfile(path)
    ]
    reason = probe(sys.executable, "import onnxruntime, tf2onnx, onnx")
    if reason is not None:
        problems.append(f'{reason}; install the ONNX extra: pip install -e ".[onnx]"')
    if problems:
        raise SystemExit("the ONNX benchmark cannot start:\n  " + "\n  ".join(problems))


class Worker:
    """A contestant's process: its lines to and from the orchestrator; stderr goes to a log file."""

    def __init__(self, name, python, folder, env, cpus):
        import run

        self.name, self.log_path = name, os.path.join(folder, "logs", f"{name}.log")
        self.log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 (open while the worker lives; close())
        self.command = [python, os.path.abspath(__file__), "worker", name, folder]
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            preexec_fn=run.pinned_to(cpus),
        )

    def read(self):
        """The worker's next message; RuntimeError with its log's end when it ends instead."""
        for line in self.process.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
        self.process.wait()
        raise RuntimeError(f"exit status {self.process.returncode}: {tail(self.log_path)}")

    def ask(self, line):
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # read() says why it ended
        return self.read()

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def tail(path, chars=2000):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()[-chars:]


def run_step(step, python, folder, env, cpus):
    """A set-up step (``prepare``, ``prepare-plain``) in its own process: its message, or {"error": ...}."""
    import run

    log_path = os.path.join(folder, "logs", f"{step}.log")
    command = [python, os.path.abspath(__file__), step, folder]
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        completed = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=log, text=True, env=env, preexec_fn=run.pinned_to(cpus)
        )
    messages = [json.loads(line[len(MARK) :]) for line in completed.stdout.splitlines() if line.startswith(MARK)]
    if completed.returncode or not messages:
        print(f"FAILED: {' '.join(command)}\n{tail(log_path, 3000)}", flush=True)
        return {"error": f"{step}: exit status {completed.returncode}: {tail(log_path)}"}
    return {**messages[-1], "wall_seconds": round(time.perf_counter() - start, 1)}


def measure_model(model, pythons, missing, args, env):
    """Every contestant's figures for ``model``: {name: record}, and the set-up's."""
    import numpy as np

    records = {}
    for name, (_, _, role) in CONTESTANTS.items():
        if role in missing:
            records[name] = {"skipped": missing[role]}
    with tempfile.TemporaryDirectory(prefix=f"onnx-bench-{model}-") as folder:
        for sub in ("logs", "vectors"):
            os.makedirs(os.path.join(folder, sub))
        env = {**env, "BENCH_MODEL": model}
        setup = {"prepare": run_step("prepare", sys.executable, folder, env, args.cpus)}
        print(f"{model}: the model and its export: {setup['prepare']}", flush=True)
        if "error" not in setup["prepare"] and "plain" in pythons:
            setup["prepare-plain"] = run_step("prepare-plain", pythons["plain"], folder, env, args.cpus)
            print(f"{model}: the plain ONNX Runtime files: {setup['prepare-plain']}", flush=True)
        workers = {}
        try:
            for name, (_, _, role) in CONTESTANTS.items():
                if name in records:
                    continue
                failed_step = next((s for s in ("prepare", "prepare-plain") if "error" in setup.get(s, {})), None)
                if failed_step is not None and (failed_step == "prepare" or role == "plain"):
                    records[name] = {"error": f"set-up step {failed_step} failed"}
                    continue
                start = time.perf_counter()
                worker = Worker(name, pythons[role], folder, env, args.cpus)
                try:
                    records[name] = {**worker.read(), "python": pythons[role]}
                    records[name]["start_seconds"] = round(time.perf_counter() - start, 1)
                    workers[name] = worker
                    print(
                        f"{model} {name}: ready in {records[name]['start_seconds']:.0f} s, "
                        f"warm-up {records[name]['warmup_rate']:.1f} sentences/s",
                        flush=True,
                    )
                except RuntimeError as error:
                    records[name] = {"error": str(error), "command": " ".join(worker.command)}
                    worker.close()
                    print(f"FAILED: {model} {name}: {error}", flush=True)
            sentences = sentences_per_call([records[name]["warmup_rate"] for name in workers], args.time_budget)
            print(f"{model}: {sentences} sentences per call", flush=True)
            names = list(workers)
            for repeat in range(common.REPEATS):
                turn = repeat % max(len(names), 1)
                for name in names[turn:] + names[:turn]:
                    if name not in workers:
                        continue
                    try:
                        reply = workers[name].ask(f"encode {sentences}")
                    except RuntimeError as error:
                        records[name] = {"error": str(error), "command": " ".join(workers.pop(name).command)}
                        continue
                    records[name].setdefault("rates", []).append(reply["rate"])
                    print(f"{model} {name}: {reply['rate']:.1f} sentences/s ({reply['seconds']:.1f} s)", flush=True)
            for name, worker in workers.items():
                try:
                    records[name].update(worker.ask("quit"))
                except RuntimeError as error:
                    records[name] = {"error": str(error), "command": " ".join(worker.command)}
        finally:
            for worker in workers.values():
                worker.close()
        reference_path = os.path.join(folder, "vectors", f"{ENGINE_REFERENCE}.npy")
        if os.path.isfile(reference_path):
            reference = np.load(reference_path)
            for name, record in records.items():
                path = os.path.join(folder, "vectors", f"{name}.npy")
                if "rates" in record and name != ENGINE_REFERENCE and os.path.isfile(path):
                    difference = np.abs(normalized(np.load(path)) - normalized(reference))
                    record["max_abs_diff"] = float(difference.max())
    return {"setup": setup, "sentences": sentences if names else None, "contestants": records}


def sentences_per_call(warmup_rates, budget):
    """What the slowest contestant encodes in ``budget / REPEATS`` seconds, within the bounds."""
    if not warmup_rates:
        return MIN_SENTENCES
    affordable = int(min(warmup_rates) * budget / common.REPEATS)
    return max(MIN_SENTENCES, min(common.ENCODE_SENTENCES, affordable))


# --- the report -----------------------------------------------------------------------------------


def rate_summary(record):
    import run

    return run.summary(record["rates"]) if record.get("rates") else None


def median(records, name):
    """The median rate of row ``name`` ("fastest": the faster of PROJECT_ONNX; "engine-fastest": of
    this engine's float32 and bf16), or None when it has none."""
    group = {"fastest": PROJECT_ONNX, "engine-fastest": ("engine-float32", "engine-bf16")}.get(name, (name,))
    medians = [rate_summary(records[n])["median"] for n in group if rate_summary(records.get(n, {}))]
    if len(medians) != len(group):
        return None, None
    best = max(range(len(group)), key=lambda i: medians[i])
    return medians[best], group[best]


def row_state(record):
    if "skipped" in record:
        return f"skipped: {record['skipped']}"
    if "error" in record:
        return "failed"
    return None


def write_report(path, raw):
    from cosent_tf.io import write_text

    import run

    args = argparse.Namespace(**raw["args"])
    started = datetime.datetime.fromisoformat(raw["started"])
    cpus_text = ",".join(map(str, args.cpus or ()))
    pinning = f", every process pinned to CPUs {cpus_text} ({len(args.cpus)} of them)" if args.cpus else ""
    command = f"`.venv/bin/python benchmarks/onnx_bench.py --time-budget {args.time_budget:g}"
    command += f" --cpus {cpus_text}`" if args.cpus else "`"
    lines = [
        "# Speed: ONNX export against this engine, plain ONNX Runtime and sentence-transformers",
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {raw['cpu']}{pinning}, Python {platform.python_version()}, by "
        f"`make bench-onnx` ({command}). Encoding the first BQ test sentences, tokenisation included, in "
        f"batches of {common.ENCODE_BATCH}, maxlen {common.MAXLEN}, [CLS] pooling, random BERTs of two shapes "
        f"({' and '.join(MODEL_NAMES.values())}, vocab 21128). Every contestant runs in a process of its own and "
        f"warms up; then they take turns, {common.REPEATS} rounds of one call each on the same sentences (the "
        f"order rotating), so that the machine's load falls on all alike. Rates are medians of the "
        f"{common.REPEATS} calls with their min–max; `max |Δ|` is the largest difference of the normalised "
        f"vectors of the first {DIFF_SENTENCES} sentences from this engine's float32 ones.",
        "",
        'The export is `export_onnx(model, folder, quantize="int8")` (`cosent-tf export --format onnx --quantize '
        "int8`): the engine's graph through tf2onnx, int8 by onnxruntime's dynamic quantisation, in the "
        "sentence-transformers folder. Plain ONNX Runtime is that folder's Hugging Face model exported by "
        "`torch.onnx.export` (opset 17, `dynamo=False`) and quantised by `quantize_dynamic` (QInt8, its defaults), "
        "run with default session options and the Hugging Face tokenizer, batches sorted by length. "
        'sentence-transformers loads the same folder: torch by default, `backend="onnx"` on '
        "`onnx/model.onnx` and `onnx/model_qint8.onnx`.",
        "",
    ]
    for model, measured in raw["models"].items():
        setup = measured["setup"]
        prepare, plain = setup.get("prepare", {}), setup.get("prepare-plain", {})
        notes = []
        if "export_seconds" in prepare:
            notes.append(f"the export took {prepare['export_seconds']:.0f} s")
        if "versions" in plain:
            versions = ", ".join(f"{k} {v}" for k, v in plain["versions"].items())
            notes.append(
                f"the plain ONNX Runtime files took {plain['export_seconds']:.0f} s + "
                f"{plain['quantize_seconds']:.0f} s to quantise ({versions})"
            )
        sentences = f"{measured['sentences']} sentences per call" if measured["sentences"] else "no call ran"
        lines += [
            f"## {MODEL_NAMES[model]}",
            "",
            f"{sentences}; {'; '.join(notes) or 'the set-up failed'}.",
            "",
            "| contestant | precision | encode sentences/s | warm-up sentences/s | peak RSS (MiB) | max \\|Δ\\| |",
            "|---|---|---|---|---|---|",
        ]
        for name, (label, precision, _) in CONTESTANTS.items():
            record = measured["contestants"][name]
            state = row_state(record)
            if state is not None:
                lines.append(f"| {label} | {precision} | {state} | | | |")
                continue
            diff = "(reference)" if name == ENGINE_REFERENCE else f"{record['max_abs_diff']:.2g}"
            lines.append(
                f"| {label} | {precision} | {run.fmt(rate_summary(record))} | {record['warmup_rate']:.0f} | "
                f"{record['peak_rss_mib']:.0f} | {diff} |"
            )
        lines.append("")
    lines += [
        "## Ratios (medians, same run)",
        "",
        f'"Fastest ONNX path" is the faster of the export\'s float32 and int8 rows ({", ".join(PROJECT_ONNX)}); '
        "the issue's targets are for BERT-base.",
        "",
        "| model | ratio | measured | target | met |",
        "|---|---|---|---|---|",
    ]
    for model, measured in raw["models"].items():
        records = measured["contestants"]
        for label, mine, theirs, target in RATIOS:
            target = target if model in TARGET_MODELS else None
            (mine_rate, mine_name), (their_rate, _) = median(records, mine), median(records, theirs)
            if mine_rate is None or their_rate is None:
                wanted = "" if target is None else f"≥ {target}×"
                lines.append(f"| {model} | {label} | — (a row failed or was skipped) | {wanted} | |")
                continue
            basis = f" ({CONTESTANTS[mine_name][1]})" if mine in ("fastest", "engine-fastest") else ""
            lines.append(run.ratio_row(model, label, mine_rate / their_rate, target, basis))
    failures = [
        (model, name, record)
        for model, measured in raw["models"].items()
        for name, record in [*measured["contestants"].items(), *measured["setup"].items()]
        if "error" in record
    ]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {model} {name}: `{record['error'][-600:]}`" for model, name, record in failures]
    write_text(path, "\n".join(lines) + "\n")


def report(results_path):
    """Write ONNX.md beside ``results_path``; 1 when a row or a set-up step failed, else 0."""
    with open(results_path, encoding="utf-8") as f:
        raw = json.load(f)
    path = os.path.join(os.path.dirname(results_path), "ONNX.md")
    write_report(path, raw)
    with open(path, encoding="utf-8") as f:
        print(f.read())
    failed = [
        record
        for measured in raw["models"].values()
        for record in [*measured["contestants"].values(), *measured["setup"].values()]
        if "error" in record
    ]
    return 1 if failed else 0


def main():
    from cosent_tf.io import write_text

    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--time-budget",
        type=float,
        default=24.0,
        help="seconds of timed work (all repetitions) the slowest contestant is given per model",
    )
    parser.add_argument(
        "--bench-python",
        default=".venv-reference/bin/python",
        help="the Python with torch and sentence-transformers (its default path)",
    )
    parser.add_argument(
        "--onnx-reference-python",
        default=".venv-onnx-reference/bin/python",
        help="the Python with sentence-transformers' ONNX backend (its rows are skipped where it is missing)",
    )
    parser.add_argument(
        "--plain-onnx-python",
        help="the Python with torch, transformers, onnx and onnxruntime for plain ONNX Runtime "
        "(default: the first of --bench-python and --onnx-reference-python that has them)",
    )
    parser.add_argument("--models", default=",".join(common.MODELS), help="comma-separated: small,base")
    parser.add_argument("--output-dir", default=HERE)
    parser.add_argument("--report-only", action="store_true", help="rewrite ONNX.md from OUTPUT_DIR/onnx_results.json")
    parser.add_argument(
        "--cpus", type=run.parse_cpus, help="pin every process to these CPUs, as taskset -c takes them (0,1 or 0-3)"
    )
    args = parser.parse_args()
    results_path = os.path.join(args.output_dir, "onnx_results.json")
    if args.report_only:
        return report(results_path)
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(common.MODELS))
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(common.MODELS)}")
    unavailable = sorted(set(args.cpus or ()) - os.sched_getaffinity(0))
    if unavailable:
        parser.error(f"--cpus: this process may not run on CPU {', '.join(map(str, unavailable))}")
    check_environment()
    pythons, missing = choose_pythons(args)
    for role, reason in missing.items():
        print(f"skipping the rows run by the {role} Python: {reason}", flush=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    env = {**os.environ, "BENCH_TIME_BUDGET": str(args.time_budget), "PYTHONUNBUFFERED": "1"}
    raw = {
        "started": started.isoformat(),
        "cpu": run.cpu_description(),
        "args": vars(args),
        "pythons": pythons,
        "models": {model: measure_model(model, pythons, missing, args, env) for model in models},
        "wall_seconds": round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()),
    }
    write_text(results_path, json.dumps(raw, indent=1))
    return report(results_path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["prepare"]:
        prepare(sys.argv[2])
    elif sys.argv[1:2] == ["prepare-plain"]:
        prepare_plain(sys.argv[2])
    else:
        sys.exit(main())
