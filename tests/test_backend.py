"""The CPU backend against plain numpy on (2,)*L tensors: permutations, packing,
marginals and the compiled group kernels."""

from __future__ import annotations

import numpy as np
import pytest
from reference import random_state, random_unitary

from dasq.backend import vector_layout
from dasq.backend.registry import get_backend
from dasq.plan.relayout import transpositions, write_order

CPU = get_backend("cpu")


def naive_permute(block: np.ndarray, order: list[int]) -> np.ndarray:
    L = len(order)
    axes = [L - 1 - order[L - 1 - a] for a in range(L)]
    return np.transpose(block.reshape((2,) * L), axes).reshape(-1)


@pytest.mark.parametrize("seed", range(8))
def test_permute_bits_equals_the_bit_by_bit_transpose(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(1, 11))
    block = random_state(L, rng)
    orders = [list(rng.permutation(L)), list(range(L))]
    leaving = sorted(int(b) for b in rng.choice(L, size=int(rng.integers(1, L + 1)), replace=False))
    orders.append(list(write_order(leaving, L) or range(L)))
    for order in orders:
        np.testing.assert_array_equal(CPU.permute_bits(block, order), naive_permute(block, order))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("seed", range(8))
def test_permute_bits_in_place_equals_the_transpose(seed, dtype):
    """The in-place path (numba bit swaps, one per moved bit) against the bit-by-bit
    transpose, for random permutations and the stage write orders; a strided view
    takes the generic path and lands in the same place."""
    rng = np.random.default_rng(seed)
    L = int(rng.integers(1, 13))
    block = random_state(L, rng).astype(dtype)
    leaving = sorted(int(b) for b in rng.choice(L, size=int(rng.integers(1, L + 1)), replace=False))
    for order in (list(rng.permutation(L)), list(write_order(leaving, L) or range(L))):
        assert len(transpositions(order)) <= sum(q != b for q, b in enumerate(order))
        mine = block.copy()
        CPU.permute_bits_in_place(mine, order)
        np.testing.assert_array_equal(mine, naive_permute(block, order))
        doubled = np.zeros(2 * block.size, dtype)
        strided = doubled[::2]
        strided[...] = block
        CPU.permute_bits_in_place(strided, order)
        np.testing.assert_array_equal(strided, naive_permute(block, order))


def test_write_order_puts_the_leaving_bits_on_top():
    L = 8
    block = np.arange(1 << L).astype(complex)
    leaving = [1, 4, 6]
    out = CPU.permute_bits(block, write_order(leaving, L)).real.astype(int)
    # the new top bits hold the old bits 1, 4, 6 (in that order)
    for i in range(1 << L):
        old = int(out[i])
        assert [(i >> (L - 3 + j)) & 1 for j in range(3)] == [(old >> b) & 1 for b in leaving]


def test_pack_and_place_are_inverse():
    rng = np.random.default_rng(1)
    L = 6
    block = random_state(L, rng)
    fixed = ((1, 0), (4, 1))
    piece = CPU.pack(block, L, fixed)
    assert piece.size == 1 << (L - 2)
    target = np.zeros_like(block)
    CPU.place(target, L, fixed, piece)
    mask = np.array([((i >> 1) & 1) == 0 and ((i >> 4) & 1) == 1 for i in range(1 << L)])
    np.testing.assert_array_equal(target[mask], block[mask])
    assert not target[~mask].any()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_compiled_matrix_kernels_match_dense_application(k):
    rng = np.random.default_rng(k)
    L = 7
    qubits = tuple(int(q) for q in rng.choice(L, size=k, replace=False))
    u = random_unitary(k, rng)
    block = random_state(L, rng)
    want = block.copy()
    CPU.apply_dense(want, L, qubits, (), u)
    got = block.copy()
    CPU.compile_matrix(qubits, u, "complex128").apply(got)
    np.testing.assert_allclose(got, want, atol=1e-12)


GROUP_L = 11  # a block where a 5-qubit group on high bits and its vector lanes fit


def _placements(k: int) -> dict[str, tuple[int, ...]]:
    return {
        "all high": tuple(range(GROUP_L - k, GROUP_L))[::-1],
        "with bit 0": (0, *range(GROUP_L - k + 1, GROUP_L)),
        "straddling the lanes": tuple(range(5 - k // 2, 5 - k // 2 + k)),
        "scattered": (7, 1, 9, 4, 2)[:k],
        "inside one vector": (2, 0, 3, 1, 4)[:k],
    }


def _by_definition(u: np.ndarray, qubits: tuple[int, ...], state: np.ndarray) -> np.ndarray:
    """out[i] = sum_j u[g(i), j] state[i with its target bits set to j], where g(i)
    reads the target bits of i (bit b of a matrix index <-> qubits[b])."""
    index = np.arange(state.size)
    g = sum(((index >> q) & 1) << b for b, q in enumerate(qubits))
    base = index & ~sum(1 << q for q in qubits)
    out = np.zeros(state.size, dtype=np.complex128)
    for j in range(u.shape[1]):
        out += u[g, j] * state[base | sum(((j >> b) & 1) << q for b, q in enumerate(qubits))]
    return out


def test_the_definition_is_the_kronecker_reference():
    from reference import embed

    rng = np.random.default_rng(1)
    u, state = random_unitary(3, rng), random_state(6, rng)
    np.testing.assert_allclose(
        _by_definition(u, (4, 0, 2), state), embed(u, (4, 0, 2), 6) @ state, atol=1e-13
    )


PLACEMENTS = ("all high", "with bit 0", "straddling the lanes", "scattered", "inside one vector")


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize(
    "k, where",
    # 5 targets on three placements: each such kernel takes seconds to compile in a fresh CI
    [(k, where) for k in range(1, 6) for where in PLACEMENTS if k < 5 or where in PLACEMENTS[:3]],
)
def test_group_kernel_matches_the_definition(k, where, dtype):
    """The numba group kernel (widths 1..GROUP_MAX_QUBITS) against the matrix applied
    by definition, for every kind of target placement (targets among a vector's lane
    bits are exchanged with partner bits above the lanes, the others are whole
    vectors), in both precisions; a view too small for a tile, or not writable, goes
    through BLAS and must agree as well."""
    from dasq.backend.cpu import GROUP_MAX_QUBITS, GroupKernel

    assert GROUP_MAX_QUBITS == 5
    rng = np.random.default_rng(k * 7 + len(where))
    qubits = _placements(k)[where]
    u = random_unitary(k, rng)
    block = random_state(GROUP_L, rng).astype(dtype)
    kernel = CPU.compile_matrix(qubits, u, dtype)
    assert isinstance(kernel, GroupKernel)
    lane_bits = vector_layout.vector_amplitudes(dtype).bit_length() - 1
    at = kernel.layout
    lane_targets = sorted(q for q in qubits if q < lane_bits)
    assert at.lanes == sum((q + 1) << (4 * e) for e, q in enumerate(lane_targets))
    partners = set(at.holes.tolist()) - set(qubits) - set(range(lane_bits))
    assert len(partners) == len(lane_targets) and min(partners, default=lane_bits) >= lane_bits
    if where == "all high":
        assert at.lanes == 0 and not partners  # no exchanges
    assert sorted(at.rows.tolist()) == list(range(1 << k))  # every matrix row once
    _applies_as_defined(kernel, u, qubits, block, 1e-5 if dtype == "complex64" else 1e-12)


def _applies_as_defined(
    kernel, u: np.ndarray, qubits: tuple[int, ...], block: np.ndarray, atol: float
) -> None:
    """``kernel`` on a copy of ``block`` and on a view that just holds its highest
    target equals ``u`` applied by definition; a read-only block is refused (BLAS's
    path, where such a view goes, writes in place too)."""
    got = block.copy()
    kernel.apply(got)
    np.testing.assert_allclose(got, _by_definition(u, qubits, block.astype(np.complex128)), atol=atol)
    small = block[: 1 << (max(qubits) + 1)].copy()
    kernel.apply(small)
    np.testing.assert_allclose(
        small, _by_definition(u, qubits, block[: small.size].astype(np.complex128)), atol=atol
    )
    frozen = block.copy()
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        kernel.apply(frozen)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("where", ["all high", "with bit 0", "inside one vector", "scattered"])
def test_group_kernel_runs_on_a_tile_where_it_lies(where, dtype):
    """``in_tiles``: the kernel, compiled on block positions, applied tile by tile to
    the tiles of the block that hold its targets (the bits outside a tile fixed)
    equals the matrix on the whole block; with a lane bit or a partner bit outside
    the tile it declines (the engine gathers the tile instead)."""
    from dasq.engine.program import tile_bases

    rng = np.random.default_rng(len(where) + len(dtype))
    k, L = 4, 13
    qubits = _placements(k)[where]
    u = random_unitary(k, rng)
    kernel = CPU.compile_matrix(qubits, u, dtype)
    holes = set(kernel.layout.holes.tolist())
    free = [b for b in range(L) if b not in holes]
    atol = 1e-5 if dtype == "complex64" else 1e-12
    for outside in (tuple(free[-2:]), tuple(free[len(free) // 2 : len(free) // 2 + 3])):
        tile = tuple(b for b in range(L) if b not in outside)
        block = random_state(L, rng).astype(dtype)
        want = _by_definition(u, qubits, block.astype(np.complex128))
        apply = kernel.in_tiles(outside)
        assert apply is not None
        for base in tile_bases(tile, L):
            apply(block, base)
        np.testing.assert_allclose(block, want, atol=atol)
    partner_or_lane = max(holes - set(qubits))  # the highest partner, or a lane bit
    assert kernel.in_tiles((partner_or_lane,)) is None
    frozen = random_state(L, rng).astype(dtype)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="writable"):
        kernel.in_tiles(tuple(free[-1:]))(frozen, 0)


def _random_monomial(k: int, rng: np.random.Generator, unit: bool) -> np.ndarray:
    """A random permutation of the 2^k patterns, with random phases unless ``unit``,
    some patterns left fixed (as a CNOT ladder leaves half of them)."""
    size = 1 << k
    order = np.arange(size)
    moving = rng.choice(size, size=max(2, size // 2), replace=False)
    for cycle in np.array_split(moving, 2 if moving.size >= 4 else 1):  # two cycles where there is room
        order[cycle] = np.roll(cycle, 1)
    phases = np.ones(size) if unit else np.exp(2j * np.pi * rng.random(size))
    m = np.zeros((size, size), dtype=np.complex128)
    m[np.arange(size), order] = phases
    return m


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("unit", [True, False])
@pytest.mark.parametrize("qubits", [(3, 4), (5, 3, 9), (4, 5, 6, 7), (3, 10, 6, 8, 4), (7,)])
def test_permutation_kernel_matches_the_definition(qubits, unit, dtype):
    """A monomial group (a permutation of its target patterns, with phases or not)
    runs as moves, not as a dense product, and gives the matrix applied by
    definition: over the whole block, over a view that just holds its highest
    target, and tile by tile where it lies."""
    from dasq.backend.base import Monomial
    from dasq.backend.cpu import PermutationKernel
    from dasq.engine.program import tile_bases

    rng = np.random.default_rng(sum(qubits) + unit)
    L = 12
    u = _random_monomial(len(qubits), rng, unit)
    move = Monomial.of(u)
    assert move is not None and move.ends[-1] == move.cycles.size
    assert Monomial.of(random_unitary(len(qubits), rng)) is None  # a dense matrix is not one
    kernel = CPU.compile_matrix(qubits, u, dtype)
    assert isinstance(kernel, PermutationKernel)
    assert kernel.unit == unit
    atol = 1e-5 if dtype == "complex64" else 1e-12
    block = random_state(L, rng).astype(dtype)
    _applies_as_defined(kernel, u, qubits, block, atol)
    want = _by_definition(u, qubits, block.astype(np.complex128))
    outside = tuple(b for b in (11, 1) if b not in qubits)
    tile = tuple(b for b in range(L) if b not in outside)
    got = block.copy()
    apply = kernel.in_tiles(outside)
    assert apply is not None
    for base in tile_bases(tile, L):
        apply(got, base)
    np.testing.assert_allclose(got, want, atol=atol)
    assert kernel.in_tiles((qubits[0],)) is None  # a target outside the tile: gathered instead


def test_a_monomial_group_on_the_lowest_bits_keeps_the_dense_kernel():
    """Runs of fewer than 2^3 amplitudes move slower than the dense tile computes."""
    from dasq.backend.cpu import GroupKernel

    u = _random_monomial(2, np.random.default_rng(0), unit=True)
    assert isinstance(CPU.compile_matrix((1, 5), u, "complex64"), GroupKernel)


def test_mapped_zeros_are_private_zeroed_pages():
    """Blocks of 4 MiB and more come from anonymous private maps: zeroed, writable,
    their views valid after the array goes, a pickle an ordinary copy, and a forked
    process's writes invisible to this one; smaller ones are numpy's."""
    import os
    import pickle

    from dasq.backend.arrays import MAPPED_FROM_BYTES, mapped_zeros

    lazy = mapped_zeros(MAPPED_FROM_BYTES // 8, "complex64", populate=False)
    assert lazy.flags.writeable and not lazy.any()
    big = mapped_zeros(MAPPED_FROM_BYTES // 8, "complex64")
    assert big.flags.writeable and big.dtype == np.complex64 and not big.any()
    big[:] = 1
    view = big[3:7]
    del big
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(view)), np.ones(4, np.complex64))
    small = mapped_zeros(16, "complex128")
    assert small.base is None and not small.any()
    if hasattr(os, "fork"):
        shared = mapped_zeros(MAPPED_FROM_BYTES // 16, "complex128")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            shared[0] = 5
            os._exit(0)
        os.waitpid(pid, 0)
        assert shared[0] == 0


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_recycled_blocks_come_back_only_when_no_view_is_left():
    """A block's map is handed out again only once every array over it is gone (a
    view kept alive keeps its data); ``zeros`` from a reused map are zeros."""
    from dasq.backend.arrays import MAPPED_FROM_BYTES
    from dasq.backend.recycled import BlockPool

    pool = BlockPool(idle_seconds=5)
    size = MAPPED_FROM_BYTES // 8
    block = pool.empty(size, "complex64")
    assert block.flags.writeable and block.size == size and block.dtype == np.complex64
    block[:] = 7
    first = _address(block)
    view = block.reshape(2, -1).T[5:9]
    del block
    assert pool.pooled_bytes() == 0  # the view still holds the map
    other = pool.empty(size, "complex64")
    assert _address(other) != first
    other[:] = 3
    np.testing.assert_array_equal(view, np.full((4, 2), 7, np.complex64))
    del view
    assert pool.pooled_bytes() == size * 8
    again = pool.zeros(size, "complex64")
    assert _address(again) == first and not again.any()
    assert pool.pooled_bytes() == 0
    small = pool.empty(16, "complex128")  # under MAPPED_FROM_BYTES: numpy's, never pooled
    del small
    assert pool.pooled_bytes() == 0
    del again
    pool.clear()
    assert pool.pooled_bytes() == 0


def test_recycled_blocks_never_raise_the_peak_and_idle_maps_go_back():
    """Blocks dropped and made again reuse the same maps (no new memory), sizes apart;
    maps idle for ``idle_seconds`` are unmapped."""
    import time

    from dasq.backend.arrays import MAPPED_FROM_BYTES
    from dasq.backend.recycled import BlockPool

    pool = BlockPool(idle_seconds=0.05)
    size = MAPPED_FROM_BYTES // 16
    blocks = [pool.empty(size, "complex128") for _ in range(3)]
    wider = pool.empty(2 * size, "complex128")
    seen = {_address(b) for b in blocks}
    del blocks, wider
    assert pool.pooled_bytes() == 5 * size * 16
    blocks = [pool.empty(size, "complex128") for _ in range(3)]
    assert {_address(b) for b in blocks} == seen
    del blocks
    deadline = time.monotonic() + 10
    while pool.pooled_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.pooled_bytes() == 0


def test_the_cpu_backend_makes_blocks_from_its_pool(monkeypatch):
    """New and assembled blocks are the pool's; scratch tiles are not pooled."""
    from dasq.backend import cpu
    from dasq.backend.arrays import MAPPED_FROM_BYTES
    from dasq.backend.recycled import BlockPool

    HOST_BLOCKS = BlockPool(idle_seconds=60)
    monkeypatch.setattr(cpu, "HOST_BLOCKS", HOST_BLOCKS)
    size = MAPPED_FROM_BYTES // 8
    block = CPU.basis_block(size, 3, "complex64")
    assert block[3] == 1 and np.count_nonzero(block) == 1
    address = _address(block)
    del block
    assert HOST_BLOCKS.pooled_bytes() == size * 8
    again = CPU.basis_block(size, 5, "complex64")
    assert _address(again) == address and again[5] == 1 and np.count_nonzero(again) == 1
    del again
    assert HOST_BLOCKS.pooled_bytes() == size * 8
    tile = CPU.scratch(size, "complex64")
    HOST_BLOCKS.clear()
    del tile
    assert HOST_BLOCKS.pooled_bytes() == 0


def test_a_forked_child_starts_with_an_empty_pool():
    """The pool's lock, maps and timer are the parent's threads' business: a child
    made by fork starts with none of them (and can pool and trim its own)."""
    import os

    from dasq.backend.arrays import MAPPED_FROM_BYTES
    from dasq.backend.recycled import BlockPool

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    pool = BlockPool(idle_seconds=60)
    block = pool.empty(MAPPED_FROM_BYTES // 8, "complex64")
    del block
    assert pool.pooled_bytes() > 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, str(pool.pooled_bytes()).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 64) == b"0"
    pool.clear()


def test_tile_schedules_keep_eight_fma_chains():
    """Outputs per pass and partial sums: AVX2 (two registers per vector) sums two
    output vectors at a time, AVX-512 four; a tile of one vector splits its sums."""
    from dasq.backend.vector_layout import TileSchedule, tile_schedule

    assert tile_schedule(16, wide=False) == TileSchedule(rows=2, parts=1)
    assert tile_schedule(16, wide=True) == TileSchedule(rows=4, parts=1)
    assert tile_schedule(2, wide=True) == TileSchedule(rows=2, parts=2)
    assert tile_schedule(1, wide=False) == TileSchedule(rows=1, parts=2)


@pytest.mark.parametrize(
    "features, wide", [("+avx2,+fma,-avx512f,-avx512bw", False), ("+avx2,+avx512f,+avx512bw", True)]
)
def test_vector_width_follows_the_cpu_numba_compiles_for(monkeypatch, features, wide):
    """NUMBA_CPU_FEATURES (a cache built for an older CPU, say) decides the width,
    not the host's: AVX-512 code is only what numba is told it may emit. Read from
    the environment, as numba reads it, without importing numba."""
    from dasq.backend import vector_layout

    monkeypatch.setenv("NUMBA_CPU_FEATURES", features)
    vector_layout.wide_vectors.cache_clear()
    try:
        assert vector_layout.wide_vectors() is wide
        assert CPU.preferred_fusion_size() == (4 if wide else 3)
    finally:
        vector_layout.wide_vectors.cache_clear()


def test_the_hosts_vector_width_is_the_one_llvm_sees(monkeypatch):
    """numpy's dispatch table answers for the host (no llvmlite import at start-up);
    numba compiles for what LLVM sees, so the two must agree."""
    import llvmlite.binding as llvm

    monkeypatch.delenv("NUMBA_CPU_FEATURES", raising=False)
    vector_layout.wide_vectors.cache_clear()
    try:
        assert vector_layout.wide_vectors() is bool(llvm.get_host_cpu_features().get("avx512f"))
    finally:
        vector_layout.wide_vectors.cache_clear()


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("rows, parts", [(1, 1), (2, 1), (4, 1), (3, 2), (16, 2)])
@pytest.mark.parametrize("where", ["all high", "with bit 0", "straddling the lanes", "inside one vector"])
def test_every_tile_schedule_matches_the_definition(rows, parts, where, dtype):
    """Each order of the tile's sums (any host's schedule, an uneven last pass, passes
    that end inside a set of outputs exchanged together) computes the same matrix
    product."""
    from dasq.backend.numba_kernels import compiled_group_kernel
    from dasq.backend.vector_layout import TileSchedule

    rng = np.random.default_rng(rows * 5 + parts + len(where))
    for k in (3, 4):
        qubits = _placements(k)[where]
        u = random_unitary(k, rng)
        block = random_state(GROUP_L, rng).astype(dtype)
        kernel = CPU.compile_matrix(qubits, u, dtype)
        at = kernel.layout
        run = compiled_group_kernel(dtype, k, at.lanes, TileSchedule(rows, parts))
        got = block.copy()
        run(got, at.holes, at.offsets, kernel.cre, kernel.cim)
        atol = 1e-5 if dtype == "complex64" else 1e-12
        np.testing.assert_allclose(got, _by_definition(u, qubits, block.astype(np.complex128)), atol=atol)


def test_norms_and_inner_products_accumulate_in_double_precision():
    """BLAS's complex64 dot keeps a float32 sum: over 2^22 amplitudes it is off by
    about 1e-4, which read as a norm of 0.9986 at 30 qubits. The backend's are not."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(1 << 22) + 1j * rng.standard_normal(1 << 22)).astype(np.complex64)
    exact = x.astype(np.complex128)
    reference = np.vdot(exact, exact).real
    assert abs(CPU.norm2(x) / reference - 1) < 1e-9
    y = (x * np.complex64(0.6 - 0.8j)).astype(np.complex64)
    np.testing.assert_allclose(CPU.vdot(x, y), np.vdot(exact, y.astype(np.complex128)), rtol=1e-9)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_pauli_group_kernel_over_several_tiles_matches_the_sum(dtype):
    """Blocks larger than the kernel's tile: flips inside a tile, across tiles, both."""
    from dasq.backend.numba_kernels import PAULI_TILE

    rng = np.random.default_rng(5)
    n = PAULI_TILE.bit_length() + 1  # four tiles
    size = 1 << n
    own = random_state(n, rng).astype(dtype)
    src = random_state(n, rng).astype(dtype)
    backend = get_backend("cpu")
    index = np.arange(size)
    for flip in (0, 5, 1 << (n - 1), (1 << (n - 2)) | 3):
        masks = np.array([0, 0b1011, (1 << (n - 1)) | 1, (1 << (n - 2)) | (1 << 7)], dtype=np.int64)
        weights = rng.normal(size=4) + 1j * rng.normal(size=4)
        partner = index ^ flip
        want = 0j
        for mask, w in zip(masks, weights):
            parity = np.array([bin(int(v) & int(mask)).count("1") & 1 for v in partner])
            want += w * np.sum(np.conj(own.astype(complex)) * src.astype(complex)[partner] * (1 - 2 * parity))
        got = backend.pauli_group(own, src, flip, masks, weights)
        assert abs(got - want) < (1e-12 if dtype == "complex128" else 1e-5)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("n", [1, 2, 6, 7, 12, 16])
def test_diagonal_kernel_matches_the_definition(dtype, n):
    """The tiled diagonal kernel at every kind of placement: qubits inside a tile,
    above it, both (rows of factors), and many above it or blocks smaller than a
    tile (factors read from the table per amplitude)."""
    from dasq.backend.numba_kernels import apply_diagonal

    rng = np.random.default_rng(n)
    index = np.arange(1 << n)
    placements = {(0,), (n - 1,), (0, n - 1), tuple(range(min(n, 4))), tuple(rng.permutation(n)[: min(n, 3)])}
    placements |= {tuple(range(max(n - 8, 0), n)), tuple(rng.permutation(n)[: min(n, 10)])}
    for qubits in placements:
        values = np.exp(1j * rng.normal(size=1 << len(qubits)))
        state = random_state(n, rng).astype(dtype)
        j = sum(((index >> q) & 1) << b for b, q in enumerate(qubits))
        want = state.astype(np.complex128) * values[j]
        apply_diagonal(state, np.array(qubits, dtype=np.int64), values.astype(dtype))
        np.testing.assert_allclose(state, want, atol=1e-12 if dtype == "complex128" else 1e-5)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("L", [1, 5, 9])
def test_marginal_kernel_matches_the_definition(dtype, L):
    """The CPU backend's one-pass marginal (numba) against the definition: local
    positions inside and above a tile, global positions, any order."""
    rng = np.random.default_rng(L)
    block = random_state(L, rng).astype(dtype)
    weights = np.abs(block.astype(np.complex128)) ** 2
    index = np.arange(1 << L)
    backend = get_backend("cpu")
    for positions in {(0,), (L - 1,), (L, 0), tuple(range(L)), tuple(reversed(range(L))), (L + 1, L - 1, L)}:
        for block_index in (0, 1, 2, 3):
            want = np.zeros(1 << len(positions))
            bits = [((block_index >> (q - L)) & 1) if q >= L else (index >> q) & 1 for q in positions]
            np.add.at(
                want, sum(np.asarray(b) << j for j, b in enumerate(bits)) * np.ones_like(index), weights
            )
            got = backend.marginal(block, L, block_index, positions)
            np.testing.assert_allclose(got, want, atol=1e-12 if dtype == "complex128" else 1e-6)


def _full_matrix(L: int, targets, controls, small: np.ndarray) -> np.ndarray:
    """The 2^L x 2^L matrix of ``small`` on ``targets`` (bit j of its index: targets[j])
    where ``controls`` (bit, value) hold, the identity elsewhere: built entry by entry."""
    full = np.zeros((1 << L, 1 << L), dtype=complex)
    for col in range(1 << L):
        if any((col >> b) & 1 != v for b, v in controls):
            full[col, col] = 1
            continue
        sub = sum(((col >> t) & 1) << j for j, t in enumerate(targets))
        rest = col & ~sum(1 << t for t in targets)
        for row_sub in range(1 << len(targets)):
            row = rest | sum(((row_sub >> j) & 1) << t for j, t in enumerate(targets))
            full[row, col] = small[row_sub, sub]
    return full


@pytest.mark.parametrize("seed", range(12))
def test_small_block_actions_match_their_full_matrices(seed):
    """The array code's one-target products and phase tables on the block's compact
    axes (what small states and fused groups' matrices run), with controls of either
    value, against each action's 2^L x 2^L matrix."""
    rng = np.random.default_rng(seed)
    L = int(rng.integers(2, 7))
    bits = [int(b) for b in rng.permutation(L)]
    controls = tuple((b, int(rng.integers(0, 2))) for b in bits[1 : 1 + int(rng.integers(0, L))])
    free = [b for b in bits if b not in dict(controls)]
    block = random_state(L, rng)
    u = random_unitary(1, rng)
    got = block.copy()
    CPU.apply_dense(got, L, (bits[0],), controls, u)
    np.testing.assert_allclose(got, _full_matrix(L, (bits[0],), controls, u) @ block, atol=1e-12)
    targets = tuple(free[: int(rng.integers(0, len(free) + 1))])
    values = np.exp(1j * rng.uniform(0, 2 * np.pi, 1 << len(targets)))
    got = block.copy()
    CPU.apply_diagonal(got, L, targets, values, controls)
    want = _full_matrix(L, targets, controls, np.diag(values)) @ block
    np.testing.assert_allclose(got, want, atol=1e-12)
