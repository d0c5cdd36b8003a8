"""The backends by name: a run chooses one, once."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager

from dasq.backend import cpu
from dasq.backend.base import Backend
from dasq.backend.cpu import CPU
from dasq.backend.gpu import GPU, GPU_TWIN, on_gpu
from dasq.errors import ValidationError

BACKENDS: dict[str, Backend] = {b.name: b for b in (CPU, GPU, GPU_TWIN)}
DEVICE_NAMES = ("cpu", "gpu", "gpu:N", "cuda", "cuda:N", "gpu-twin")
"""What ``device=`` accepts: "cuda" is Dask's and cupy's word for "gpu"; N picks a GPU."""

_INDEXED = re.compile(r"(?:gpu|cuda):([0-9]+)")


def get_backend(name: str = "cpu") -> Backend:
    """The backend called ``name``: "cpu" (numpy + numba), "gpu" (cupy + CUDA kernels on
    the current GPU), "gpu:N" (on GPU N, ``cupy.cuda.Device(N)``; "cuda" and "cuda:N" are
    the same) or "gpu-twin" (the gpu backend's code on numpy: slow, for tests without a GPU).
    Whether GPU N exists is checked when the backend is first used (``backend.meta``)."""
    if not isinstance(name, str):
        raise TypeError(f"device must be a string such as 'cpu' or 'gpu:1', got {type(name).__name__}")
    spelled = "gpu" if name == "cuda" else name
    if spelled in BACKENDS:
        return BACKENDS[spelled]
    indexed = _INDEXED.fullmatch(spelled)
    if indexed is not None:
        return on_gpu(int(indexed[1]))
    raise ValidationError(f"device must be one of {DEVICE_NAMES} (N: a GPU's number, from 0), got {name!r}")


def array_code_for(
    amplitudes: int, operations: int, kernels_ready: bool = True
) -> AbstractContextManager[bool]:
    """The CPU backend runs numpy's array code inside when a run of ``operations`` on
    ``amplitudes`` is too small for numba's kernels to pay for themselves in a fresh
    process, or they are not compiled yet (``cpu.array_code_for``); yields whether it does."""
    return cpu.array_code_for(amplitudes, operations, kernels_ready)


def worth_compiling(amplitudes: int, operations: int) -> bool:
    """Whether a fresh process's run saves more by numba's kernels than it pays to get
    them (``cpu.worth_compiling``)."""
    return cpu.worth_compiling(amplitudes, operations)


def array_code_only() -> bool:
    """Whether an ``array_code_for`` block chose numpy's array code in this process
    (compiled paths stand aside: nothing is to be compiled or loaded)."""
    return bool(cpu.ARRAY_CODE_ONLY.depth)
