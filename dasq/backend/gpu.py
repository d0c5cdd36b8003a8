"""The GPU backend: blocks are cupy arrays, the arithmetic runs on the device.

The array code is ``arrays``' (the namespace is cupy); fused groups of up to
``MAX_GROUP_QUBITS`` qubits and diagonal runs are the CUDA kernels of
``cuda_kernels``, wider groups cuBLAS (one matrix product). Reductions run on the
device and only their results come to the host. ``GPU_TWIN`` is the same class on
numpy with the kernels' numpy twins: what the tests run on machines without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq.backend import cuda_kernels
from dasq.backend.arrays import ArrayBackend, MatrixKernel
from dasq.backend.base import Kernel, SkipKernel
from dasq.errors import ValidationError


@functools.cache
def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise ValidationError(
            'device="gpu" needs cupy: pip install "dasq[gpu]" (cupy for CUDA 12; use the cupy '
            "package that matches your CUDA otherwise)"
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise ValidationError(f'device="gpu": cupy finds no usable CUDA device ({exc})') from None
    if not count:
        raise ValidationError('device="gpu": cupy finds no CUDA device on this machine')
    return cupy


def gpu_available() -> bool:
    """Whether cupy imports and sees at least one CUDA device."""
    try:
        _cupy()
    except ValidationError:
        return False
    return True


@dataclass(frozen=True, eq=False)
class DeviceGroupKernel(Kernel):
    """A 2^k x 2^k matrix applied by one thread per group of 2^k amplitudes."""

    launch: Any  # cuda_kernels.dense_group_cuda or its twin
    matrix: Any  # row-major, in the backend's memory
    holes: Any  # sorted target bits (int64)
    offsets: Any  # offset of group element j from the group's base (int64)

    def apply(self, view: Any) -> None:
        self.launch(view, self.matrix, self.holes, self.offsets)


@dataclass(frozen=True, eq=False)
class DevicePhaseKernel(Kernel):
    """A table of 2^k phases, one thread per amplitude."""

    launch: Any
    table: Any
    qubits: Any  # bit b of the table index -> qubits[b] (int64)

    def apply(self, view: Any) -> None:
        self.launch(view, self.table, self.qubits)


class GPUBackend(ArrayBackend):
    """Blocks in device memory. A stage runs each group over the whole block: a GPU
    streams from its memory at terabytes per second, so there is no cache level for
    the runner to block for, and one launch per group beats many small ones."""

    cache_blocking = False
    reduce_slice = 1 << 26

    def __init__(self, name: str, singleton: str, *, twin: bool = False) -> None:
        self.name = name
        self.singleton = singleton
        self.twin = twin

    @property
    def xp(self) -> Any:  # type: ignore[override]
        return np if self.twin else _cupy()

    def from_host(self, array: Any, dtype: str) -> Any:
        return self.xp.asarray(np.asarray(array, dtype=dtype))

    def to_host(self, block: Any) -> np.ndarray:
        return np.asarray(block) if self.twin else _cupy().asnumpy(block)

    def memory_bytes(self) -> int | None:
        """The device's memory (the host's for the twin: None)."""
        if self.twin:
            return None
        return int(_cupy().cuda.Device().mem_info[1])

    # ------------------------------------------------------------ compiled groups
    def compile_diagonal(self, qubits: Sequence[int], table: np.ndarray, dtype: str) -> Kernel:
        if np.all(table == 1):
            return SkipKernel()
        launch = cuda_kernels.diagonal_twin if self.twin else cuda_kernels.diagonal_cuda
        return DevicePhaseKernel(launch, self.small(table, dtype), self.small(np.asarray(qubits), np.int64))

    def compile_matrix(self, qubits: Sequence[int], matrix: np.ndarray, dtype: str) -> Kernel:
        diag = np.diag(matrix)
        if not np.count_nonzero(matrix - np.diag(diag)):
            return self.compile_diagonal(qubits, diag, dtype)
        k = len(qubits)
        if k > cuda_kernels.MAX_GROUP_QUBITS:
            return MatrixKernel(self.xp, tuple(int(q) for q in qubits), self.small(matrix, dtype))
        # the kernel's matrix acts on element j = bits of the group in ``qubits`` order
        members = np.arange(1 << k)
        offsets = sum(((members >> i) & 1) << int(q) for i, q in enumerate(qubits))
        launch = cuda_kernels.dense_group_twin if self.twin else cuda_kernels.dense_group_cuda
        return DeviceGroupKernel(
            launch,
            self.small(np.ascontiguousarray(matrix).reshape(-1), dtype),
            self.small(np.sort(np.asarray(qubits)), np.int64),
            self.small(offsets, np.int64),
        )


GPU = GPUBackend("gpu", "GPU")
GPU_TWIN = GPUBackend("gpu-twin", "GPU_TWIN", twin=True)
