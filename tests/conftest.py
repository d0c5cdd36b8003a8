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


@pytest.fixture(params=DEVICES)
def on_device(request):
    """Runs the test once per device, as dask config ``dasq.device`` (what
    ``simulate`` uses when it is given no ``device``)."""
    with dask.config.set({"dasq.device": request.param}):
        yield request.param
