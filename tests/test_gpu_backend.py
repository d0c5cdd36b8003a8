"""The GPU backend's code: its kernels against the definition and its array code
against the CPU backend. Each check runs on the numpy twin (every machine) and on
cupy where a GPU is present (skipped cleanly without one)."""

from __future__ import annotations

import pickle
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from reference import embed, random_state, random_unitary

import dasq
from dasq.backend import cuda_kernels, cuda_tiles
from dasq.backend import gpu as gpu_module
from dasq.backend.gpu import GPU, GPU_TWIN, DeviceGroupKernel, DevicePhaseKernel, gpu_available
from dasq.backend.registry import get_backend

CPU = get_backend("cpu")
BACKENDS = [GPU_TWIN, *([GPU] if gpu_available() else [])]
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA device (cupy)")
L = 8  # the Kronecker reference is a dense 2^L x 2^L operator


def _placements(k: int) -> dict[str, tuple[int, ...]]:
    return {
        "all high": tuple(range(L - k, L))[::-1],
        "with bit 0": (0, *range(L - k + 1, L)),
        "low and contiguous": tuple(range(k)),
        "scattered": (6, 1, 7, 4, 2)[:k],
    }


def _run(backend, kernel, block: np.ndarray) -> np.ndarray:
    on = backend.from_host(block, block.dtype.name)
    kernel.apply(on)
    return backend.to_host(on)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("where", ["all high", "with bit 0", "low and contiguous", "scattered"])
def test_dense_group_kernel_matches_the_kronecker_reference(backend, k, where, dtype):
    rng = np.random.default_rng(31 * k + len(where))
    qubits = _placements(k)[where]
    u = random_unitary(k, rng)
    block = random_state(L, rng).astype(dtype)
    kernel = backend.compile_matrix(qubits, u, dtype)
    assert isinstance(kernel, DeviceGroupKernel)
    want = embed(u, qubits, L) @ block.astype(np.complex128)
    np.testing.assert_allclose(
        _run(backend, kernel, block), want, atol=1e-5 if dtype == "complex64" else 1e-12
    )


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_diagonal_kernel_and_wide_groups_match_the_reference(backend, dtype):
    rng = np.random.default_rng(2)
    block = random_state(L, rng).astype(dtype)
    atol = 1e-5 if dtype == "complex64" else 1e-12
    qubits = (7, 0, 4)
    phases = np.exp(1j * rng.uniform(0, 6.3, 8))
    kernel = backend.compile_diagonal(qubits, phases, dtype)
    assert isinstance(kernel, DevicePhaseKernel)
    want = embed(np.diag(phases), qubits, L) @ block.astype(np.complex128)
    np.testing.assert_allclose(_run(backend, kernel, block), want, atol=atol)
    wide = (0, 2, 3, 5, 6, 7)  # wider than the kernel: the tensordot (cuBLAS) path
    assert len(wide) > cuda_kernels.MAX_GROUP_QUBITS
    u = random_unitary(len(wide), rng)
    want = embed(u, wide, L) @ block.astype(np.complex128)
    np.testing.assert_allclose(_run(backend, backend.compile_matrix(wide, u, dtype), block), want, atol=atol)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_reductions_agree_with_the_cpu_backend(backend):
    """Norms, inner products, marginals, Pauli sums and the keyed Poisson draws of
    sampling: the same numbers as the CPU backend's numba passes (the draws exactly),
    over several reduction slices."""
    rng = np.random.default_rng(4)
    n = 14
    own = random_state(n, rng).astype(np.complex64)
    src = random_state(n, rng).astype(np.complex64)
    on_own, on_src = (backend.from_host(a, "complex64") for a in (own, src))
    old = backend.reduce_slice
    backend.reduce_slice = 1 << 11  # eight slices per block
    try:
        assert abs(backend.norm2(on_own) - CPU.norm2(own)) < 1e-12
        assert abs(backend.vdot(on_own, on_src) - CPU.vdot(own, src)) < 1e-12
        masks = np.array([0, 0b1011, (1 << 13) | 1], dtype=np.int64)
        weights = rng.normal(size=3) + 1j * rng.normal(size=3)
        for flip in (0, 5, 1 << 12):
            got = backend.pauli_group(on_own, on_src, flip, masks, weights)
            assert abs(got - CPU.pauli_group(own, src, flip, masks, weights)) < 1e-10
        for positions in ((0,), (13, 2), (3, 15, 7)):
            np.testing.assert_allclose(
                backend.marginal(on_own, n, 1, positions), CPU.marginal(own, n, 1, positions), atol=1e-12
            )
        tables = np.zeros((2, 256), dtype=np.uint64)
        values = np.arange(256, dtype=np.uint64)
        tables[0], tables[1] = values << np.uint64(2), (values & np.uint64(63)) << np.uint64(10)
        for lam in (3.0, 5000.0, 1e6):  # few draws, many, and means above the inversion's range
            got = backend.poisson_draws(on_own, 7 << 16, tables, lam, 99)
            want = CPU.poisson_draws(own, 7 << 16, tables, lam, 99)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            assert want[1].sum() > 0
    finally:
        backend.reduce_slice = old


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_permute_pack_and_place_match_the_cpu_backend(backend):
    rng = np.random.default_rng(8)
    block = random_state(9, rng)
    on = backend.from_host(block, "complex128")
    order = [int(q) for q in rng.permutation(9)]
    np.testing.assert_array_equal(
        backend.to_host(backend.permute_bits(on, order)), CPU.permute_bits(block, order)
    )
    fixed = ((1, 0), (6, 1))
    piece = backend.pack(on, 9, fixed)
    np.testing.assert_array_equal(backend.to_host(piece), CPU.pack(block, 9, fixed))
    target = backend.from_host(np.zeros_like(block), "complex128")
    backend.place(target, 9, fixed, piece)
    want = np.zeros_like(block)
    CPU.place(want, 9, fixed, CPU.pack(block, 9, fixed))
    np.testing.assert_array_equal(backend.to_host(target), want)


@pytest.mark.parametrize("device", [b.name for b in BACKENDS])
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_a_whole_run_agrees_with_the_cpu_backend(device, dtype):
    """QFT plus a random layer, several blocks (relayouts between stages), read-outs
    on the device: amplitudes within 1e-10 in complex128, samples identical."""
    rng = np.random.default_rng(12)
    n = 12
    c = dasq.Circuit(n)
    for q in range(n):
        c.h(q)
        for t in range(q + 1, n):
            c.cp(np.pi / (1 << (t - q)), t, q)
    for q in range(0, n - 2, 3):
        c.unitary(random_unitary(3, rng), (q, q + 1, q + 2))
    atol = 1e-10 if dtype == "complex128" else 1e-5
    for L in (n, 9, 6):
        cpu = dasq.simulate(c, chunk_qubits=L, dtype=dtype, device="cpu")
        dev = dasq.simulate(c, chunk_qubits=L, dtype=dtype, device=device)
        np.testing.assert_allclose(dev.to_numpy(), cpu.to_numpy(), atol=atol)
        np.testing.assert_allclose(dev.probabilities([0, 5, 11]), cpu.probabilities([0, 5, 11]), atol=atol)
        assert abs(dev.norm() - 1) < atol
        if dtype == "complex128":
            assert dev.sample(1000, seed=3) == cpu.sample(1000, seed=3)


def test_a_gpu_run_without_cupy_says_how_to_get_it():
    if gpu_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(dasq.ValidationError, match=r"cupy|CUDA"):
        dasq.simulate(dasq.Circuit(2).h(0), device="gpu")
    with pytest.raises(dasq.ValidationError, match="device must be one of"):
        dasq.simulate(dasq.Circuit(2).h(0), device="tpu")


@needs_gpu
def test_blocks_live_on_the_gpu_and_results_come_back_as_numpy():
    import cupy

    state = dasq.simulate(dasq.Circuit(20).h(0).cx(0, 19), device="gpu")
    block = state.blocks.blocks[0].compute()
    assert isinstance(block, cupy.ndarray)
    assert isinstance(state.to_numpy(), np.ndarray)
    assert isinstance(state.probabilities([0]), np.ndarray)
    np.testing.assert_allclose(state.probabilities([0, 19]), [0.5, 0, 0, 0.5], atol=1e-12)
    on_cpu = dasq.simulate(dasq.Circuit(20).h(0).cx(0, 19), device="cpu")
    assert abs(state.inner(on_cpu) - 1) < 1e-12 and abs(on_cpu.inner(state) - 1) < 1e-12


@pytest.mark.parametrize("device", [b.name for b in BACKENDS])
def test_an_out_of_core_run_streams_blocks_through_the_device(device, tmp_path):
    """Blocks go from the zarr store to the device, through the stage, and back."""
    rng = np.random.default_rng(21)
    c = dasq.Circuit(10)
    for q in range(10):
        c.h(q)
    for q in range(0, 8, 2):
        c.unitary(random_unitary(3, rng), (q, q + 1, (q + 5) % 10))
    want = dasq.simulate(c, device="cpu").to_numpy()
    state = dasq.simulate(c, store=tmp_path / "s.zarr", chunk_qubits=6, device=device, memory_limit="1MiB")
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-10)


@needs_gpu
def test_a_dask_cuda_worker_holds_gpu_blocks(tmp_path):
    """One worker per GPU (here one): blocks on the worker's GPU, relayouts between
    several blocks through the cluster, the result equal to the CPU backend's."""
    dask_cuda = pytest.importorskip("dask_cuda")
    from distributed import Client

    rng = np.random.default_rng(5)
    c = dasq.Circuit(14)
    for q in range(14):
        c.h(q)
    for q in range(0, 12, 3):
        c.unitary(random_unitary(3, rng), (q, q + 1, (q + 7) % 14))
    want = dasq.simulate(c, device="cpu").to_numpy()
    with (
        dask_cuda.LocalCUDACluster(n_workers=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        state = dasq.simulate(c, client=client, device="gpu", chunk_qubits=11)
        np.testing.assert_allclose(state.to_numpy(), want, atol=1e-10)
        kinds = client.run(
            lambda dask_worker: sorted({type(v).__module__ for v in dask_worker.data.values()})
        )
        assert any("cupy" in m for mods in kinds.values() for m in mods)


@needs_gpu
def test_the_command_line_runs_on_the_gpu(tmp_path, capsys):
    from dasq.cli import main

    path = tmp_path / "bell.qasm"
    path.write_text(
        'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\ncreg c[2];\nh q[0];\ncx q[0],q[1];\n'
        "measure q -> c;\n"
    )
    assert main(["run", str(path), "--gpu", "--shots", "100", "--seed", "1"]) == 0
    counts = dict(line.split() for line in capsys.readouterr().out.strip().splitlines())
    assert set(counts) == {"00", "11"} and sum(int(v) for v in counts.values()) == 100


# ----------------------------------------------------------------- picking a GPU by its number
@pytest.mark.parametrize("name,canonical", [("gpu:0", "gpu:0"), ("cuda:1", "gpu:1"), ("gpu:12", "gpu:12")])
def test_device_names_with_a_gpu_number_parse(name, canonical):
    backend = get_backend(name)
    assert backend.name == canonical and backend.index == int(canonical[4:])
    assert get_backend(canonical) is backend
    assert pickle.loads(pickle.dumps(backend)) is backend  # what a worker unpickles
    assert get_backend("cuda") is GPU and get_backend("gpu").index is None


@pytest.mark.parametrize("name", ["gpu:", "gpu:-1", "gpu:1.5", "gpu1", "GPU", "cuda:x", "tpu", "gpu-twin:1"])
def test_device_names_that_do_not_parse_are_refused(name):
    with pytest.raises(dasq.ValidationError, match=r"device must be one of .*'gpu:N'.*'cuda:N'"):
        dasq.simulate(dasq.Circuit(2).h(0), device=name)
    with pytest.raises(TypeError, match="device must be a string"):
        dasq.simulate(dasq.Circuit(2).h(0), device=1)


def test_a_numbered_gpu_without_cupy_says_how_to_get_it():
    if gpu_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(dasq.ValidationError, match="needs cupy"):
        dasq.simulate(dasq.Circuit(2).h(0), device="gpu:1")


class _FakeCupy(types.ModuleType):
    """cupy's device API over numpy: ``count`` GPUs, and which each thread made current."""

    def __init__(self, count: int) -> None:
        super().__init__("cupy")
        self.current: dict[int, int] = {}  # thread id -> the device it made current
        self.memory_queries: list[int] = []  # the devices whose memory was asked, in order
        runtime = types.SimpleNamespace(
            CUDARuntimeError=RuntimeError,
            getDeviceCount=lambda: count,
            setDevice=lambda i: self.current.__setitem__(threading.get_ident(), i),
            getDevice=lambda: self.current.get(threading.get_ident(), 0),
            getDeviceProperties=self._properties,
        )
        self.cuda = types.SimpleNamespace(runtime=runtime)

    def _properties(self, index: int) -> dict:
        self.memory_queries.append(index)
        return {"totalGlobalMem": (1 + index) << 30}

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.fixture
def fake_cupy(monkeypatch):
    def install(count: int) -> _FakeCupy:
        fake = _FakeCupy(count)
        monkeypatch.setitem(sys.modules, "cupy", fake)
        _clear_caches()
        return fake

    yield install
    _clear_caches()


def _clear_caches() -> None:
    for cached in (gpu_module._cupy, gpu_module._cupy_on, gpu_module.device_memory):
        cached.cache_clear()


def test_a_gpu_number_is_checked_against_the_gpus_present(fake_cupy):
    fake_cupy(2)
    with pytest.raises(dasq.ValidationError, match="no GPU 2; this process sees 2 GPUs, numbered 0 to 1"):
        dasq.simulate(dasq.Circuit(2).h(0), device="gpu:2")
    fake_cupy(1)
    with pytest.raises(dasq.ValidationError, match=r"no GPU 1; this process sees 1 GPU, numbered 0$"):
        get_backend("cuda:1").meta("complex64")


def test_gpu_n_is_made_current_in_every_thread_that_uses_it(fake_cupy):
    """CUDA's current device is per thread, and Dask's threads start on device 0: every
    use of the backend's namespace and every kernel launch makes GPU N current first."""
    fake = fake_cupy(2)
    backend = get_backend("gpu:1")
    assert backend.memory_bytes() == 2 << 30  # GPU 1's memory, not GPU 0's
    worker = threading.Thread(target=lambda: backend.zeros(8, "complex128"))
    worker.start()
    worker.join()
    assert fake.current[worker.ident] == 1
    kernel = backend.compile_diagonal((0, 2), np.exp(1j * np.arange(4)), "complex128")
    assert isinstance(kernel, DevicePhaseKernel) and kernel.device is not None
    assert pickle.loads(pickle.dumps(kernel.device)) is kernel.device  # by number, not by module
    fake.current.clear()
    kernel.device.use()  # what apply() does before its launch
    assert set(fake.current.values()) == {1}
    assert get_backend("gpu").xp is fake  # "gpu": the current device, as before


def test_a_gpus_memory_is_asked_of_the_driver_once(fake_cupy):
    """Every run sizes its blocks by the GPU's memory; the driver's answer never changes
    and asking can cost more than a kernel's launch, so it is asked once per GPU."""
    fake = fake_cupy(2)
    for _ in range(3):
        assert get_backend("gpu").memory_bytes() == 1 << 30  # the current device: GPU 0
        assert get_backend("gpu:1").memory_bytes() == 2 << 30
    assert fake.memory_queries == [0, 1]


@needs_gpu
def test_a_run_on_gpu_0_and_a_missing_gpu():
    import cupy

    c = dasq.Circuit(12).h(0).cx(0, 11)
    state = dasq.simulate(c, device="gpu:0")
    assert state.blocks.blocks[0].compute().device.id == 0
    np.testing.assert_allclose(state.probabilities([0, 11]), [0.5, 0, 0, 0.5], atol=1e-12)
    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(dasq.ValidationError, match=f"no GPU {count}"):
        dasq.simulate(c, device=f"gpu:{count}")
    if count > 1:
        state = dasq.simulate(c, device=f"cuda:{count - 1}", chunk_qubits=9)
        blocks = [b.compute() for b in state.blocks.to_delayed().ravel()]
        assert {b.device.id for b in blocks} == {count - 1}
        np.testing.assert_allclose(state.probabilities([0, 11]), [0.5, 0, 0, 0.5], atol=1e-12)


# ----------------------------------------------------------------- shared-memory tile passes
TILES = {
    "lowest bits": (0, 1, 2, 3, 4, 5),
    "low and high": (0, 1, 2, 5, 6, 7),
    "scattered": (0, 1, 3, 4, 6, 8),
    "eight ranks": (0, 1, 2, 3, 5, 6, 7, 8),
}


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("where", list(TILES))
def test_a_tile_pass_applies_its_groups_in_order_on_every_tile(backend, dtype, where):
    """One launch applies dense groups of 1 to 3 qubits on tile ranks and phase tables
    whose bits lie inside the tile, outside it (constants of a tile) or both, in
    order, to every tile: the result is the product of their Kronecker operators. A
    diagonal matrix becomes a phase table; the identity is left out."""
    n = 9
    tile = TILES[where]
    rng = np.random.default_rng(sum(tile))
    outside = [q for q in range(n) if q not in tile]
    groups = []
    for m in (2, 1, 3, 3, 2):
        qubits = tuple(int(q) for q in rng.choice(tile, m, replace=False))
        groups.append((qubits, random_unitary(m, rng), False))
        phase_bits = (int(rng.choice(tile)), outside[m % len(outside)], int(rng.choice(outside)))
        phase_bits = tuple(dict.fromkeys(phase_bits))
        groups.append((phase_bits, np.exp(2j * np.pi * rng.random(1 << len(phase_bits))), True))
    groups.append(((tile[1], tile[4]), np.diag(np.exp(1j * rng.random(4))), False))  # a diagonal matrix
    groups.append(((tile[2],), np.eye(2), False))  # the identity: left out
    block = random_state(n, rng).astype(dtype)
    want = block.astype(np.complex128)
    for qubits, values, is_table in groups:
        want = embed(np.diag(values) if is_table else values, qubits, n) @ want
    kernel = backend.compile_tile_pass(tile, groups, dtype)
    assert isinstance(kernel, gpu_module.DeviceTileKernel)
    assert len(kernel.programs) == 1
    kinds = [k for k in kernel.programs[0].program.kinds() if k != cuda_tiles.REMAP]
    assert kinds.count(cuda_tiles.DENSE) == 5 and kinds.count(cuda_tiles.PHASES) == 6
    np.testing.assert_allclose(
        _run(backend, kernel, block), want, atol=1e-5 if dtype == "complex64" else 1e-12
    )


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("seed", range(16))
def test_random_tile_passes_match_the_kronecker_reference(backend, seed, monkeypatch):
    """Random tiles (3 to 9 of up to 9 qubits, runs of 0 to 4 lowest bits), random
    passes of dense groups and phase tables, both precisions, 2^r amplitudes per
    thread as configured and the other way (complex64 one bit fewer, complex128 one
    more): every layout, remap and register product the program chooses gives the
    reference's state."""
    if seed >= 8:
        monkeypatch.setattr(cuda_tiles, "REGISTER_QUBITS", {8: 4, 16: 4})
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 10))
    k = int(rng.integers(3, n + 1))
    low = int(rng.integers(0, min(k, 4) + 1))
    tile = tuple(sorted([*range(low), *(int(q) for q in rng.choice(range(low, n), k - low, replace=False))]))
    dtype = ("complex64", "complex128")[seed % 2]
    groups = []
    for _ in range(int(rng.integers(1, 12))):
        m = int(rng.integers(1, 4))
        if rng.random() < 0.7:
            qubits = tuple(int(q) for q in rng.choice(tile, min(m, k), replace=False))
            groups.append((qubits, random_unitary(len(qubits), rng), False))
        else:
            qubits = tuple(int(q) for q in rng.choice(n, m, replace=False))
            groups.append((qubits, np.exp(2j * np.pi * rng.random(1 << m)), True))
    block = random_state(n, rng).astype(dtype)
    want = block.astype(np.complex128)
    for qubits, values, is_table in groups:
        want = embed(np.diag(values) if is_table else values, qubits, n) @ want
    kernel = backend.compile_tile_pass(tile, groups, dtype)
    np.testing.assert_allclose(
        _run(backend, kernel, block), want, atol=1e-5 if dtype == "complex64" else 1e-12
    )


def test_a_tile_pass_keeps_amplitudes_in_registers_until_a_group_needs_other_ranks():
    """Groups that fit one set of register ranks make no remap; a group on the tile's
    lowest ranks (a run in memory) makes two (the tile is loaded and stored with those
    ranks on lanes); groups on more ranks than a thread holds, one per new phase."""
    tile = tuple(range(12))
    u = np.eye(4)[[1, 0, 3, 2]]  # not diagonal: a dense group
    remaps = [
        GPU_TWIN.compile_tile_pass(tile, [((a, b), u, False) for a, b in pairs], "complex64")
        .programs[0]
        .program.remaps
        for pairs in (
            [(9, 10), (11, 8), (10, 8)],
            [(0, 9)],
            [(4, 5), (6, 7), (4, 6), (8, 9), (10, 11), (8, 10)],
        )
    ]
    assert remaps == [0, 2, 1]


@pytest.mark.parametrize("itemsize", [8, 16])
def test_every_layout_reaches_distinct_banks_and_reads_whole_runs(itemsize):
    """A bank model of shared memory (32 banks of 4 bytes): for every layout of a pass
    of groups on every pair of ranks, the lanes that share a cycle (16 of 8-byte, 8 of
    16-byte elements) reach distinct banks for each register; the lowest lanes are the
    tile's lowest ranks that no register holds, all of them in the layouts loaded and
    stored, so a warp reads and writes runs of 2^low elements."""
    k, low = 12 if itemsize == 8 else 11, 3 if itemsize == 8 else 2
    tile = tuple(range(k))
    u = np.eye(4)[[1, 0, 3, 2]]
    groups = [((a, b), u, False) for a in range(k) for b in range(a + 1, k)]
    program = cuda_tiles.TileProgram.of(tile, [(cuda_tiles.DENSE, q, v) for q, v, _ in groups], itemsize, low)
    words, r = program.words.tolist(), program.registers
    starts = {words[1], words[2]} | {
        words[w + 1] for w, kind in cuda_tiles._walk(words, 3, 3 + words[0], r) if kind == cuda_tiles.REMAP
    }
    assert len(starts) > 4
    per_cycle = 128 // itemsize
    for at in starts:
        layout = cuda_tiles.LayoutWords.at(words, at, k, r)
        ranks, offsets = list(layout.lanes), layout.register_offsets()
        runs = [q for q in range(low) if q in ranks]  # the lowest ranks not in registers
        assert ranks[: len(runs)] == runs and (at not in (words[1], words[2]) or runs == list(range(low)))
        for j in range(1 << r):
            for first in range(0, 32, per_cycle):
                lane = np.arange(first, first + per_cycle)
                addresses = layout.thread_bytes(lane) ^ offsets[j]  # bytes
                banks = {(int(a) // 4) % 32 for a in addresses}
                assert len(banks) * itemsize // 4 == 32, (at, j, first)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc (the CUDA compiler) on this machine")
@pytest.mark.parametrize(
    "itemsize,r,threads,resident,registers,spilled",
    [(8, 5, 128, 384, 168, 8), (16, 3, 256, 512, 128, 4), (8, 4, 256, 768, 80, 0), (8, 4, 512, 512, 128, 0)],
)
def test_the_tile_kernel_compiles_for_hopper_within_its_registers(
    tmp_path, monkeypatch, itemsize, r, threads, resident, registers, spilled
):
    """The tile pass as cupy compiles it, built for sm_90 by nvcc where one is installed:
    no more registers than its launch bound allows (three blocks of 128 complex64
    threads per multiprocessor at 168, by default), and no spills but one word where
    2^r registers crowd the bound (the default's and complex128's: a word stored and
    read back once per remap, outside the register products)."""
    monkeypatch.setitem(cuda_tiles.RESIDENT_THREADS, itemsize, resident)
    source = tmp_path / "tile.cu"
    source.write_text(cuda_tiles.expanded(itemsize, r, threads))
    out = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(tmp_path / "tile.cubin"), str(source)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    used = int(re.search(r"Used (\d+) registers", out.stderr).group(1))
    stores = int(re.search(r"(\d+) bytes spill stores", out.stderr).group(1))
    assert stores <= spilled and used <= registers, out.stderr


def test_a_tile_program_refuses_a_group_wider_than_its_registers_and_a_tile_past_1024_threads():
    with pytest.raises(ValueError, match="at most 3 ranks"):
        cuda_tiles.TileProgram.of(tuple(range(10)), [(cuda_tiles.DENSE, (0, 1, 2, 3), np.eye(16))], 8, 3)
    with pytest.raises(ValueError, match="2\\^11 threads per block; CUDA allows 1024"):
        r = cuda_tiles.REGISTER_QUBITS[8]
        cuda_tiles.TileProgram.of(tuple(range(11 + r)), [(cuda_tiles.DENSE, (0,), np.eye(2))], 8, 3)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_a_pass_too_long_for_one_program_runs_as_several_in_order(backend, monkeypatch):
    """A pass whose words would overflow shared memory (a one-block stage of thousands
    of groups) is halved until each program fits: several launches, the same state."""
    monkeypatch.setattr(cuda_tiles, "MAX_PROGRAM_WORDS", 120)
    n, tile = 8, (0, 1, 2, 3, 4, 5, 6)
    rng = np.random.default_rng(3)
    groups = []
    for _ in range(14):
        qubits = tuple(int(q) for q in rng.choice(tile, 2, replace=False))
        groups.append((qubits, random_unitary(2, rng), False))
        groups.append(((int(rng.choice(tile)), 7), np.exp(2j * np.pi * rng.random(4)), True))
    block = random_state(n, rng)
    want = block.copy()
    for qubits, values, is_table in groups:
        want = embed(np.diag(values) if is_table else values, qubits, n) @ want
    kernel = backend.compile_tile_pass(tile, groups, "complex128")
    assert len(kernel.programs) > 2 and all(p.program.words.size <= 120 for p in kernel.programs)
    np.testing.assert_allclose(_run(backend, kernel, block), want, atol=1e-12)


def test_a_launch_asks_for_shared_memory_past_48_kib_with_the_kernels_static_part(monkeypatch):
    """CUDA launches a block whose static and dynamic shared memory pass 48 KiB only if
    the kernel asked for more: a program of ~3,860 words beside a 32 KiB tile stays under
    48 KiB by its dynamic part alone, not with the kernel's static arrays."""
    launched = []
    monkeypatch.setitem(cuda_tiles.REGISTER_QUBITS, 8, 4)  # 256 threads: 1,040 static bytes

    class Kernel:
        max_dynamic_shared_size_bytes = 0

        def __call__(self, grid, block, args, shared_mem):
            launched.append((grid, block, shared_mem, self.max_dynamic_shared_size_bytes))

    monkeypatch.setattr(cuda_tiles, "_compiled", lambda *key: Kernel())
    table = np.exp(2j * np.pi * np.arange(4) / 4)
    ops = [(cuda_tiles.PHASES, (i % 12, (i * 5 + 1) % 12), table) for i in range(182)]
    (program,) = cuda_tiles.TileProgram.split(tuple(range(12)), ops, 8, 3)
    dynamic = program.shared_bytes(8)
    assert dynamic <= 48 << 10 < dynamic + program.static_shared_bytes
    state = np.zeros(1 << 14, np.complex64)
    cuda_tiles.tile_pass_cuda(state, program, program.words, None, None, None)
    assert launched == [((4,), (256,), dynamic, dynamic)]
    small = cuda_tiles.TileProgram.of(tuple(range(12)), ops[:4], 8, 3)
    cuda_tiles.tile_pass_cuda(state, small, small.words, None, None, None)
    assert launched[-1][3] == 0  # under 48 KiB in all: the default


@pytest.mark.parametrize("search", [False, True])
def test_tile_passes_take_every_group_once_in_an_order_that_keeps_the_circuit(monkeypatch, search):
    """The passes over shared-memory tiles, greedy or searched: each fused group in
    exactly one pass, the lowest bits in every tile, a dense group's bits in its pass's
    tile, at most the tile's width; a group wider than the tile's kernels runs alone;
    far fewer passes than groups on a layered random circuit, and no more searched
    than greedy. Blocks of TILE_SEARCH_FROM_BYTES and more are searched."""
    from dasq import _config
    from dasq.engine.program import device_tile_passes, tile_passes
    from dasq.plan.planner import make_plan
    from dasq.plan.steps import BlockProgram

    n, width, low = 16, 10, 3
    rng = np.random.default_rng(5)
    c = dasq.Circuit(n)
    for _ in range(6):
        for q in range(n):
            c.unitary(random_unitary(1, rng), (q,))
        order = rng.permutation(n)
        for a, b in zip(order[0::2], order[1::2]):
            c.cz(int(a), int(b))
    c.unitary(random_unitary(6, rng), (0, 3, 5, 9, 12, 15))  # wider than a tile pass takes
    stage = next(s for s in make_plan(list(c), n, n, fusion_size=3).steps if isinstance(s, BlockProgram))
    passes = tile_passes(stage.groups, n, width, 5, low, search=search)
    assert len(passes) <= len(tile_passes(stage.groups, n, width, 5, low))
    members = [i for p in passes for i in p.members]
    assert sorted(members) == list(range(len(stage.groups)))
    assert passes[-1].tile is None and passes[-1].members == (len(stage.groups) - 1,)
    for p in passes[:-1]:
        assert p.tile is not None and len(p.tile) == width and set(range(low)) <= set(p.tile)
        for i in p.members:
            assert stage.groups[i].diagonal or set(stage.groups[i].qubits) <= set(p.tile)
    assert len(passes) * 2 < len(stage.groups)
    # the passes' order keeps the circuit: the twin's state equals the CPU's
    monkeypatch.setattr(gpu_module, "TILE_BYTES", 16 << width)
    monkeypatch.setattr(gpu_module, "COALESCED_BYTES", 16 << low)
    assert GPU_TWIN.tile_qubits("complex128") == (width, low)
    monkeypatch.setattr(_config, "TILE_SEARCH_FROM_BYTES", 16 << (n if search else n + 1))
    assert device_tile_passes(stage.groups, n, GPU_TWIN, "complex128") == passes
    twin = dasq.simulate(c, chunk_qubits=n, device="gpu-twin", dtype="complex128").to_numpy()
    np.testing.assert_allclose(twin, dasq.simulate(c, chunk_qubits=n).to_numpy(), atol=1e-10)


def test_a_second_run_of_a_circuit_reuses_its_plan_and_compiled_passes():
    """No host time planning or compiling in a warm run: the plan is cached per circuit
    and the compiled tile passes per program."""
    from dasq.engine import program

    c = dasq.Circuit(10)
    for q in range(10):
        c.h(q).cz(q, (q + 3) % 10)
    first = dasq.simulate(c, device="gpu-twin")
    compiled = len(program.COMPILED._held)
    second = dasq.simulate(c, device="gpu-twin")
    assert second.plan is first.plan
    assert len(program.COMPILED._held) == compiled
    np.testing.assert_allclose(second.to_numpy(), first.to_numpy())


@pytest.mark.parametrize("n, greedy, searched", [(28, 32, 25), (30, 35, 26), (32, 37, 29)])
def test_large_blocks_search_for_fewer_tile_passes(n, greedy, searched):
    """The passes the GPU guide quotes for its layered random circuits (depth 20,
    complex64, one block), greedy and searched (pure planning); a run searches where
    its block holds TILE_SEARCH_FROM_BYTES or more (8 GiB: 30 qubits)."""
    pytest.importorskip("qiskit")
    sys.path.append(str(Path(__file__).resolve().parents[1]))
    from benchmarks import circuits
    from dasq.engine.program import device_tile_passes, tile_passes
    from dasq.plan.planner import make_plan
    from dasq.plan.steps import BlockProgram

    c = circuits.to_dasq(circuits.layers(n))
    (stage,) = [s for s in make_plan(list(c), n, n, fusion_size=2).steps if isinstance(s, BlockProgram)]
    width, low = GPU_TWIN.tile_qubits("complex64")
    assert len(tile_passes(stage.groups, n, width, GPU_TWIN.widest_tiled_group, low)) == greedy
    assert len(tile_passes(stage.groups, n, width, GPU_TWIN.widest_tiled_group, low, search=True)) == searched
    used = len(device_tile_passes(stage.groups, n, GPU_TWIN, "complex64"))
    assert used == (searched if n >= 30 else greedy)
