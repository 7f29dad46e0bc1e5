"""Soak: many short trainings, in one process and across processes, counting failures.

Usage: ``python benchmarks/soak.py [--runs 200] [--processes 4] [--variant NAME ...]``
(``make soak``). A run trains a tiny random BERT (1-2 layers, width 16-64, a vocabulary of
135-400 tokens) for ``--steps`` steps on random pairs of varied lengths, through the
engine's own path: ``pair_dataset``/``interaction_dataset``, ``build_encoder``/
``build_interaction_model``, CoSENT, ``FusedAdam``, ``model.fit``, then scores the pairs
with the inference core. Runs cycle through feature/interaction and float32/bf16 (or
the ``--kind`` and ``--precision`` named).
A run fails if it raises, if its loss is not finite, if the process dies, or if a batch
that reached the model differs from the arrays that made it (each batch carries a
batch that reached the model holds what the pipeline cannot make: ids outside the
vocabulary, non-zero segment ids, labels other than 0/1).

``--processes`` workers run at once (more than the cores, to make the scheduler
interleave threads); each trains ``runs / processes`` models one after the other.
A variant names environment settings for its workers, to bisect (see VARIANTS):
``--variant before-fix --variant default`` compares the engine with and without its
route around oneDNN's primitive cache on one CPU.
Writes ``benchmarks/soak.json`` with the CPU, each variant's counts and every failure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import common  # noqa: E402

# Environment settings per variant: "default" is the engine as shipped; "before-fix" puts
# back oneDNN's primitive cache (backend turns it off); each other one switches off one of
# the suspects the issue named, to bisect on a CPU that shows the failure.
VARIANTS = {
    "default": {},
    "before-fix": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
    "no-bfc": {"TF_CPU_ALLOCATOR_USE_BFC": "0", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
    "onednn-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
    "no-onednn": {"TF_ENABLE_ONEDNN_OPTS": "0"},
    "keras-adam": {"COSENT_SOAK_OPTIMIZER": "adam", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
    "no-first-token": {"COSENT_SOAK_POOLING": "first-token-off", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
    "copied-batches": {"COSENT_SOAK_COPY": "1", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
}


# ---------------------------------------------------------------- worker side


def _worker(first_run, runs, steps, out_path):
    import numpy as np

    from cosent_tf.backend import keras, tf
    from cosent_tf.data import pipeline
    from cosent_tf.inference.runtime import cosine_scores, interaction_scores
    from cosent_tf.losses import CoSENTLoss, InteractionCoSENTLoss
    from cosent_tf.models import builders as models
    from cosent_tf.models.builders import build_encoder, build_interaction_model
    from cosent_tf.optimizers import FusedAdam

    if os.environ.get("COSENT_SOAK_POOLING") == "first-token-off":
        models.first_token_output = lambda transformer, architecture: None
    if os.environ.get("COSENT_SOAK_COPY") == "1":
        _pad = pipeline.pad_batch
        pipeline.pad_batch = lambda sequences, padding_id=0: _pad(sequences, padding_id).copy()

    class Checked(keras.Model):
        """Fails the step if a batch that reached it cannot have come from the pipeline."""

        vocab_size = None

        def train_step(self, data):
            (token_ids, segment_ids), labels = data
            tf.debugging.assert_non_negative(token_ids, message="negative token id in a batch")
            tf.debugging.assert_less(token_ids, self.vocab_size, message="token id past the vocabulary")
            tf.debugging.assert_equal(segment_ids, tf.zeros_like(segment_ids), message="segment ids not 0")
            tf.debugging.assert_equal(labels * (1 - labels), tf.zeros_like(labels), message="label not 0/1")
            return super().train_step(data)

    small = os.environ.get("COSENT_SOAK_SIZE") == "small"
    results = []
    for run in range(first_run, first_run + runs):
        rng = np.random.default_rng(run)
        kinds = os.environ.get("COSENT_SOAK_KINDS", "feature,interaction").split(",")
        precisions = os.environ.get("COSENT_SOAK_PRECISIONS", "float32,bf16").split(",")
        kind = kinds[run % len(kinds)]
        precision = precisions[(run // len(kinds)) % len(precisions)]
        if small:
            vocab_size, hidden, layers, heads = 21128, 312, 4, 12
        else:
            vocab_size, hidden, layers, heads = (
                int(rng.integers(135, 400)),
                int(rng.choice([16, 32, 64])),
                int(rng.integers(1, 3)),
                2,
            )
        record = {"run": run, "kind": kind, "precision": precision, "hidden": hidden, "layers": layers}
        started = time.time()
        try:
            keras.backend.clear_session()
            keras.utils.set_random_seed(run)
            keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
            config = {
                "vocab_size": vocab_size,
                "hidden_size": hidden,
                "num_hidden_layers": layers,
                "num_attention_heads": heads,
                "intermediate_size": hidden * 4,
                "hidden_act": "gelu",
                "max_position_embeddings": 128,
                "type_vocab_size": 2,
            }
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(config, f)
            pairs = int(rng.integers(40, 200)) * (4 if small else 1)
            batch = 32 if small else int(rng.integers(2, 9))

            def sentence(rng=rng, vocab_size=vocab_size):
                return list(rng.integers(104, vocab_size, int(rng.integers(1, 60 if small else 30))))

            ids_a, ids_b = [sentence() for _ in range(pairs)], [sentence() for _ in range(pairs)]
            labels = rng.integers(0, 2, pairs).astype(np.float32)
            if kind == "feature":
                model = build_encoder(f.name)
                loss, inputs = CoSENTLoss(20.0), (ids_a, ids_b)
                dataset = pipeline.pair_dataset(
                    ids_a, ids_b, labels, batch, seed=run, repeat=True, group_by_length=bool(run % 3)
                )
            else:
                model = build_interaction_model(f.name)
                loss, inputs = InteractionCoSENTLoss(), [a + b for a, b in zip(ids_a, ids_b)]
                dataset = pipeline.interaction_dataset(
                    inputs, labels, batch, seed=run, repeat=True, group_by_length=bool(run % 3)
                )
            os.unlink(f.name)
            model = Checked(model.inputs, model.outputs)
            model.vocab_size = vocab_size
            optimizer = (
                keras.optimizers.Adam(1e-3) if os.environ.get("COSENT_SOAK_OPTIMIZER") == "adam" else FusedAdam(1e-3)
            )
            model.compile(optimizer=optimizer, loss=loss)
            history = model.fit(dataset, epochs=2, steps_per_epoch=steps // 2, verbose=0)
            losses = history.history["loss"]
            scores = cosine_scores(model, *inputs) if kind == "feature" else interaction_scores(model, inputs)
            if not (np.all(np.isfinite(losses)) and np.all(np.isfinite(scores))):
                raise FloatingPointError(f"non-finite loss {losses} or scores")
            record.update(ok=True, loss=float(losses[-1]))
        except Exception as error:  # counted, not hidden: every failure is reported
            record.update(
                ok=False, error=f"{type(error).__name__}: {str(error)[:500]}", traceback=traceback.format_exc()[-2000:]
            )
        record["seconds"] = round(time.time() - started, 2)
        results.append(record)
        with open(out_path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(results, f)
        os.replace(out_path + ".tmp", out_path)
    keras.mixed_precision.set_global_policy("float32")


# ------------------------------------------------------------- controller side


def _records(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError:  # not written yet
        return []


def run_variant(name, runs, processes, steps, size, kinds, precisions):
    env = dict(
        os.environ,
        COSENT_SOAK_SIZE=size,
        COSENT_SOAK_KINDS=",".join(kinds),
        COSENT_SOAK_PRECISIONS=",".join(precisions),
        **VARIANTS[name],
    )
    per_process = -(-runs // processes)
    workers = []
    with tempfile.TemporaryDirectory() as folder:
        for p in range(processes):
            out = os.path.join(folder, f"worker{p}.json")
            log = open(os.path.join(folder, f"worker{p}.log"), "w")  # noqa: SIM115 (closed once the worker ends)
            command = [
                sys.executable,
                os.path.abspath(__file__),
                "--worker",
                str(p * per_process),
                str(min(per_process, runs - p * per_process)),
                str(steps),
                out,
            ]
            workers.append((subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT), out, log))
        while any(process.poll() is None for process, _, _ in workers):
            time.sleep(15)
            done = [r for _, out, _ in workers for r in _records(out)]
            print(f"  {name}: {len(done)}/{runs} runs, {sum(not r['ok'] for r in done)} failed", flush=True)
        records, crashes = [], []
        for process, out, log in workers:
            log.close()
            done = _records(out)
            records.extend(done)
            if process.returncode != 0:
                with open(log.name, encoding="utf-8", errors="replace") as f:
                    crashes.append({"exit": process.returncode, "after_runs": len(done), "log_tail": f.read()[-2000:]})
    failures = [r for r in records if not r["ok"]]
    return {
        "variant": name,
        "env": VARIANTS[name],
        "size": size,
        "kinds": kinds,
        "precisions": precisions,
        "runs": len(records),
        "failed_runs": len(failures),
        "crashed_processes": len(crashes),
        "failures": failures,
        "crashes": crashes,
        "steps_per_run": steps,
    }


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        first, runs, steps, out = sys.argv[2:6]
        _worker(int(first), int(runs), int(steps), out)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="short trainings per variant")
    parser.add_argument("--processes", type=int, default=4, help="workers at once")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument(
        "--size",
        choices=["tiny", "small"],
        default="tiny",
        help="tiny: random 1-2 layer models of width 16-64 and vocabularies of 135-400; "
        "small: the bundled L4/H312 configuration with the 21128-token vocabulary",
    )
    parser.add_argument(
        "--kind",
        action="append",
        choices=["feature", "interaction"],
        help="default: both, taking turns; repeat to name several",
    )
    parser.add_argument(
        "--precision",
        action="append",
        choices=["float32", "bf16"],
        help="default: both, taking turns; repeat to name several",
    )
    parser.add_argument(
        "--variant", action="append", choices=sorted(VARIANTS), help="default: 'default' only; repeat to bisect"
    )
    parser.add_argument("--output", default=os.path.join(HERE, "soak.json"))
    args = parser.parse_args()
    summary = {"cpu": common.cpu_name(), "cpu_flags": common.cpu_flags(), "variants": []}
    print(f"CPU: {summary['cpu']} ({', '.join(summary['cpu_flags'])})", flush=True)
    for name in args.variant or ["default"]:
        started = time.time()
        result = run_variant(
            name,
            args.runs,
            args.processes,
            args.steps,
            args.size,
            args.kind or ["feature", "interaction"],
            args.precision or ["float32", "bf16"],
        )
        result["seconds"] = round(time.time() - started)
        summary["variants"].append(result)
        print(
            f"{name}: {result['runs']} runs, {result['failed_runs']} failed, "
            f"{result['crashed_processes']} processes crashed, {result['seconds']} s",
            flush=True,
        )
        for failure in result["failures"][:5]:
            print(f"  run {failure['run']} ({failure['kind']}, {failure['precision']}): {failure['error']}")
        for crash in result["crashes"][:3]:
            print(f"  process exit {crash['exit']} after {crash['after_runs']} runs: {crash['log_tail'][-300:]}")
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
