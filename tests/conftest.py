import fcntl
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import dask
import pytest

from dasq.backend import cpu
from dasq.backend.gpu import gpu_available

# Blocks of every size run the CPU backend's numba kernels in the tests (by default
# blocks under cpu.COMPILED_FROM amplitudes run the array code, which the "gpu-twin"
# device runs in every reference test, and tests/test_cold_start.py compares the two).
DEFAULT_COMPILED_FROM = cpu.COMPILED_FROM
cpu.COMPILED_FROM = 0

# The devices every reference test runs on: the CPU backend, the GPU backend's code
# on numpy (what CI has), and the GPU itself where cupy finds one.
DEVICES = ["cpu", "gpu-twin", *(["gpu"] if gpu_available() else [])]

# pytest-xdist's ``-n auto``: at most this many test processes. Each holds its own
# imports (Qiskit, Cirq, PennyLane) and its own shared cluster, and many tests start
# child interpreters or clusters of their own, so past a few processes a machine's
# memory and cores go to those rather than to more tests at once.
MAX_TEST_PROCESSES = 8


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, and a container's CPU quota
    (cgroup v2 ``cpu.max``), which ``os.cpu_count`` and affinity both ignore."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as limits:
            quota, period = limits.read().split()
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cores


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which may be absent
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` starts one test process per usable core (never more than
    MAX_TEST_PROCESSES): xdist's own count would be the machine's, not the container's."""
    return max(1, min(usable_cores(), MAX_TEST_PROCESSES))


@pytest.fixture(params=DEVICES)
def on_device(request):
    """Runs the test once per device, as dask config ``dasq.device`` (what
    ``simulate`` uses when it is given no ``device``)."""
    with dask.config.set({"dasq.device": request.param}):
        yield request.param


@pytest.fixture(scope="session")
def shared_cluster():
    """Two single-thread worker processes, started once per test process (at most one
    per core under ``-n auto``), for every test that only needs "a cluster": each
    LocalCluster of worker processes costs seconds to start and to load dasq's kernels.
    A test that kills workers, patches them or needs another shape starts its own; one
    that registers a plugin here removes it again."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def shared_client(shared_cluster):
    """A client of the shared cluster, not Dask's default (a module that wants a default
    client makes its own on ``shared_cluster``)."""
    distributed = pytest.importorskip("distributed")
    with distributed.Client(shared_cluster, set_as_default=False) as client:
        yield client


@pytest.fixture(scope="module")
def emulated_hosts_alone(tmp_path_factory: pytest.TempPathFactory):
    """One test process of a run at a time emulates hosts (benchmarks/hosts.py): each
    emulated cluster's start removes what a dead owner left, which
    tests/test_hosts.py's clean-up test must find and remove itself."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    # the parent of a test process's base temporary directory is the run's, shared by its processes
    with open(tmp_path_factory.getbasetemp().parent / "emulated-hosts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
