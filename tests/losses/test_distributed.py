"""The losses over the global batch under tf.distribute (cosent_tf.maths.ops.Ops.gather_across_replicas).

A process is needed: MirroredStrategy's two replicas are two logical CPU devices, which cosent_tf
makes when imported (COSENT_TF_CPU_DEVICES=2), and a MultiWorkerMirroredStrategy cluster is a
process per worker. So one process (replica_steps.py, the ``replicas`` fixture) runs every case of
this module that needs two replicas or one device, and one localhost cluster of two workers (the
``cluster`` fixture) every two-worker case, each case's result read by its own test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import localhost_workers
from tests.training.test_distribute import TwoDeviceProcess

REPLICA_STEPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replica_steps.py")


def selected(request, test):
    """The ``case`` parameter of each of ``test``'s cases this session runs."""
    return [item.callspec.params["case"] for item in request.session.items if getattr(item, "function", None) is test]


def run_replica_steps(folder, cases):
    """replica_steps.py's two-device process run once on ``cases`` ([check, name] each); what it
    wrote, as a TwoDeviceProcess (its result("check:name"))."""
    results_path = folder / "replicas.jsonl"
    command = [sys.executable, REPLICA_STEPS, "replicas", json.dumps(cases), str(results_path)]
    # A process: the two logical CPU devices are made when cosent_tf is imported, and this one has one.
    env = {**os.environ, "COSENT_TF_CPU_DEVICES": "2"}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120 + 60 * len(cases))
        returncode, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as late:
        # what the process wrote before it was killed, as bytes where Python did not decode it yet
        stderr = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else late.stderr or ""
        returncode = "none: killed after its timeout"
    return TwoDeviceProcess(results_path, returncode, stderr)


def run_cluster(folder, names):
    """Two replica_steps.py workers of a localhost cluster, each running check "steps" of every
    name; what each wrote, as a TwoDeviceProcess, the chief's first."""
    cases = json.dumps([["steps", name] for name in names])
    paths = [folder / f"worker-{index}.jsonl" for index in range(2)]
    # A process per worker: a MultiWorkerMirroredStrategy is one task of its cluster, made once a process.
    workers = [
        subprocess.Popen(
            [sys.executable, REPLICA_STEPS, "worker", cases, str(path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env, path in zip(localhost_workers(2), paths)
    ]
    stderrs = []
    try:
        for worker in workers:
            try:
                stderrs.append(worker.communicate(timeout=120 + 60 * len(names))[1])
            except subprocess.TimeoutExpired:
                stderrs.append("")
    finally:
        for worker in workers:  # one left waiting for its peer: end it, and its cases fail
            worker.kill()
    for worker in workers:
        worker.wait()
    returncodes = [worker.returncode for worker in workers]
    return [TwoDeviceProcess(*written) for written in zip(paths, returncodes, stderrs)]


@pytest.fixture(scope="module")
def replicas(request, tmp_path_factory):
    """The module's one two-logical-device process: one step three ways for each two-replica
    case, and the steps on one device for each two-worker case, of those this session runs."""
    cases = [
        ["three-ways", name]
        for name in selected(request, test_under_two_replicas_the_loss_takes_the_global_batch_as_one_device_would)
    ]
    cases += [
        ["steps", name]
        for name in selected(request, test_two_workers_on_localhost_step_as_one_process_on_the_global_batch)
    ]
    return run_replica_steps(tmp_path_factory.mktemp("replicas"), cases)


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    """The module's one localhost cluster of two workers, running every two-worker case this session runs."""
    names = selected(request, test_two_workers_on_localhost_step_as_one_process_on_the_global_batch)
    return run_cluster(tmp_path_factory.mktemp("cluster"), names)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    ["cosent-feature", "cosent-interaction", "angle", "mnrl", "mnrl-hard-symmetric", "cosent-ibn"],
)
def test_under_two_replicas_the_loss_takes_the_global_batch_as_one_device_would(case, replicas):
    steps = replicas.result(f"three-ways:{case}")
    one_device, gathered, per_slice = steps["one_device"], steps["gathered"], steps["per_slice"]
    assert gathered["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    for expected, actual in zip(one_device["gradients"], gathered["gradients"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    # The trap (--per-replica-loss): each replica's slice alone is another loss, with fewer pairs
    # to rank or fewer in-batch candidates, and another gradient.
    assert per_slice["loss"] != pytest.approx(one_device["loss"], rel=1e-3)
    kernel_gap = np.abs(np.subtract(per_slice["gradients"][0], one_device["gradients"][0])).max()
    assert kernel_gap > 1e-3 * np.abs(one_device["gradients"][0]).max()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["mnrl-hard-symmetric", "cosent-ibn"])
def test_two_workers_on_localhost_step_as_one_process_on_the_global_batch(case, replicas, cluster):
    one_process = replicas.result(f"steps:{case}")
    chief, other = (worker.result(f"steps:{case}") for worker in cluster)
    assert (one_process["replicas"], chief["replicas"], other["replicas"]) == (1, 2, 2)
    assert chief["loss"] == pytest.approx(one_process["loss"], rel=1e-5)
    # the steps moved the weights far beyond the tolerance
    assert max(np.abs(np.subtract(w, s)).max() for w, s in zip(one_process["weights"], one_process["start"])) > 1e-2
    for expected, chiefs, others in zip(one_process["weights"], chief["weights"], other["weights"]):
        np.testing.assert_allclose(chiefs, expected, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(others, chiefs)  # the replicas stay in sync
