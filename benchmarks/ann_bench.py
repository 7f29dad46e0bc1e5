"""Recall@10, build time, memory and speed of the index's precisions and kinds, on a million vectors.

One command (``make bench-ann``) measures ``cosent_tf.VectorIndex`` as ``cosent-tf search build`` makes it:

* the vectors: the distinct texts of BQ's three splits encoded by the small Matryoshka model of
  ``benchmarks/matryoshka_bench.py`` (``--model``) cut to ``--dim`` (128); the queries: the first
  ``QUERIES`` distinct first texts of ``BQ.test.data``, left out of the corpus (so that no query finds
  itself);
* centred: that model's vectors fill a narrow cone (its weights were random before a short training),
  where neighbours differ by float32's rounding, so the main measurements search them with the BQ
  corpus's mean subtracted and rows renormalised (``VARIANTS``; the report gives the spread of both);
* the corpus: the BQ vectors padded to ``--size`` (1,000,000) with random unit vectors (seeded Gaussian
  rows, normalised);
* the ground truth: each query's exact 10th best cosine (float64, NumPy alone); recall@10 counts a
  result as found when its cosine reaches that (less ``TIE``), so that ties count;
* every precision (float32, int8, binary) with every kind (exact, hnsw, ivf), at the package's
  default settings (``cosent_tf.inference.ann``), each built in a process of its own
  (``VectorIndex.build``, then ``save``: wall and CPU seconds, the folder's bytes by file, peak RSS)
  and searched in another (``VectorIndex.load``, memory-mapped: resident memory after the load and after
  the searches, as VmRSS above the process's own before the load; queries/s of all queries in one
  call, best of up to ``REPEATS`` calls after a warm-up, and its CPU time a query; recall@10), at
  rescore multipliers ``MULTIPLIERS`` and, for hnsw and ivf, over ``EF_SEARCH`` and ``NPROBE``;
* the exact-versus-hnsw crossover: float32 exact and hnsw at ``CROSSOVER_SIZES`` and ``--size`` (the
  first rows of the same corpus), all queries at once and one query a call (the least of
  ``LATENCY_CALLS`` calls), from which the report derives a value for ``EXACT_INDEX_LIMIT``;
* the real corpus alone (the BQ vectors, no padding, raw and centred): recall@10 of int8 and binary
  exact search against float32, with and without re-scoring (a multiplier of 1 re-scores only the 10
  candidates, which leaves their set, and so recall@10, as the codes found it).

Every step keeps its record in ``--work-dir`` (``steps/NAME.json``) and a rerun skips the steps that
have one (``--fresh`` starts over), so a slow machine can finish the bench over several commands; the
results file is rewritten after each step, the report at the end. It writes
``benchmarks/ann_results.json``, ``benchmarks/ANN.md`` and ``benchmarks/ann.png`` (recall@10 against
queries/s).

    .venv/bin/python benchmarks/ann_bench.py [--model runs/matryoshka-bench/small-matryoshka/model]
        [--dim 128] [--size 1000000] [--work-dir runs/ann-bench] [--fresh] [--keep-indexes] [--report-only]

The same file is the steps' program (``ann_bench.py step NAME WORK_DIR SETTINGS_JSON``).
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

QUERIES = 1000
TOP_K = 10
TIE = 1e-6  # cosines this close to the true 10th best count as tied with it
SEED = 0
MULTIPLIERS = (1, 4, 10)
EF_SEARCH = (16, 32, 64, 128, 256)  # hnsw's candidate list (raised to the candidates asked for)
NPROBE = (4, 16, 64)  # ivf's lists searched
CROSSOVER_SIZES = (10_000, 100_000)  # and --size
LATENCY_CALLS = 30  # one-query calls timed for the latency
REPEATS = 3  # timed calls of all queries, at most
REPEAT_SECONDS = 20.0  # no further call once the calls so far took this long
PRECISIONS = ("float32", "int8", "binary")
# raw: the vectors as the model gives them; centred: less the BQ corpus's mean, renormalised
VARIANTS = ("raw", "centred")
MAIN_VARIANT = "centred"
MiB = 1024 * 1024


def bq_split(split):
    return os.path.join(common.data_dir(), "senteval_cn", "BQ", f"BQ.{split}.data")


def read_bq(split):
    """(texts_a, texts_b) of the well-formed lines (3 tab-separated fields), as the readers keep them."""
    texts_a, texts_b = [], []
    with open(bq_split(split), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) == 3:
                texts_a.append(fields[0])
                texts_b.append(fields[1])
    return texts_a, texts_b


def bq_texts():
    """(queries, corpus): the first QUERIES distinct first texts of the test split, and every other
    distinct text of the train, valid and test splits, in order of first appearance."""
    queries = list(dict.fromkeys(read_bq("test")[0]))[:QUERIES]
    left_out = set(queries)
    corpus = {}
    for split in ("train", "valid", "test"):
        for pair in zip(*read_bq(split)):
            for text in pair:
                if text not in left_out:
                    corpus.setdefault(text, None)
    return queries, list(corpus)


def padding_text(row):
    return f"<random unit vector {row}>"


def work_path(work_dir, *parts):
    return os.path.join(work_dir, *parts)


# --- the steps (each a process of its own) ---------------------------------------------------------


def memory_mib():
    """(VmRSS, VmHWM) of this process in MiB."""
    values = {}
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def step_encode(work_dir, settings):
    """The BQ queries' and corpus's vectors at the bench's width, and the corpus's texts."""
    from cosent_tf import SentenceEncoder
    from cosent_tf.calibration import weights_fingerprint

    queries, corpus = bq_texts()
    encoder = SentenceEncoder.load(settings["model"])
    start = time.perf_counter()
    query_vectors = encoder.encode(queries, dim=settings["dim"], show_progress=False)
    corpus_vectors = encoder.encode(corpus, dim=settings["dim"], show_progress=False)
    seconds = time.perf_counter() - start
    np.save(work_path(work_dir, "queries-raw.npy"), query_vectors)
    np.save(work_path(work_dir, "bq-corpus-raw.npy"), corpus_vectors)
    with open(work_path(work_dir, "bq-corpus-texts.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=False)
    return {
        "queries": len(queries),
        "bq_corpus": len(corpus),
        "encode_seconds": round(seconds, 1),
        "sentences_per_second": round((len(queries) + len(corpus)) / seconds, 1),
        "model_fingerprint": weights_fingerprint(settings["model"]),
        "model_width": encoder.width,
        "trained_widths": encoder.spec.matryoshka_dims,
    }


def corpus_texts(work_dir, count):
    with open(work_path(work_dir, "bq-corpus-texts.json"), encoding="utf-8") as f:
        texts = json.load(f)[:count]
    return texts + [padding_text(row) for row in range(len(texts), count)]


def index_dir(work_dir, name):
    return work_path(work_dir, "indexes", name)


def step_build(work_dir, settings):
    """Build and save one index of the first ``count`` corpus vectors."""
    import faiss

    from cosent_tf import VectorIndex

    count, precision, kind = settings["count"], settings["precision"], settings["kind"]
    vectors = np.load(work_path(work_dir, f"corpus-{settings['variant']}.npy"), mmap_mode="r")[:count]
    texts = corpus_texts(work_dir, count)
    before, _ = memory_mib()
    start, cpu = time.perf_counter(), time.process_time()
    index = VectorIndex.build(vectors, texts, settings["model"], precision=precision, kind=kind, show_progress=False)
    built, build_cpu = time.perf_counter(), time.process_time() - cpu
    folder = index_dir(work_dir, settings["name"])
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    index.save(folder)
    saved = time.perf_counter()
    files = {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
    _, peak = memory_mib()
    return {
        "build_seconds": round(built - start, 2),
        "build_cpu_seconds": round(build_cpu, 2),
        "save_seconds": round(saved - built, 2),
        "files": files,
        "ann_settings": index.ann_settings,
        "peak_rss_mib_above_start": round(peak - before, 1),
        "faiss_threads": faiss.omp_get_max_threads(),
        "faiss_version": faiss.__version__,
    }


def recall_at(found, queries, corpus, kth):
    """Mean share of each query's ``TOP_K`` found rows whose exact cosine (float64) reaches its true
    ``TOP_K``-th best (less ``TIE``): rows tied with the true top k count as found."""
    wanted, where = np.unique(np.asarray(found), return_inverse=True)
    vectors = np.asarray(corpus[wanted], dtype=np.float64)  # a memory map reads these rows only
    cosines = np.einsum("qkd,qd->qk", vectors[where.reshape(np.shape(found))], queries.astype(np.float64))
    return float(np.mean((cosines >= kth[:, None] - TIE).sum(axis=1) / TOP_K))


def timed_search(index, queries, truth, **search):
    """Best queries/s (wall clock) of up to REPEATS calls on all ``queries`` (after the warm-up), the
    CPU milliseconds a query of that call (every thread's), and recall@10."""
    calls, found = [], None
    spent = 0.0
    while len(calls) < REPEATS and spent < REPEAT_SECONDS:
        start, cpu = time.perf_counter(), time.process_time()
        _, found = index.search(queries, TOP_K, **search)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        spent += seconds
        calls.append((len(queries) / seconds, cpu_seconds * 1000 / len(queries)))
    rate, cpu_ms = max(calls)
    return {
        "queries_per_second": rate,
        "cpu_ms_per_query": cpu_ms,
        "rates": [round(r, 1) for r, _ in calls],
        "recall@10": recall_at(found, queries, *truth),
    }


def one_query_latency(index, queries):
    """Wall and CPU milliseconds of one query a call: the least of LATENCY_CALLS calls each, the call
    least disturbed by the other jobs of a shared machine."""
    wall, cpu = [], []
    for row in range(LATENCY_CALLS):
        start, cpu_start = time.perf_counter(), time.process_time()
        index.search(queries[row : row + 1], TOP_K)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return {"wall_ms": float(min(wall) * 1000), "cpu_ms": float(min(cpu) * 1000)}


def search_settings(kind, precision):
    """Every (settings of one search) measured on an index of ``kind``."""
    if kind == "exact":
        if precision == "float32":
            return [{}]
        return [{"rescore_multiplier": m} for m in MULTIPLIERS]
    name, values = ("ef_search", EF_SEARCH) if kind == "hnsw" else ("nprobe", NPROBE)
    return [{"rescore_multiplier": m, name: value} for m in MULTIPLIERS for value in values]


def step_search(work_dir, settings):
    """Load one index (memory-mapped) and time its searches; the resident memory it took."""
    from cosent_tf import VectorIndex

    variant, count = settings["variant"], settings["count"]
    queries = np.load(work_path(work_dir, f"queries-{variant}.npy"))
    corpus = np.load(work_path(work_dir, f"corpus-{variant}.npy"), mmap_mode="r")[:count]
    truth = (corpus, np.load(work_path(work_dir, f"kth-{variant}-{count}.npy")))
    before, _ = memory_mib()
    start = time.perf_counter()
    index = VectorIndex.load(index_dir(work_dir, settings["name"]))
    load_seconds = time.perf_counter() - start
    after_load, _ = memory_mib()
    index.search(queries[:100], TOP_K)  # warm-up: the first call maps pages and sets up threads
    searches = []
    for search in search_settings(settings["kind"], settings["precision"]):
        searches.append({**search, **timed_search(index, queries, truth, **search)})
    latency = one_query_latency(index, queries) if settings.get("latency") else None
    after_search, peak = memory_mib()
    return {
        "load_seconds": round(load_seconds, 2),
        "resident_mib_after_load": round(after_load - before, 1),
        "resident_mib_after_search": round(after_search - before, 1),
        "peak_rss_mib_above_start": round(peak - before, 1),
        "searches": searches,
        "latency_ms": latency,
    }


STEPS = {"encode": step_encode, "build": step_build, "search": step_search}


def step_main(name, work_dir, settings_json):
    settings = json.loads(settings_json)
    record = STEPS[name](work_dir, settings)
    record["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(record))


# --- the orchestrator (NumPy only, until the report) -----------------------------------------------


def run_step(work_dir, name, step, settings, fresh=False):
    """The record of step ``name`` (``step`` with ``settings``): kept from an earlier run, or run now in
    a process of its own; exits with its log's end when it fails."""
    path = work_path(work_dir, "steps", f"{name}.json")
    if os.path.isfile(path) and not fresh:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    log_path = work_path(work_dir, "logs", f"{name}.log")
    command = [sys.executable, os.path.abspath(__file__), "step", step, work_dir, json.dumps(settings)]
    print(f"{name}: running", flush=True)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True)
        log.write(completed.stdout)
    if completed.returncode:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            raise SystemExit(f"{name}: exit status {completed.returncode}\n{f.read()[-2500:]}")
    record = {**settings, **json.loads(completed.stdout.strip().splitlines()[-1])}
    record["step_seconds"] = round(time.perf_counter() - start, 1)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)
    print(f"{name}: done in {record['step_seconds']:.0f} s", flush=True)
    return record


def kth_best(queries, corpus, k=TOP_K, block=65536):
    """Each query's ``k``-th best cosine over ``corpus`` (float64): NumPy alone, a block at a time."""
    queries = np.asarray(queries, dtype=np.float64)
    best = np.full((len(queries), 0), -np.inf)
    for start in range(0, len(corpus), block):
        scores = queries @ np.asarray(corpus[start : start + block], dtype=np.float64).T
        kept = min(k, scores.shape[1])
        scores = np.concatenate([best, -np.partition(-scores, kept - 1, axis=1)[:, :kept]], axis=1)
        best = -np.partition(-scores, min(k, scores.shape[1]) - 1, axis=1)[:, :k]
    return best.min(axis=1)


def centre(work_dir):
    """The centred vectors (``*-centred.npy``): the BQ corpus's mean subtracted from corpus and queries,
    rows renormalised; and how spread out the raw and centred ones are."""
    spread = {}
    mean = np.load(work_path(work_dir, "bq-corpus-raw.npy")).astype(np.float64).mean(axis=0)
    for name in ("queries", "bq-corpus"):
        vectors = np.load(work_path(work_dir, f"{name}-raw.npy")).astype(np.float64) - mean
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        np.save(work_path(work_dir, f"{name}-centred.npy"), vectors.astype(np.float32))
    for variant in VARIANTS:
        corpus = np.load(work_path(work_dir, f"bq-corpus-{variant}.npy")).astype(np.float64)
        queries = np.load(work_path(work_dir, f"queries-{variant}.npy")).astype(np.float64)
        rng = np.random.default_rng(SEED)
        first, second = rng.integers(0, len(corpus), (2, 5000))
        best = -np.sort(-(queries @ corpus.T), axis=1)[:, : TOP_K + 1]
        spread[variant] = {
            "mean_cosine_of_random_pairs": float(np.mean(np.sum(corpus[first] * corpus[second], axis=1))),
            "median_best_cosine": float(np.median(best[:, 0])),
            "median_10th_cosine": float(np.median(best[:, TOP_K - 1])),
            "median_gap_10th_11th": float(np.median(best[:, TOP_K - 1] - best[:, TOP_K])),
        }
    return spread


def prepare_corpus(work_dir, variant, size, sizes):
    """The corpus of ``variant`` (``corpus-VARIANT.npy``: BQ's vectors, padded to ``size`` with random
    unit vectors) and the ground truth of every measured size (``kth-VARIANT-N.npy``); kept when there."""
    path = work_path(work_dir, f"corpus-{variant}.npy")
    real = np.load(work_path(work_dir, f"bq-corpus-{variant}.npy"), mmap_mode="r")
    if not os.path.isfile(path):
        corpus = np.lib.format.open_memmap(path + ".tmp.npy", mode="w+", dtype=np.float32, shape=(size, real.shape[1]))
        kept = min(len(real), size)
        corpus[:kept] = real[:kept]
        rng = np.random.default_rng(SEED)
        for start in range(kept, size, 65536):
            stop = min(start + 65536, size)
            block = rng.standard_normal((stop - start, real.shape[1]), dtype=np.float32)
            corpus[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
        corpus.flush()
        del corpus
        os.replace(path + ".tmp.npy", path)
    corpus = np.load(path, mmap_mode="r")
    queries = np.load(work_path(work_dir, f"queries-{variant}.npy"))
    for count in sizes:
        kth_path = work_path(work_dir, f"kth-{variant}-{count}.npy")
        if not os.path.isfile(kth_path):
            print(f"ground truth of {count} {variant} vectors", flush=True)
            np.save(kth_path + ".tmp.npy", kth_best(queries, corpus[:count]))
            os.replace(kth_path + ".tmp.npy", kth_path)


def plan(size, real_count):
    """Every (group, name, settings, latency) the bench measures, the cheap ones first."""
    entries = []

    def add(group, variant, count, precision, kind, latency=False):
        name = f"{variant}-{count}-{precision}-{kind}"
        settings = {"name": name, "variant": variant, "count": count, "precision": precision, "kind": kind}
        entries.append((group, name, settings, latency))

    for variant in VARIANTS:
        for precision in PRECISIONS:
            add("real", variant, real_count, precision, "exact")
    for count in CROSSOVER_SIZES:
        if count < size:
            add("crossover", MAIN_VARIANT, count, "float32", "exact", latency=True)
            add("crossover", MAIN_VARIANT, count, "float32", "hnsw", latency=True)
    for precision in PRECISIONS:
        add("main", MAIN_VARIANT, size, precision, "exact", latency=precision == "float32")
    for precision in PRECISIONS:
        add("main", MAIN_VARIANT, size, precision, "ivf")
    for precision in ("binary", "float32", "int8"):
        add("main", MAIN_VARIANT, size, precision, "hnsw", latency=precision == "float32")
    return entries


def measure(args):
    if args.fresh and os.path.isdir(args.work_dir):
        shutil.rmtree(args.work_dir)
    os.makedirs(work_path(args.work_dir, "steps"), exist_ok=True)
    os.makedirs(work_path(args.work_dir, "logs"), exist_ok=True)
    model = os.path.abspath(args.model)
    encoded = run_step(args.work_dir, "encode", "encode", {"model": model, "dim": args.dim})
    real_count = min(encoded["bq_corpus"], args.size)
    spread = centre(args.work_dir)
    entries = plan(args.size, real_count)
    for variant in VARIANTS:
        sizes = sorted({settings["count"] for _, _, settings, _ in entries if settings["variant"] == variant})
        prepare_corpus(args.work_dir, variant, max(sizes), sizes)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat()
    if os.path.isfile(args.results) and not args.fresh:
        with open(args.results, encoding="utf-8") as f:
            started = json.load(f).get("started", started)  # a rerun goes on with the steps of the first
    raw = {
        "started": started,
        "command_args": shlex.join(sys.argv[1:]),
        "model": model,
        "dim": args.dim,
        "size": args.size,
        "encode": encoded,
        "spread": spread,
        "measured": {},
    }
    for group, name, settings, latency in entries:
        build = run_step(args.work_dir, f"build-{name}", "build", {**settings, "model": model})
        search = run_step(args.work_dir, f"search-{name}", "search", {**settings, "latency": latency})
        raw["measured"][name] = {"group": group, **settings, "build": build, "search": search}
        if os.path.isdir(index_dir(args.work_dir, name)) and not args.keep_indexes:
            shutil.rmtree(index_dir(args.work_dir, name))  # a million float32 vectors: 512 MB a folder
        write_results(args, raw)
    return raw


def write_results(args, raw):
    import run

    finished = datetime.datetime.now(datetime.timezone.utc).isoformat()
    raw = {
        **raw,
        "finished": finished,
        "cpu": run.cpu_description(),
        "python": platform.python_version(),
        "args": vars(args),
    }
    with open(args.results + ".tmp", "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=1)
    os.replace(args.results + ".tmp", args.results)


# --- the report ----------------------------------------------------------------------------------

DEFAULT_SEARCH = {"hnsw": "ef_search", "ivf": "nprobe"}


def default_search(record):
    """The measured searches of ``record`` at the index's own (default) search setting."""
    kind = record["kind"]
    if kind == "exact":
        return record["search"]["searches"]
    name = DEFAULT_SEARCH[kind]
    value = record["build"]["ann_settings"][name]
    return [search for search in record["search"]["searches"] if search[name] == value]


def mib(record, names=None):
    files = record["build"]["files"]
    return sum(size for name, size in files.items() if names is None or name in names) / MiB


def first_stage_mib(record):
    """What the first stage reads: the faiss file, else the codes, else the float32 vectors."""
    files = record["build"]["files"]
    for name in ("ann.faiss", "codes.npy", "vectors.npy"):
        if name in files:
            return files[name] / MiB
    return 0.0


def build_time(record):
    build = record["build"]
    cpu = build.get("build_cpu_seconds")
    return f"{build['build_seconds']:.1f}" + ("" if cpu is None else f" / {cpu:.1f}")


def settings_text(record):
    settings = record["build"].get("ann_settings") or {}
    return ", ".join(f"{k} {v}" for k, v in settings.items() if k not in DEFAULT_SEARCH.values())


def round_down(value):
    """``value`` rounded down to one significant digit (8,123 -> 8,000)."""
    scale = 10 ** np.floor(np.log10(value))
    return int(scale * np.floor(value / scale))


def exact_cost(raw):
    """(vectors, wall ms) of exact float32 search of one query at the largest measured size, or None.

    The largest size, where the search streams the whole matrix from memory: at the small sizes a
    millisecond's work is dwarfed, on a loaded machine, by waking the BLAS threads for each call."""
    points = sorted(
        (r["count"], r["search"]["latency_ms"]["wall_ms"])
        for r in raw["measured"].values()
        if r["kind"] == "exact" and r["precision"] == "float32" and r["search"].get("latency_ms")
    )
    return points[-1] if points else None


# One query's exact search past this is slow enough to prefer hnsw: about half of the 100 ms in which a
# search box feels immediate, the rest left for encoding the query.
LATENCY_TARGET_MS = 50.0
WIDE_DIM = 768  # BERT-base's width: the widest vectors the limit must serve


def write_report(results_path):
    from cosent_tf.io import write_text
    from cosent_tf.plotting import new_figure, save_png

    with open(results_path, encoding="utf-8") as f:
        raw = json.load(f)
    measured = raw["measured"]
    started = datetime.datetime.fromisoformat(raw["started"])
    finished = datetime.datetime.fromisoformat(raw.get("finished", raw["started"]))
    program = "COSENT_SHARED_DATA=../shared/data .venv/bin/python benchmarks/ann_bench.py"
    command = f"{program} {raw['command_args']}".strip()
    size, dim, encoded = raw["size"], raw["dim"], raw["encode"]
    main_rows = {name: r for name, r in measured.items() if r["group"] == "main"}
    any_build = next(iter(measured.values()), {}).get("build", {})
    raw_spread, centred_spread = raw["spread"]["raw"], raw["spread"]["centred"]
    step_minutes = (
        raw["encode"]["step_seconds"]
        + sum(r["build"]["step_seconds"] + r["search"]["step_seconds"] for r in measured.values())
    ) / 60
    build_minutes = sum(r["build"]["step_seconds"] for r in measured.values() if r["kind"] != "exact") / 60
    lines = [
        "# Search past exact: vector precisions and index kinds on a million vectors",
        "",
        f"Measured from {started:%Y-%m-%d %H:%M} to {finished:%H:%M} UTC on {raw['cpu']}, Python "
        f"{raw['python']}, faiss {any_build.get('faiss_version', '?')} ({any_build.get('faiss_threads', '?')} "
        f"threads, its default), by `make bench-ann` (`{command}`), "
        "`nice -n 10` "
        "beside other jobs: the times are of a loaded machine, so compare rows with each other rather than with "
        "another machine's.",
        "",
        f"Nothing was shrunk: {size:,} vectors, every precision with every kind at the package's default "
        f"settings. The steps took {step_minutes:.0f} minutes of wall time in all on this loaded machine (the "
        f"approximate indexes' builds {build_minutes:.0f} of them; their CPU time, which another machine's load "
        "does not inflate, is in the tables)"
        + (", more than the 25 minutes a bench command was meant to take here" if step_minutes > 25 else "")
        + "; each step keeps its record in the work folder, so a rerun of the command goes on where one stopped.",
        "",
        f"**Vectors**: the {encoded['bq_corpus']:,} distinct texts of BQ's train, valid and test files (less the "
        f"queries) encoded by the small Matryoshka model of `make bench-matryoshka` "
        f"(`{os.path.relpath(raw['model'], ROOT)}`, trained at widths {encoded['trained_widths']}) cut to "
        f"**{dim}** dimensions (`encode(dim={dim})`). **Queries**: the first {encoded['queries']} distinct first "
        "texts of BQ.test.data, left out of the corpus.",
        "",
        "**Centred.** This model's weights were random before its short training, and its vectors all point "
        f"nearly the same way: two random BQ texts have a cosine of {raw_spread['mean_cosine_of_random_pairs']:.5f} "
        f"on average, and a query's 10th and 11th nearest texts differ by {raw_spread['median_gap_10th_11th']:.1e} "
        "in cosine (median), at float32's rounding: on such vectors any index's recall measures rounding, and a "
        "sign bit per dimension is the same for almost every text. A trained model's vectors spread out "
        "further, so the bench searches the vectors **centred**: the BQ corpus's mean vector subtracted from "
        "corpus and queries, rows renormalised (the first step of BERT-whitening), after which random pairs have "
        f"a cosine of {centred_spread['mean_cosine_of_random_pairs']:.4f}, a query's best text "
        f"{centred_spread['median_best_cosine']:.2f} and its 10th {centred_spread['median_10th_cosine']:.2f} "
        f"(medians), and the 10th and 11th differ by {centred_spread['median_gap_10th_11th']:.4f}. The last "
        "table also gives int8 and binary on the vectors as the model gives them.",
        "",
        f"**Corpus**: the {encoded['bq_corpus']:,} BQ vectors, padded to {size:,} with random unit vectors "
        f"(Gaussian rows, seed {SEED}, normalised), which lie far from every query (the true top 10 are BQ "
        "texts) but which every index must hold and pass by. **Ground truth**: each query's exact 10th best "
        f"cosine, in float64 by NumPy alone. **Recall@10**: the share of a query's 10 results whose cosine "
        f"reaches that 10th best (less {TIE:g}, so that texts tied with the 10th count), mean over queries. "
        "Each index is built by `VectorIndex.build` (the vectors a memory map) and saved in a process of its "
        "own, then loaded (memory-mapped) and searched in another: queries/s of all "
        f"{encoded['queries']} queries in one `search` call, best of up to {REPEATS} calls after a warm-up, "
        "re-scoring included, and the CPU time (every thread's) a query of that call; **resident** is the "
        "process's VmRSS above what it was before the load, after the load and after every search. The "
        "settings are the package's defaults (`cosent_tf.inference.ann`); `×M` is the rescore multiplier: "
        "M × 10 candidates re-scored with the float32 vectors.",
        "",
    ]
    if main_rows:
        lines += [
            f"## {size:,} vectors of {dim} dimensions",
            "",
            "At each index's default search setting (the sweeps below):",
            "",
            "| index | precision | settings | rescore | recall@10 | queries/s | CPU ms/query | build (s): wall / CPU | "
            "on disk (MiB): all / first stage | resident (MiB): loaded / searched |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for record in main_rows.values():
            for search in default_search(record):
                multiplier = search.get("rescore_multiplier")
                setting = settings_text(record)
                if record["kind"] != "exact":
                    name = DEFAULT_SEARCH[record["kind"]]
                    setting = f"{setting}, {name} {search[name]}"
                lines.append(
                    f"| {record['kind']} | {record['precision']} | {setting or '—'} | "
                    f"{'—' if multiplier is None else f'×{multiplier}'} | {search['recall@10']:.4f} | "
                    f"{search['queries_per_second']:.0f} | {search['cpu_ms_per_query']:.2f} | "
                    f"{build_time(record)} | "
                    f"{mib(record):.0f} / {first_stage_mib(record):.0f} | "
                    f"{record['search']['resident_mib_after_load']:.0f} / "
                    f"{record['search']['resident_mib_after_search']:.0f} |"
                )
        lines += [
            "",
            "On disk, every index keeps `vectors.npy` (float32, for re-scoring) and `texts.jsonl`; the first "
            "stage reads `codes.npy` (exact int8/binary) or `ann.faiss` (hnsw, ivf). Files by index (MiB):",
            "",
            "| index | " + " | ".join(["vectors.npy", "codes.npy", "ann.faiss", "texts.jsonl"]) + " |",
            "|---|---|---|---|---|",
        ]
        for record in main_rows.values():
            files = record["build"]["files"]
            cells = [f"{files[n] / MiB:.1f}" if n in files else "" for n in ("vectors.npy", "codes.npy", "ann.faiss")]
            cells.append(f"{files.get('texts.jsonl', 0) / MiB:.1f}")
            lines.append(f"| {record['kind']} {record['precision']} | " + " | ".join(cells) + " |")
        sweeps = [r for r in main_rows.values() if r["kind"] != "exact"]
        if sweeps:
            lines += ["", "Search settings swept (recall@10 / queries/s):", ""]
            for kind in ("hnsw", "ivf"):
                records = [r for r in sweeps if r["kind"] == kind]
                if not records:
                    continue
                name = DEFAULT_SEARCH[kind]
                values = sorted({s[name] for r in records for s in r["search"]["searches"]})
                lines += [
                    f"| {kind} | rescore | " + " | ".join(f"{name} {v}" for v in values) + " |",
                    "|---|---|" + "---|" * len(values),
                ]
                for record in records:
                    for multiplier in MULTIPLIERS:
                        cells = []
                        for value in values:
                            hit = [
                                s
                                for s in record["search"]["searches"]
                                if s[name] == value and s["rescore_multiplier"] == multiplier
                            ]
                            cells.append(
                                f"{hit[0]['recall@10']:.3f} / {hit[0]['queries_per_second']:.0f}" if hit else ""
                            )
                        lines.append(f"| {record['precision']} | ×{multiplier} | " + " | ".join(cells) + " |")
                lines.append("")
    crossover = sorted(
        (
            r
            for r in measured.values()
            if r["precision"] == "float32"
            and r["kind"] in ("exact", "hnsw")
            and r["group"] in ("crossover", "main")
            and r["variant"] == MAIN_VARIANT
        ),
        key=lambda r: (r["count"], r["kind"]),
    )
    if crossover:
        lines += [
            "## Exact against hnsw by corpus size (float32)",
            "",
            f"The first N vectors of the same corpus (N ≤ {encoded['bq_corpus']:,}: BQ's alone); all queries in "
            f"one call (best of up to {REPEATS}), and one query a call (the least of {LATENCY_CALLS} calls); hnsw "
            "at its default settings.",
            "",
            "| vectors | exact: queries/s, CPU ms/query | exact, one query a call: wall ms, CPU ms | hnsw: "
            "queries/s, CPU ms/query | hnsw, one query a call: wall ms, CPU ms | hnsw recall@10 | hnsw build (s): "
            "wall / CPU |",
            "|---|---|---|---|---|---|---|",
        ]
        for count in sorted({r["count"] for r in crossover}):
            cells = []
            for kind in ("exact", "hnsw"):
                record = next((r for r in crossover if r["count"] == count and r["kind"] == kind), None)
                if record is None:
                    cells += ["", ""]
                    continue
                search = default_search(record)[0]
                latency = record["search"].get("latency_ms") or {}
                cells.append(f"{search['queries_per_second']:.0f}, {search['cpu_ms_per_query']:.3f}")
                cells.append(f"{latency['wall_ms']:.2f}, {latency['cpu_ms']:.2f}" if latency else "")
            hnsw = next((r for r in crossover if r["count"] == count and r["kind"] == "hnsw"), None)
            if hnsw is None:
                cells += ["", ""]
            else:
                cells += [f"{default_search(hnsw)[0]['recall@10']:.4f}", build_time(hnsw)]
            lines.append(f"| {count:,} | " + " | ".join(cells) + " |")
        cost = exact_cost(raw)
        if cost:
            count, wall_ms = cost
            per_vector = wall_ms / count  # exact search reads every vector: its time grows with count x width
            at_dim = LATENCY_TARGET_MS / per_vector
            at_wide = at_dim * dim / WIDE_DIM
            largest_hnsw = next((r for r in crossover if r["count"] == count and r["kind"] == "hnsw"), None)
            hnsw_note = ""
            if largest_hnsw is not None:
                search = default_search(largest_hnsw)[0]
                build_ms = largest_hnsw["build"]["build_seconds"] * 1000 / count
                hnsw_note = (
                    f" Above it hnsw answers a query in {largest_hnsw['search']['latency_ms']['wall_ms']:.1f} ms "
                    f"at recall@10 {search['recall@10']:.3f} ({count:,} vectors), for a build of "
                    f"{build_ms:.2f} ms a vector here."
                )
            lines += [
                "",
                "The one-query times of exact search at the smaller sizes are far above what its batched CPU time "
                "a query predicts: on this loaded machine each call pays a fixed cost of several milliseconds "
                "(waking NumPy's BLAS threads, as far as we can tell), which is small beside streaming the "
                f"largest corpus from memory. **EXACT_INDEX_LIMIT.** At "
                f"{count:,} vectors of {dim} dimensions one query's exact float32 search took {wall_ms:.0f} ms "
                f"({per_vector * 1e6:.0f} ns a vector): it streams every vector from memory, so its time grows "
                f"with vectors × width. Taking {LATENCY_TARGET_MS:g} ms a query (half of the 100 ms in which a "
                "search feels immediate, the rest left for encoding the query) as the most exact search should "
                f"spend, it fits about {at_dim:,.0f} vectors at {dim} dimensions and {at_wide:,.0f} at "
                f"{WIDE_DIM} (BERT-base's full width). The constant counts vectors whatever their width, so the "
                f"value this bench recommends is the wide one: **EXACT_INDEX_LIMIT = {round_down(at_wide):,}** "
                f"(or, made width-aware, about {round_down(at_dim * dim):,} vector-dimensions)." + hnsw_note,
            ]
        lines.append("")
    real = [r for r in measured.values() if r["group"] == "real"]
    if real:
        lines += [
            f"## int8 and binary against float32 on BQ alone ({real[0]['count']:,} vectors, no padding)",
            "",
            "Exact search over the codes; ×1 re-scores only the 10 candidates, which leaves their set as the "
            "codes found it: its recall@10 is the codes' own, without re-scoring. Raw: the vectors as the model "
            "gives them; centred: as above.",
            "",
            "| precision | rescore | recall@10, raw | recall@10, centred | queries/s, centred | "
            "CPU ms/query, centred |",
            "|---|---|---|---|---|---|",
        ]
        by_variant = {(r["variant"], r["precision"]): r for r in real}
        for precision in PRECISIONS:
            centred = by_variant.get(("centred", precision))
            raw_record = by_variant.get(("raw", precision))
            if centred is None:
                continue
            for index, search in enumerate(centred["search"]["searches"]):
                multiplier = search.get("rescore_multiplier")
                label = "—" if multiplier is None else (f"×{multiplier}" + (" (none)" if multiplier == 1 else ""))
                raw_recall = f"{raw_record['search']['searches'][index]['recall@10']:.4f}" if raw_record else ""
                lines.append(
                    f"| {precision} | {label} | {raw_recall} | {search['recall@10']:.4f} | "
                    f"{search['queries_per_second']:.0f} | {search['cpu_ms_per_query']:.3f} |"
                )
        lines.append("")
    missing = [entry for entry in plan(size, min(encoded["bq_corpus"], size)) if entry[1] not in measured]
    if missing:
        lines += ["Not measured yet: " + ", ".join(name for _, name, _, _ in missing) + ".", ""]
    if main_rows:
        lines += ["![recall@10 against queries/s](ann.png)", ""]
    write_text(os.path.join(os.path.dirname(results_path), "ANN.md"), "\n".join(lines))

    if not main_rows:
        return
    figure, axis = new_figure(figsize=(10, 5.5))
    colours = {"float32": "tab:blue", "int8": "tab:orange", "binary": "tab:green"}
    markers = {"exact": "s", "hnsw": "o", "ivf": "^"}
    styles = {1: ":", 4: "-", 10: "--"}
    for record in main_rows.values():
        by_multiplier = {}
        for search in record["search"]["searches"]:
            by_multiplier.setdefault(search.get("rescore_multiplier"), []).append(search)
        for multiplier, searches in by_multiplier.items():
            searches.sort(key=lambda s: s["queries_per_second"])
            axis.plot(
                [s["queries_per_second"] for s in searches],
                [s["recall@10"] for s in searches],
                marker=markers[record["kind"]],
                linestyle=styles.get(multiplier, "-"),
                color=colours[record["precision"]],
                label=f"{record['kind']} {record['precision']}" + ("" if multiplier is None else f" ×{multiplier}"),
                markersize=4,
            )
    axis.set_xscale("log")
    axis.set_xlabel("queries/s (all queries in one call)")
    axis.set_ylabel("recall@10 against exact float32")
    axis.set_title(f"{size:,} vectors of {dim} dimensions")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    save_png(figure, os.path.join(os.path.dirname(results_path), "ann.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default=os.path.join(ROOT, "runs", "matryoshka-bench", "small-matryoshka", "model"),
        help="the model folder that encodes BQ (default: the small Matryoshka model of make bench-matryoshka)",
    )
    parser.add_argument("--dim", type=int, default=128, help="the width the vectors are cut to")
    parser.add_argument("--size", type=int, default=1_000_000, help="corpus vectors, BQ's padded with random ones")
    parser.add_argument("--work-dir", default=os.path.join(ROOT, "runs", "ann-bench"))
    parser.add_argument("--fresh", action="store_true", help="measure every step again")
    parser.add_argument("--keep-indexes", action="store_true", help="keep the index folders in --work-dir")
    parser.add_argument("--output-dir", default=HERE)
    parser.add_argument("--report-only", action="store_true", help="rewrite ANN.md and ann.png from ann_results.json")
    args = parser.parse_args()
    args.results = os.path.join(args.output_dir, "ann_results.json")
    if not args.report_only:
        if not os.path.isfile(os.path.join(args.model, "cosent_model.json")):
            raise SystemExit(
                f"{args.model}: no model folder; make it with `make bench-matryoshka` (the small Matryoshka model) "
                "or pass --model"
            )
        missing = [bq_split(s) for s in ("train", "valid", "test") if not os.path.isfile(bq_split(s))]
        if missing:
            raise SystemExit(f"{', '.join(missing)}: not found; set COSENT_SHARED_DATA to the shared data folder")
        os.makedirs(args.work_dir, exist_ok=True)
        measure(args)
    write_report(args.results)
    with open(os.path.join(os.path.dirname(args.results), "ANN.md"), encoding="utf-8") as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["step"]:
        step_main(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(main())
