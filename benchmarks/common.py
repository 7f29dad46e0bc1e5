"""What every contestant of ``benchmarks/run.py`` shares: settings, data, measurement.

Imports neither TensorFlow nor torch: the sentence-transformers contestant runs in its
own virtual environment (``.venv-reference``) and reads the data through this module too.
A contestant is run as ``python benchmarks/CONTESTANT.py JOB PRECISION OUTPUT_JSON``
(JOB ``train`` or ``encode``), in a process of its own so that its peak RSS is its own,
with ``BENCH_MODEL`` (``small`` or ``base``) naming the model it builds.
Each job reports ``REPEATS`` rates measured after one warm-up: the training pass after
its warm-up steps cut into that many consecutive stretches, or that many timed encode calls.
"""

import json
import os
import platform
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The set-up: the same shapes, data and batch sizes for every contestant.
# The models, randomly initialised; BENCH_MODEL picks one per job. BERT-base's steps and
# encode calls take some 15x the small model's, so it warms up on fewer of them.
MODELS = {  # name: (config, training steps of warm-up, encode batches of warm-up)
    "small": (os.path.join(os.path.dirname(HERE), "cosent_tf", "configs", "bert-small-random.json"), 10, 20),
    "base": (os.path.join(HERE, "bert-base-random.json"), 3, 5),
}
MODEL = os.environ.get("BENCH_MODEL", "small")
MODEL_CONFIG, WARMUP_STEPS, WARMUP_BATCHES = MODELS[MODEL]
TRAIN_PAIRS = 6400
BATCH_PAIRS = 32
REPEATS = 3
ENCODE_SENTENCES = 20000
ENCODE_BATCH = 64
# Past these many seconds of timed work a job stops early and reports the rates of what it
# did (bf16 matmuls in torch run at about a sixth of float32 on a CPU without
# AVX512-BF16, which would make one pass take most of an hour).
TIME_BUDGET = float(os.environ.get("BENCH_TIME_BUDGET", 60))
MAXLEN = 64
LEARNING_RATE = 2e-5
SCALE = 20.0


def data_dir():
    return os.environ.get("COSENT_SHARED_DATA", os.path.join(os.path.dirname(HERE), "..", "shared", "data"))


def vocab_path():
    return os.path.join(data_dir(), "vocab", "bert-base-chinese-vocab.txt")


def model_config():
    with open(MODEL_CONFIG, encoding="utf-8") as f:
        return json.load(f)


def bq_path(split):
    return os.path.join(data_dir(), "senteval_cn", "BQ", f"BQ.{split}.data")


def _bq_pairs(split, count):
    """The first ``count`` well-formed lines of BQ's split: (texts_a, texts_b, labels)."""
    path = bq_path(split)
    texts_a, texts_b, labels = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 3:
                continue
            texts_a.append(fields[0])
            texts_b.append(fields[1])
            labels.append(float(fields[2]))
            if len(labels) == count:
                break
    if len(labels) < count:
        raise SystemExit(f"{path}: only {len(labels)} pairs, the benchmark needs {count}")
    return texts_a, texts_b, labels


def train_pairs(count=None):
    return _bq_pairs("train", count or int(os.environ.get("BENCH_TRAIN_PAIRS", TRAIN_PAIRS)))


def test_sentences(count=None):
    count = count or int(os.environ.get("BENCH_ENCODE_SENTENCES", ENCODE_SENTENCES))
    texts_a, texts_b, _ = _bq_pairs("test", (count + 1) // 2)
    return [t for pair in zip(texts_a, texts_b) for t in pair][:count]


# The CPU features that decide which precision, and which contestant, is fast.
CPU_EXTENSIONS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def _cpuinfo(key):
    """The value of the first ``key`` line of /proc/cpuinfo, or None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_name():
    return _cpuinfo("model name") or platform.processor() or "unknown"


def cpu_flags():
    """Which of ``CPU_EXTENSIONS`` this CPU has, in that order."""
    flags = set((_cpuinfo("flags") or "").split())
    return [extension for extension in CPU_EXTENSIONS if extension in flags]


def has_bf16_arithmetic():
    """Whether the CPU computes in bf16 (AVX512-BF16 or AMX); elsewhere bf16 is emulated."""
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu_flags()))


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class StepClock:
    """End times of training steps; the rate counts only the steps after the warm-up.

    ``out_of_time()`` turns true once the steps after the warm-up have used the time
    budget (and at least 5 were timed), so a very slow contestant can stop early.
    """

    def __init__(self, warmup=WARMUP_STEPS, budget=TIME_BUDGET):
        self.ends, self.warmup, self.budget = [], warmup, budget

    def tick(self):
        self.ends.append(time.perf_counter())

    def out_of_time(self):
        timed = self.ends[self.warmup :]
        return len(timed) > 5 and timed[-1] - timed[0] > self.budget

    def pairs_per_second(self, batch_pairs=BATCH_PAIRS, parts=REPEATS):
        """Rates of ``parts`` consecutive stretches of the steps after the warm-up."""
        timed = self.ends[self.warmup :]
        if len(timed) < parts + 1:
            raise SystemExit(f"only {len(self.ends)} steps ran; more than {self.warmup + parts} are needed")
        cuts = [round(i * (len(timed) - 1) / parts) for i in range(parts + 1)]
        return [(b - a) * batch_pairs / (timed[b] - timed[a]) for a, b in zip(cuts, cuts[1:])]


def keras_step_callback(keras, clock, losses):
    """A Keras callback that records each step in ``clock`` and ``losses``, and ends ``fit``
    once the clock is out of time (``keras`` is passed in: this module imports no TensorFlow)."""

    class StepCallback(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))
            clock.tick()
            if clock.out_of_time():
                self.model.stop_training = True

    return StepCallback()


def encode_figures(encode, sentences, repeats=REPEATS):
    """Sentences per second of ``repeats`` ``encode(sentences)`` calls after a warm-up call.

    When the warm-up's rate says the calls would take longer than the time budget, each
    encodes only as many of the first sentences as fit (``sentences`` in the figures).
    """
    warmup = sentences[: WARMUP_BATCHES * ENCODE_BATCH]
    start = time.perf_counter()
    encode(warmup)
    affordable = int(len(warmup) / (time.perf_counter() - start) * TIME_BUDGET / repeats)
    sentences = sentences[: max(affordable, len(warmup))]
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        vectors = encode(sentences)
        rates.append(len(sentences) / (time.perf_counter() - start))
        if len(vectors) != len(sentences):
            raise SystemExit(f"encode returned {len(vectors)} vectors for {len(sentences)} sentences")
    return {"encode_sentences_per_second": rates, "sentences": len(sentences)}


def train_figures(clock, losses):
    timed = clock.ends[clock.warmup :]
    return {
        "train_pairs_per_second": clock.pairs_per_second(),
        # each timed step's seconds: two runs of the same batches compare on the steps both timed
        "step_seconds": [b - a for a, b in zip(timed, timed[1:])],
        "steps": len(clock.ends),
        "timed_steps": len(clock.ends) - clock.warmup,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }


def contestant_main(jobs):
    """Run ``jobs[JOB](precision)`` (a dict of figures) and write it, with peak RSS, as JSON."""
    job, precision, output = sys.argv[1:4]
    started = time.perf_counter()
    figures = jobs[job](precision)
    figures.update(peak_rss_mib=round(peak_rss_mib(), 1), wall_seconds=round(time.perf_counter() - started, 1))
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(figures, f)
    os.replace(tmp, output)
    print(json.dumps(figures), flush=True)
