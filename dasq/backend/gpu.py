"""The GPU backend: blocks are cupy arrays, the arithmetic runs on the device.

The array code is ``arrays``' (the namespace is cupy). A stage runs as passes over
tiles of the state: each pass is one launch of ``cuda_tiles``'
``tile_pass`` that applies every fused group of the pass to a tile (the runner
chooses the passes, engine/program.py); groups that fit no tile run alone, up to
``MAX_GROUP_QUBITS`` qubits with the one-group kernels, wider ones on cuBLAS (one
matrix product). Reductions run on the device and only their results come to the
host. ``GPU_TWIN`` is the same class on numpy with the kernels' numpy twins: what the
tests run on machines without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq import _config
from dasq._config import COALESCED_BYTES, TILE_BYTES  # names here too: the gpu suite's tile sweep sets them
from dasq.backend import cuda_kernels, cuda_tiles
from dasq.backend.arrays import ArrayBackend, MatrixKernel
from dasq.backend.base import Kernel, SkipKernel
from dasq.errors import ValidationError


@functools.cache
def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise ValidationError(
            'device="gpu" (or "gpu:N") needs cupy: pip install "dasq[gpu]" (cupy for CUDA 12; use the '
            "cupy package that matches your CUDA otherwise)"
        ) from None
    if not device_count(cupy):
        raise ValidationError('device="gpu": cupy finds no CUDA device on this machine')
    return cupy


def device_count(cupy: Any) -> int:
    """How many CUDA devices cupy sees (as numbered in this process: CUDA_VISIBLE_DEVICES applies)."""
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise ValidationError(f'device="gpu": cupy finds no usable CUDA device ({exc})') from None


@functools.cache
def _cupy_on(index: int) -> OnDevice:
    """cupy with GPU ``index`` made current wherever it is used, checked against the GPUs present."""
    cupy = _cupy()
    count = device_count(cupy)
    if index >= count:
        numbers = "0" if count == 1 else f"0 to {count - 1}"
        raise ValidationError(
            f'device="gpu:{index}": there is no GPU {index}; this process sees {count} GPU'
            f"{'s' if count > 1 else ''}, numbered {numbers}"
        )
    return OnDevice(cupy, index)


class OnDevice:
    """An array namespace (cupy) whose every use first makes GPU ``index`` the current
    device of the calling thread. CUDA's current device is per thread and Dask runs
    blocks on threads of its own (device 0 unless told), so "use device N once" would
    hold only in the thread that said it; making it current on each use costs a runtime
    call, microseconds, and keeps every allocation, copy and launch of a run on GPU N."""

    def __init__(self, namespace: Any, index: int) -> None:
        self._namespace = namespace
        self._index = index

    def use(self) -> None:
        self._namespace.cuda.runtime.setDevice(self._index)

    def __getattr__(self, name: str) -> Any:
        self.use()
        return getattr(self._namespace, name)

    def __reduce__(self) -> Any:
        return (_cupy_on, (self._index,))  # by number: each process finds (and checks) its own GPU N


@functools.cache
def device_memory(index: int) -> int:
    """GPU ``index``'s total memory, asked of the driver once per process: it never
    changes, and every run sizes its blocks by it, while the query can cost the driver
    far more than a kernel's launch (it may wait for the device)."""
    return int(_cupy().cuda.runtime.getDeviceProperties(index)["totalGlobalMem"])


def gpu_available() -> bool:
    """Whether cupy imports and sees at least one CUDA device."""
    try:
        _cupy()
    except ValidationError:
        return False
    return True


def _use(device: OnDevice | None) -> None:
    if device is not None:
        device.use()


@dataclass(frozen=True, eq=False)
class DeviceGroupKernel(Kernel):
    """A 2^k x 2^k matrix applied by one thread per group of 2^k amplitudes."""

    launch: Any  # cuda_kernels.dense_group_cuda or its twin
    matrix: Any  # row-major, in the backend's memory
    holes: Any  # sorted target bits (int64)
    offsets: Any  # offset of group element j from the group's base (int64)
    device: OnDevice | None = None  # the GPU a "gpu:N" backend launches on (None: the current one)

    def apply(self, view: Any) -> None:
        _use(self.device)
        self.launch(view, self.matrix, self.holes, self.offsets)


@dataclass(frozen=True)
class UploadedProgram:
    """A tile program and its arrays in the backend's memory, uploaded once."""

    program: cuda_tiles.TileProgram
    words: Any
    entries: Any
    addresses: Any


@dataclass(frozen=True, eq=False)
class DeviceTileKernel(Kernel):
    """A pass of groups applied tile by tile: one launch per program (one, unless the
    pass's words would not fit ``cuda_tiles.MAX_PROGRAM_WORDS``)."""

    launch: Any  # cuda_tiles.tile_pass_cuda or its twin
    programs: tuple[UploadedProgram, ...]
    positions: Any
    device: OnDevice | None = None

    def apply(self, view: Any) -> None:
        _use(self.device)
        for p in self.programs:
            self.launch(view, p.program, p.words, p.entries, p.addresses, self.positions)


@dataclass(frozen=True, eq=False)
class DevicePhaseKernel(Kernel):
    """A table of 2^k phases, one thread per amplitude."""

    launch: Any
    table: Any
    qubits: Any  # bit b of the table index -> qubits[b] (int64)
    device: OnDevice | None = None

    def apply(self, view: Any) -> None:
        _use(self.device)
        self.launch(view, self.table, self.qubits)


class GPUBackend(ArrayBackend):
    """Blocks in device memory. A stage runs each group over the whole block: a GPU
    streams from its memory at terabytes per second, so there is no cache level for
    the runner to block for, and one launch per group beats many small ones."""

    cache_blocking = False
    shared_tiles = True
    widest_tiled_group = cuda_tiles.WIDEST_GROUP
    reduce_slice = 1 << 26

    def __init__(self, name: str, singleton: str, *, twin: bool = False, index: int | None = None) -> None:
        self.name = name
        self.singleton = singleton
        self.twin = twin
        self.index = index  # "gpu:N": GPU N of this process; None: the current device (GPU 0 by default)

    @property
    def xp(self) -> Any:  # type: ignore[override]
        if self.twin:
            return np
        return _cupy() if self.index is None else _cupy_on(self.index)

    @property
    def _device(self) -> OnDevice | None:
        return None if self.twin or self.index is None else _cupy_on(self.index)

    def from_host(self, array: Any, dtype: str) -> Any:
        return self.xp.asarray(np.asarray(array, dtype=dtype))

    def to_host(self, block: Any) -> np.ndarray:
        return np.asarray(block) if self.twin else _cupy().asnumpy(block)

    def memory_bytes(self) -> int | None:
        """The device's memory (the host's for the twin: None)."""
        if self.twin:
            return None
        cupy = _cupy()
        return device_memory(cupy.cuda.runtime.getDevice() if self.index is None else self.index)

    def __reduce__(self) -> Any:
        # the shared instances by their module-level name; "gpu:N" by N, made anew where unpickled
        return self.singleton if self.index is None else (on_gpu, (self.index,))

    def preferred_fusion_size(self) -> int:
        return _config.GPU_FUSION_SIZE

    def tile_qubits(self, dtype: Any) -> tuple[int, int]:
        itemsize = np.dtype(dtype).itemsize
        return (TILE_BYTES // itemsize).bit_length() - 1, max(
            0, (COALESCED_BYTES // itemsize).bit_length() - 1
        )

    # ------------------------------------------------------------ compiled groups
    def compile_tile_pass(
        self, tile: Sequence[int], groups: Sequence[tuple[Sequence[int], np.ndarray, bool]], dtype: str
    ) -> Kernel:
        rank = {q: r for r, q in enumerate(tile)}
        ops = []
        for qubits, values, is_table in groups:
            if not is_table:
                diag = np.diag(values)
                if np.count_nonzero(values - np.diag(diag)):
                    ops.append((cuda_tiles.DENSE, tuple(rank[q] for q in qubits), values))
                    continue
                values = diag
            if np.all(values == 1):
                continue
            bits = tuple(rank[q] if q in rank else -(q + 1) for q in qubits)
            ops.append((cuda_tiles.PHASES, bits, values))
        if not ops:
            return SkipKernel()
        programs = cuda_tiles.TileProgram.split(
            tuple(tile), ops, np.dtype(dtype).itemsize, self.tile_qubits(dtype)[1]
        )
        uploaded = tuple(
            UploadedProgram(
                p,
                self.small(p.words, np.int32),
                self.small(p.entries, dtype),
                self.small(p.addresses, np.int64),
            )
            for p in programs
        )
        launch = cuda_tiles.tile_pass_twin if self.twin else cuda_tiles.tile_pass_cuda
        return DeviceTileKernel(launch, uploaded, self.small(np.asarray(tile), np.int32), self._device)

    def compile_diagonal(self, qubits: Sequence[int], table: np.ndarray, dtype: str) -> Kernel:
        if np.all(table == 1):
            return SkipKernel()
        launch = cuda_kernels.diagonal_twin if self.twin else cuda_kernels.diagonal_cuda
        return DevicePhaseKernel(
            launch, self.small(table, dtype), self.small(np.asarray(qubits), np.int64), self._device
        )

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
            self._device,
        )


GPU = GPUBackend("gpu", "GPU")
GPU_TWIN = GPUBackend("gpu-twin", "GPU_TWIN", twin=True)


@functools.cache
def on_gpu(index: int) -> GPUBackend:
    """The backend of ``device="gpu:N"``: blocks, copies and kernels on GPU ``index`` (as
    cupy numbers this process's GPUs: ``cupy.cuda.Device(index)``), one per index."""
    return GPUBackend(f"gpu:{index}", "", index=index)
