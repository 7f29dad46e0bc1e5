"""make bench's bookkeeping (benchmarks/run.py): a failed job is recorded and reported, the rest
measured. The measurements themselves are `make bench`'s, not the tests'."""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, SHARED_DATA, requires_shared_data, write_config


def bench_module(name):
    """benchmarks/NAME.py, loaded afresh (it puts benchmarks/ on sys.path for its own imports)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_runner():
    return bench_module("run")


def figures(job, base):
    if job == "train":
        return {"train_pairs_per_second": [base, base + 1, base + 2], "timed_steps": 190, "peak_rss_mib": 1800.0}
    return {"encode_sentences_per_second": [base, base + 10, base + 20], "sentences": 20000, "peak_rss_mib": 900.0}


def rates(rate_of):
    """Figures per job whose median rate is ``rate_of(model, contestant, job, precision)``."""

    def at(key):
        median = rate_of(*key)
        return figures(key[2], median - 1 if key[2] == "train" else median - 10)

    return at


def results_json(path, runner, failed_job=None, failed_accuracy=None, figures_of=None, bf16_arithmetic=True):
    micro = {"mean_padded_length": 17.3, "train_step_gflop": 40.0}
    for precision in ("float32", "bf16"):
        micro[precision] = dict(
            step_seconds=0.2,
            loss_seconds=0.0005,
            loss_share=0.0025,
            achieved_gflops=200.0,
            matmul_peak_gflops=450.0,
            fraction_of_peak=0.44,
        )
    micro["turns"] = {
        "pairs_per_batch": 32,
        "steps": 72,
        "mean_padded_length": 15.0,
        "seconds": {"float32": 7.2, "bf16": 6.0},
    }
    runs = []
    for number, key in enumerate(runner.JOBS):
        run = dict(zip(("model", "contestant", "job", "precision"), key))
        if key == failed_job:
            run.update(error="exit status 1: Traceback ...\nRuntimeError: out of memory", command="python x.py")
        else:
            run.update(figures_of(key) if figures_of else figures(key[2], 100.0 + 10 * number))
        runs.append(run)
    accuracy = {
        name: {"test_spearman": 0.49, "valid_spearman": 0.51, "wall_seconds": 60.0} for name in runner.ACCURACY_RUNS
    }
    if failed_accuracy:
        accuracy[failed_accuracy] = {"error": "exit status 1: killed", "command": "python scripts/cosent.py STS-B"}
    raw = {
        "started": "2026-11-22T00:00:00+00:00",
        "cpu": "Test CPU",
        "bf16_arithmetic": bf16_arithmetic,
        "args": {
            "time_budget": 60.0,
            "bench_python": "x",
            "output_dir": str(path),
            "skip_accuracy": False,
            "report_only": False,
        },
        "micro": micro,
        "accuracy": accuracy,
        "runs": runs,
    }
    (path / "results.json").write_text(json.dumps(raw), encoding="utf-8")
    return path / "results.json"


def test_a_failed_job_is_reported_and_every_other_job_still_is(tmp_path, capsys):
    runner = bench_runner()
    failed = ("base", "sentence-transformers", "encode", "bf16")
    status = runner.report(str(results_json(tmp_path, runner, failed, failed_accuracy="length-grouped bf16")))
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert status == 1
    assert "| base | sentence-transformers | bf16 |" in text and "| failed | failed | failed |" in text  # encode cells
    assert "| base | encoding bf16 vs sentence-transformers bf16 | — (a job failed) |" in text
    assert re.search(r"\| small \| encoding bf16 vs sentence-transformers bf16 \| \d+\.\d\d× \|", text)
    assert re.search(r"\| base \| encoding float32 vs sentence-transformers \| \d+\.\d\d× \|", text)
    assert "## Failed jobs" in text and "RuntimeError: out of memory" in text and "exit status 1: killed" in text
    assert "| length-grouped bf16 | failed | failed |" in text and "| plain float32 | 0.5100 | 0.4900 |" in text


def test_without_failures_the_report_has_no_failure_section(tmp_path, capsys):
    runner = bench_runner()
    assert runner.report(str(results_json(tmp_path, runner))) == 0
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "Failed jobs" not in text and "failed" not in text


def test_a_job_that_fails_is_recorded_not_raised(tmp_path, capsys):
    runner = bench_runner()
    script = tmp_path / "broken.py"
    script.write_text("import sys\nprint('partial', file=sys.stderr)\nraise SystemExit(3)\n")
    result = runner.run_job(sys.executable, str(script), "train", "float32", dict(os.environ))
    assert result["error"].startswith("exit status 3: partial") and str(script) in result["command"]
    assert "FAILED:" in capsys.readouterr().out


def test_a_failed_micro_benchmark_leaves_the_rest_of_the_report(tmp_path, capsys):
    runner = bench_runner()
    path = results_json(tmp_path, runner)
    raw = json.loads(path.read_text())
    raw["micro"] = {"error": "exit status 1: boom", "command": "python micro.py"}
    path.write_text(json.dumps(raw))
    assert runner.report(str(path)) == 1
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "— (micro.py failed)" in text and "### micro" in text and "| small | this engine | float32 |" in text


def test_the_report_holds_each_model_to_the_issues_targets(tmp_path, capsys):
    runner = bench_runner()
    speed = {"this engine": 300.0, "original pipeline": 100.0, "sentence-transformers": 200.0}

    def rate_of(model, contestant, job, precision):
        faster = 1.6 if (contestant, precision) == ("this engine", "bf16") else 1.0
        return speed[contestant] * faster * (0.1 if model == "base" else 1.0)

    runner.report(str(results_json(tmp_path, runner, figures_of=rates(rate_of))))
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    for model in ("small", "base"):
        assert f"| {model} | training float32 vs sentence-transformers | 1.50× | ≥ 2.0× | **no** |" in text
        assert f"| {model} | encoding float32 vs sentence-transformers | 1.50× | ≥ 1.2× | yes |" in text
        assert f"| {model} | training bf16 vs float32, this engine | 1.60× | ≥ 1.5× | yes |" in text


def test_bf16_over_float32_training_compares_the_steps_both_runs_timed(tmp_path, capsys):
    runner = bench_runner()

    def figures_of(key):
        model, contestant, job, precision = key
        result = figures(job, 100.0)
        if (contestant, job) == ("this engine", "train"):
            # float32 timed 10 steps of 0.2 s; bf16, twice as fast on them, had time for 8 longer ones too
            result["step_seconds"] = [0.2] * 10 if precision == "float32" else [0.1] * 10 + [0.5] * 8
            result["train_pairs_per_second"] = [160.0] * 3 if precision == "float32" else [320.0, 64.0, 64.0]
        return result

    runner.report(str(results_json(tmp_path, runner, figures_of=figures_of)))
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    for model in ("small", "base"):
        assert (
            f"| {model} | training bf16 vs float32, this engine | 2.00× (the 10 steps both timed) | ≥ 1.5× | yes |"
            in text
        )


def test_bf16_over_float32_is_not_judged_on_a_cpu_without_bf16_arithmetic(tmp_path, capsys):
    runner = bench_runner()
    runner.report(str(results_json(tmp_path, runner, bf16_arithmetic=False)))
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert re.search(
        r"\| base \| training bf16 vs float32, this engine \| [\d.]+× \| ≥ 1.5× with AVX512-BF16 or AMX \| "
        r"not measurable \(this CPU has neither\) \|",
        text,
    )
    assert "one process (`micro.py`) | 1.20× (72 steps of 32 pairs each) | ≥ 1.5× with AVX512-BF16 or AMX | not" in text


TURNS_ROW = (
    "| small | training bf16 vs float32, this engine, steps taking turns in one process (`micro.py`) | "
    "1.20× (72 steps of 32 pairs each) | ≥ 1.5× | **no** |"
)


def test_bf16_over_float32_is_also_judged_on_steps_that_took_turns_in_one_process(tmp_path, capsys):
    runner = bench_runner()
    path = results_json(tmp_path, runner)
    runner.report(str(path))
    assert TURNS_ROW in (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    older = json.loads(path.read_text())  # a results.json from before micro.py measured turns
    del older["micro"]["turns"]
    path.write_text(json.dumps(older), encoding="utf-8")
    runner.report(str(path))
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "taking turns" not in text and "| small | CoSENT loss share of a float32 step at 64 pairs |" in text


@pytest.mark.heavy
def test_the_two_precisions_that_take_turns_are_float32_and_mixed_bf16(tmp_path, monkeypatch):
    from cosent_tf.backend import keras, tf

    micro = bench_module("micro")
    config = write_config(tmp_path / "config.json", vocab_size=50, hidden=16, layers=1, heads=2, intermediate=32)
    built = []
    training_step = micro.training_step

    def recorded(config_path):
        built.append(keras.mixed_precision.global_policy().name)
        return training_step(config_path)

    monkeypatch.setattr(micro, "training_step", recorded)
    ids = tf.constant([[2, 7, 9, 3, 0], [2, 8, 3, 0, 0], [2, 5, 6, 11, 3], [2, 4, 3, 0, 0]])
    batches = [
        ((ids, tf.zeros_like(ids)), tf.constant([1.0, 0.0])),
        ((ids[:, :4], tf.zeros_like(ids[:, :4])), tf.constant([0.0, 1.0])),
    ]
    seconds = micro.turn_taking_seconds(config, batches, rounds=2)
    assert built == ["float32", "mixed_bfloat16"]
    assert set(seconds) == {"float32", "bf16"} and all(s > 0 for s in seconds.values())
    assert keras.mixed_precision.global_policy().name == "float32"


def test_accuracy_is_compared_with_the_run_that_results_json_held_before(tmp_path, capsys):
    runner = bench_runner()
    assert runner.previous_run(str(tmp_path / "results.json")) is None
    path = results_json(tmp_path, runner)
    earlier = json.loads(path.read_text())
    earlier["accuracy"]["length-grouped float32"]["test_spearman"] = 0.47
    path.write_text(json.dumps(earlier))
    previous = runner.previous_run(str(path))
    raw = json.loads(results_json(tmp_path, runner).read_text())  # the new run replaces it
    raw["previous"] = previous
    path.write_text(json.dumps(raw))
    runner.report(str(path))
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "previous `make bench` (2026-11-22 00:00 UTC)" in text
    assert "| length-grouped float32 | 0.5100 | 0.4900 | +0.0000 | 0.4700 | +0.0200 | **no** | 60 |" in text
    assert "| length-grouped bf16 | 0.5100 | 0.4900 | +0.0000 | 0.4900 | +0.0000 | yes | 60 |" in text


def main_with_jobs_recorded(runner, monkeypatch, tmp_path, *options):
    """run.main with OPTIONS, no accuracy runs and every job faked (micro.py "fails"): its exit
    status and {(model, script, job, precision): (the job's environment, its --cpus)}."""
    started = {}

    def run_job(python, script, job, precision, env, model="small", cpus=None):
        started[(model, script, job, precision)] = env, cpus
        if job == "micro":
            return {"error": "exit status 1: not measured here", "command": "micro.py"}
        return figures(job, 100.0)

    monkeypatch.setattr(runner, "run_job", run_job)
    monkeypatch.setattr(runner, "check_environment", lambda python: None)
    monkeypatch.setattr(sys, "argv", ["run.py", "--skip-accuracy", "--output-dir", str(tmp_path), *options])
    return runner.main(), started


def test_only_the_frozen_weights_jobs_start_with_tf_onednn_assume_frozen_weights(tmp_path, monkeypatch):
    runner = bench_runner()
    monkeypatch.delenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", raising=False)
    status, jobs = main_with_jobs_recorded(runner, monkeypatch, tmp_path)
    assert status == 1  # micro.py "failed"
    started = {key: env.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS") for key, (env, _) in jobs.items()}
    frozen = {key for key, value in started.items() if value is not None}
    assert frozen == {
        (model, "this_engine.py", "encode_frozen_weights", p)
        for model in ("small", "base")
        for p in ("float32", "bf16")
    }
    assert {started[key] for key in frozen} == {"1"} and len(started) == len(runner.JOBS) + 1
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "| small | this engine, encode, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 | bf16 | | | | 110 (100–120) |" in text
    assert "| base | encoding bf16, frozen weights, vs sentence-transformers bf16 | 1.00× |" in text


def test_cpus_are_read_as_taskset_takes_them():
    runner = bench_runner()
    assert runner.parse_cpus("0,1") == [0, 1]
    assert runner.parse_cpus("0-3") == [0, 1, 2, 3]
    assert runner.parse_cpus("4, 0-1,1") == [0, 1, 4]
    for bad in ("", "a", "3-1", "0,,1", "1-", "-2"):
        with pytest.raises(argparse.ArgumentTypeError, match="give CPU numbers and ranges"):
            runner.parse_cpus(bad)


def test_a_job_runs_pinned_to_the_cpus_asked_for(tmp_path):
    runner = bench_runner()
    script = tmp_path / "affinity.py"
    script.write_text(
        "import json, os, sys\njson.dump({'cpus': sorted(os.sched_getaffinity(0))}, open(sys.argv[3], 'w'))\n"
    )
    first = min(os.sched_getaffinity(0))
    pinned = runner.run_job(sys.executable, str(script), "encode", "float32", dict(os.environ), cpus=[first])
    assert pinned == {"cpus": [first]}
    free = runner.run_job(sys.executable, str(script), "encode", "float32", dict(os.environ))
    assert free == {"cpus": sorted(os.sched_getaffinity(0))}


def test_cpus_this_process_may_not_use_stop_the_bench_before_any_job(monkeypatch, capsys):
    runner = bench_runner()
    started = []
    monkeypatch.setattr(runner, "run_job", lambda *a, **k: started.append(a))
    monkeypatch.setattr(runner, "check_environment", lambda python: started.append(python))
    missing = max(os.sched_getaffinity(0)) + 1
    monkeypatch.setattr(sys, "argv", ["run.py", "--cpus", f"0,{missing}"])
    with pytest.raises(SystemExit):
        runner.main()
    assert f"--cpus: this process may not run on CPU {missing}" in capsys.readouterr().err and not started


def test_a_pinned_run_says_so_and_pins_every_job(tmp_path, monkeypatch):
    runner = bench_runner()
    first = min(os.sched_getaffinity(0))
    _, jobs = main_with_jobs_recorded(runner, monkeypatch, tmp_path, "--cpus", str(first))
    pinned = {key: cpus for key, (_, cpus) in jobs.items()}
    assert len(pinned) == len(runner.JOBS) + 1 and set(map(tuple, pinned.values())) == {(first,)}
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert f", every process pinned to CPUs {first} (1 of them), Python" in text
    assert f"run.py --time-budget 60 --cpus {first}`" in text


def test_the_avx2_emulation_caps_every_job_and_reports_ratios_to_sentence_transformers(tmp_path, monkeypatch):
    emulation = bench_module("avx2_emulation")
    environments = []

    def run_job(python, script, job, precision, env, model="small"):
        environments.append(env)
        if (model, script, job) == ("base", "this_engine.py", "encode_saved_model"):
            return {"error": "exit status 1: out of memory", "command": f"{python} {script} {job}"}
        return figures(job, 500 if script == "this_engine.py" else 200)

    monkeypatch.setattr(emulation.run, "run_job", run_job)
    checked = []
    monkeypatch.setattr(emulation.run, "check_environment", checked.append)

    def matmul_rate(python, library, env):  # PyTorch's probe fails: reported, the jobs still run
        return None if library == "PyTorch" else 100.0 if "ATEN_CPU_CAPABILITY" in env else 400.0

    monkeypatch.setattr(emulation, "matmul_rate", matmul_rate)
    monkeypatch.setattr(sys, "argv", ["avx2_emulation.py", "--output-dir", str(tmp_path)])
    assert emulation.main() == 1  # one job failed
    assert checked == [".venv-reference/bin/python"]  # before any job
    assert len(environments) == len(emulation.JOBS) == 10
    assert all(env[k] == v for env in environments for k, v in emulation.AVX2_CAPS.items())
    report = (tmp_path / "AVX2_EMULATION.md").read_text(encoding="utf-8")
    assert "| TensorFlow | 400 | 100 |" in report and "| PyTorch | failed | failed |" in report
    training = re.findall(
        r"\| (small|base) \| training float32 vs sentence-transformers \| ([\d.]+)× \| ≥ 2.0× \| yes \|", report
    )
    assert [model for model, _ in training] == ["small", "base"] and {value for _, value in training} == {
        f"{501 / 201:.2f}"
    }  # medians
    assert "| base | SavedModel encoding float32 vs sentence-transformers | — (a job failed) |" in report
    assert "## Failed jobs" in report and "### base this engine encode_saved_model" in report
    assert "out of memory" in report
    assert json.loads((tmp_path / "avx2_emulation.json").read_text())["caps"] == emulation.AVX2_CAPS


def test_the_bench_stops_before_any_job_when_its_python_or_data_is_missing(tmp_path, monkeypatch):
    runner = bench_runner()
    jobs = []
    monkeypatch.setattr(runner, "run_job", lambda *args, **kwargs: jobs.append(args))
    monkeypatch.setenv("COSENT_SHARED_DATA", str(tmp_path / "no-data"))
    missing = str(tmp_path / "no-venv" / "python")
    monkeypatch.setattr(sys, "argv", ["run.py", "--bench-python", missing, "--output-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as stopped:
        runner.main()
    message = str(stopped.value.code)
    assert f"--bench-python {missing}: not found" in message
    assert f"{tmp_path / 'no-data' / 'senteval_cn' / 'BQ' / 'BQ.train.data'}: not found" in message
    assert "bert-base-chinese-vocab.txt: not found" in message
    assert jobs == [] and not (tmp_path / "results.json").exists()


@requires_shared_data
def test_a_bench_python_without_sentence_transformers_is_named_before_any_job(monkeypatch):
    runner = bench_runner()
    monkeypatch.setenv("COSENT_SHARED_DATA", SHARED_DATA)
    # this environment is the engine's: it has TensorFlow, not torch
    with pytest.raises(SystemExit) as stopped:
        runner.check_environment(sys.executable)
    message = str(stopped.value.code)
    assert f"--bench-python {sys.executable}: cannot import sentence-transformers and torch (" in message
    assert "ModuleNotFoundError" in message and "not found" not in message


def step_profiler():
    return bench_module("step_profile")


def test_thread_occupancy_splits_the_span_and_charges_idle_time_to_the_ops_running_then():
    profile = step_profiler()  # imports cosent_tf, which must come before TensorFlow's own modules
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    names = {1: "encoder/dense:Foo", 2: "ExecutorState::Process", 3: "grad/x:Bar", 4: "adam:Baz", 5: "loop"}
    for key, name in names.items():
        plane.event_metadata[key].name = name
    ms = 10**9  # picoseconds

    def thread(line_name, *events):
        line = plane.lines.add(name=line_name)
        for key, start, end in events:
            line.events.add(metadata_id=key, offset_ps=start * ms, duration_ps=(end - start) * ms)

    # inter-op thread 1: Foo 0-10 ms (inside the executor's event); thread 2: Bar 5-8, Baz 12-14
    thread("tf_Compute/1", (2, 0, 10), (1, 0, 10))
    thread("tf_Compute/2", (3, 5, 8), (4, 12, 14))
    thread("python", (5, 0, 40))  # not an inter-op thread: ignored
    thread("tf_numa_-1_Eigen/7", (5, 20, 40))  # an intra-op thread: ignored too
    figures = profile.thread_occupancy(space, steps=2)  # per step: halved
    assert figures["compute_threads"] == 2
    assert figures["span"] == 7.0  # 14 ms over 2 steps
    # 0-5 one busy, 5-8 both, 8-10 one, 10-12 none, 12-14 one
    assert (figures["all_busy"], figures["some_idle"], figures["none_busy"]) == (1.5, 4.5, 1.0)
    assert figures["while_idle"] == {"Foo": 3.5, "Baz": 1.0}


def test_op_types_are_read_from_op_events_only():
    profile = step_profiler()
    assert profile.op_type("encoder/Transformer-0/token_dense/BiasAdd:_MklNativeFusedMatMul") == "_MklNativeFusedMatMul"
    assert profile.op_type("ExecutorState::Process") is None
    assert profile.op_type("ThreadpoolListener::StartRegion") is None
    assert profile.op_type("MemoryAllocation") is None
    assert profile.is_matmul("_MklEinsum") and profile.is_matmul("_MklMatMul") and not profile.is_matmul("Mul")


def run_on_a_tiny_model(script, tmp_path, monkeypatch, *options):
    """benchmarks/SCRIPT.py's main on a one-layer model of width 24, reporting into tmp_path/out.

    In this process, as neither script needs one of its own: the step profile's policy and seed
    are scoped, and the profiler records only its own steps, as nothing else runs meanwhile;
    core scaling's parent only starts and reads the children it pins (one core, then all),
    processes because TensorFlow sizes its thread pools from the affinity it starts with."""
    monkeypatch.setenv("COSENT_SHARED_DATA", SHARED_DATA)  # read when the batches are made, children's too
    config = write_config(tmp_path / "config.json", hidden=24, layers=1, heads=2, intermediate=48)
    bench_module(script).main(["--config", config, *options, "--output-dir", str(tmp_path / "out")])


@pytest.mark.slow
@requires_shared_data
def test_the_step_profile_reports_both_precisions_from_a_real_profile(tmp_path, monkeypatch):
    run_on_a_tiny_model("step_profile", tmp_path, monkeypatch, "--pairs", "8", "--steps", "3")
    figures = json.loads((tmp_path / "out" / "step_profile_custom.json").read_text())
    for precision in ("float32", "bf16"):
        run = figures[precision]
        assert run["step_ms"] > 0 and run["matmul_ms"] > 0 and run["other_ms"] > 0
        assert run["matmul_ms"] == pytest.approx(
            sum(v for k, v in run["op_ms"].items() if "MatMul" in k or "Einsum" in k)
        )
        threads = run["threads"]
        parts = threads["all_busy"] + threads["some_idle"] + threads["none_busy"]
        assert parts == pytest.approx(threads["span"], rel=1e-6) and threads["compute_threads"] >= 1
    # mixed bf16 casts every weight to bfloat16 each step: the bf16 run is the one under that policy
    # (counted, not timed: a cast of this model's weights takes microseconds)
    assert figures["bf16"]["op_executions"]["Cast"] > 2 * figures["float32"]["op_executions"].get("Cast", 0.0)
    report = (tmp_path / "out" / "STEP_PROFILE_custom.md").read_text(encoding="utf-8")
    assert "| wall, a step |" in report and "## What runs while an inter-op thread has no op" in report
    assert "Model custom (config.json), 8 pairs a step" in report


@pytest.mark.slow
@requires_shared_data
def test_core_scaling_times_both_precisions_on_one_core_and_on_all(tmp_path, monkeypatch):
    options = ["--pairs", "8", "--steps", "2", "--rounds", "1", "--repeats", "1"]
    run_on_a_tiny_model("core_scaling", tmp_path, monkeypatch, *options)
    figures = json.loads((tmp_path / "out" / "core_scaling_custom.json").read_text())
    cores = len(os.sched_getaffinity(0))
    assert figures["cores"] == cores and set(figures["step_ms"]) == {"1", str(cores)}
    for step_ms in figures["step_ms"].values():
        assert set(step_ms) == {"float32", "bf16"} and all(ms > 0 for ms in step_ms.values())
    report = (tmp_path / "out" / "CORE_SCALING_custom.md").read_text(encoding="utf-8")
    one, every = figures["step_ms"]["1"], figures["step_ms"][str(cores)]
    assert (
        f"| float32 | {one['float32']:.1f} | {every['float32']:.1f} | {one['float32'] / every['float32']:.2f}× |"
        in report
    )


def test_a_child_that_ran_on_other_cores_than_it_was_pinned_to_fails_the_measurement(monkeypatch):
    scaling = bench_module("core_scaling")

    def unpinned(command, **kwargs):  # a child that reports every core whatever it was given
        output = command[command.index("--child") + 1]
        with open(output, "w", encoding="utf-8") as f:
            json.dump({"step_ms": {"float32": 2.0, "bf16": 1.0}, "cores": 64}, f)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(scaling.subprocess, "run", unpinned)
    args = scaling.argparse.Namespace(pairs=8, steps=2, rounds=1)
    with pytest.raises(SystemExit, match="ran on 64 cores, not the 1 it was pinned to"):
        scaling.pinned_step_ms({0}, args, "config.json")


# --- benchmarks/keras3_bench.py: the Keras 3 route against the Keras 2 engine ---------------------


def keras3_results(path, failed=None, rates_of=None):
    """A keras3_results.json: each contestant's steps/s and sentences/s are ``rates_of(name, job)``
    (median of three), and the job ``failed`` (a (name, job) pair) failed."""
    bench = bench_module("keras3_bench")
    rates_of = rates_of or (lambda name, job: 10.0)
    contestants = {}
    for name in bench.CONTESTANTS:
        contestants[name] = {}
        for job in bench.JOBS:
            if (name, job) == failed:
                contestants[name][job] = {"error": "exit status 1: Traceback ...\nValueError: boom", "command": "x"}
                continue
            rate = rates_of(name, job)
            key = "train_steps_per_second" if job == "train" else "encode_sentences_per_second"
            figures = {key: [rate - 1, rate, rate + 2], "peak_rss_mib": 900.0, "jit_compile": name != "keras2"}
            if job == "train":
                figures["first_step_seconds"] = 4.0
            contestants[name][job] = {**figures, "keras": "3.15.1" if name != "keras2" else "2.21.0"}
    raw = {
        "started": "2026-11-25T04:00:00+00:00",
        "cpu": "Test CPU",
        "cpu_flags": ["avx2"],
        "cores": 2,
        "python": "3.11.7",
        "nice": 19,
        "command": ".venv/bin/python benchmarks/keras3_bench.py",
        "args": {},
        "setup": {
            "train_pairs": 3200,
            "encode_sentences": 2722,
            "mean_tokens_train": 12.3,
            "mean_tokens_encode": 19.7,
            "mean_width_train": 30.0,
            "mean_width_encode": 26.0,
        },
        "contestants": contestants,
    }
    (path / "keras3_results.json").write_text(json.dumps(raw), encoding="utf-8")
    return bench, path / "keras3_results.json"


def test_the_keras3_report_gives_ratios_to_the_keras2_engine_of_the_same_run(tmp_path):
    speeds = {"keras2": 4.0, "keras3-tensorflow": 5.0, "keras3-jax": 6.0}
    bench, path = keras3_results(tmp_path, rates_of=lambda name, job: speeds[name] * (100 if job == "encode" else 1))
    assert bench.write_report(str(path)) == 0
    text = (tmp_path / "KERAS3.md").read_text(encoding="utf-8")
    assert "| Keras 3, TensorFlow backend (keras-hub BertBackbone) | 1.25× | 1.25× |" in text
    assert "| Keras 3, JAX backend (keras-hub BertBackbone) | 1.50× | 1.50× |" in text
    assert "| Keras 2 engine (tf-keras, bert4keras) | 4.00 (3.00–6.00) | 4.0 | 900.0 | 400 (399–402) |" in text
    assert "Failed jobs" not in text and (tmp_path / "keras3.png").stat().st_size > 0


def test_a_failed_keras3_job_is_reported_and_the_other_jobs_still_are(tmp_path):
    bench, path = keras3_results(tmp_path, failed=("keras3-jax", "train"))
    assert bench.write_report(str(path)) == 1
    text = (tmp_path / "KERAS3.md").read_text(encoding="utf-8")
    assert "| Keras 3, JAX backend (keras-hub BertBackbone) | — (a job failed) | 1.00× |" in text
    assert "| Keras 3, TensorFlow backend (keras-hub BertBackbone) | 1.00× | 1.00× |" in text
    assert "### keras3-jax train" in text and "ValueError: boom" in text


def test_each_keras3_bench_process_gets_its_own_keras(monkeypatch):
    bench = bench_module("keras3_bench")
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert "KERAS_BACKEND" not in bench.environment("keras2")  # tf-keras: no Keras 3 backend to pick
    assert bench.environment("keras3-tensorflow")["KERAS_BACKEND"] == "tensorflow"
    assert bench.environment("keras3-jax")["KERAS_BACKEND"] == "jax"


def test_keras3_bench_batches_take_a_few_widths_and_warm_each_up_first():
    import numpy as np

    bench = bench_module("keras3_bench")
    assert [bench.bucket(n) for n in (1, 16, 17, 33, 64)] == [16, 16, 32, 48, 64]
    ids = np.arange(10 * 64).reshape(10, 64)
    labels = np.arange(10.0)
    widths = np.array([32, 32, 16, 32, 64])  # five batches of two rows
    cut = bench.batches(ids, widths, 2, labels)
    # the first batch of each width (0, 2, 4) first, then the rest in order, labels with their rows
    assert [batch.shape[1] for batch, _ in cut] == [32, 16, 64, 32, 32]
    assert [batch[0, 0] for batch, _ in cut] == [0, 256, 512, 128, 384]
    assert [list(rows) for _, rows in cut] == [[0, 1], [4, 5], [8, 9], [2, 3], [6, 7]]
    assert all((batch == ids[2 * n : 2 * n + 2, : widths[n]]).all() for n, (batch, _) in zip([0, 2, 4, 1, 3], cut))
