"""Thread pools sized for the pytest-xdist worker this process is (imported by both suites'
conftest.py before TensorFlow or JAX is).

A worker's TensorFlow would otherwise size its intra-op pool to every core of the machine, as
would oneDNN's OpenMP and XLA's Eigen pool, so two workers on two cores would each run two
threads per op and spend their time switching. Each worker takes its share of the cores; the
inter-op pool stays TensorFlow's own, since collective ops across logical devices wait on it.
Subprocesses that tests start inherit the setting. A variable already set is left as it is.

Garbage collection is tuned for a worker's heap, after collection (:func:`collect_garbage_less_often`).
"""

import gc
import os


def share_of_cores():
    """The worker's share of the cores its run may use: ``COSENT_TEST_CORES`` of them (``make
    test-keras3`` runs its two backends side by side, each on half), else the machine's."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = int(os.environ.get("COSENT_TEST_CORES") or os.cpu_count() or 1)
    return max(1, cores // workers)


def size_thread_pools():
    """Only in a worker, or a run told its cores: a bare pytest takes the machine, as TensorFlow would."""
    if not (os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("COSENT_TEST_CORES")):
        return
    threads = str(share_of_cores())
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", threads)
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", threads)
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads={threads}"


def collect_garbage_less_often():
    """Called once the tests are collected: what is alive then (TensorFlow, the test modules) lives
    as long as the process, so it leaves the collector's scans (``gc.freeze``), and the youngest
    generation is collected every 10,000 allocations instead of 700: the suite builds and traces
    models, leaving many objects per test, and each full collection walks a TensorFlow-sized heap
    (docs/testing.md has what it cost)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


size_thread_pools()
