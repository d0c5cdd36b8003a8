"""What a backend does to ONE block: the only code that touches amplitudes.

The engine decides which blocks meet and builds the graph; a backend creates
blocks, applies actions and compiled groups, permutes and packs bits, and
reduces a block to the few numbers a read-out needs. A run chooses its backend
once (``get_backend``), and the graph's ``meta`` comes from it, so a GPU backend
is one more subclass. Kernels receive arrays and plain numbers, never operation
records; ``dasq.engine.actions`` unpacks a plan's action records into these calls.

A block of 2^L amplitudes is viewed as an L-dimensional tensor of shape (2,)*L in
C order, so local bit b lives on axis L-1-b. ``Controls`` pin local bits
((bit, value), ...). Methods named ``apply_*`` work in place on a block the caller
owns; the others return new arrays and never modify their inputs (Dask may hand
one block to several tasks).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq import _config
from dasq.plan.actions import Controls

TileApply = Callable[[Any, int], None]  # (block, base): one tile of the block, in place


class Kernel:
    """A fused group compiled for one backend and dtype (small frozen dataclasses)."""

    def apply(self, view: Any) -> None:
        """Apply in place to ``view`` (a block or a cache-sized slice of one)."""
        raise NotImplementedError

    def in_tiles(self, outside: Sequence[int]) -> TileApply | None:
        """How to apply the kernel (compiled on block positions) to one cache tile of a
        block where the tile lies, without gathering it: the tile is every amplitude
        whose bits ``outside`` equal those of ``base``. None: the tile must be gathered."""
        return None


@dataclass(frozen=True)
class SkipKernel(Kernel):
    """The group is the identity inside this block."""

    def apply(self, view: Any) -> None:
        return None

    def in_tiles(self, outside: Sequence[int]) -> TileApply:
        return lambda block, base: None


@dataclass(frozen=True)
class Monomial:
    """A matrix with one nonzero per row and column (X, CNOT, SWAP and Toffoli
    chains, with phases: a GHZ ladder's fused groups) as cycles of moves: pattern
    ``cycles[i]`` takes ``phases[i]`` times the amplitude of ``cycles[i + 1]``, the
    last of a cycle (``ends``: where each ends) that of its first; a cycle of one is
    a phase. Patterns in no cycle keep their amplitudes."""

    cycles: np.ndarray  # int64
    phases: np.ndarray  # complex128, one per entry of cycles
    ends: np.ndarray  # int64, exclusive

    @classmethod
    def of(cls, matrix: np.ndarray) -> Monomial | None:
        """The moves ``matrix`` makes, or None when it is not monomial."""
        nonzero = np.asarray(matrix) != 0
        if not (np.all(nonzero.sum(axis=0) == 1) and np.all(nonzero.sum(axis=1) == 1)):
            return None
        source = nonzero.argmax(axis=1)
        factor = np.asarray(matrix)[np.arange(source.size), source]
        cycles: list[int] = []
        ends: list[int] = []
        seen = (source == np.arange(source.size)) & (factor == 1)  # left as they are
        for head in range(source.size):
            j = head
            while not seen[j]:
                seen[j] = True
                cycles.append(j)
                j = int(source[j])
            if len(cycles) > (ends[-1] if ends else 0):
                ends.append(len(cycles))
        parts = (
            np.array(cycles, dtype=np.int64),
            factor[cycles].astype(np.complex128),
            np.array(ends, dtype=np.int64),
        )
        for a in parts:
            a.setflags(write=False)
        return cls(*parts)


class Backend:
    """Interface of a block backend. ``xp`` is its array namespace (numpy, cupy)."""

    name: str = "abstract"
    singleton: str = ""  # the module-level name of the backend's one instance
    xp: Any = np
    cache_blocking: bool = True  # whether stages run low groups over cache-sized slices
    shared_tiles: bool = False  # whether a stage runs as passes of tiles in a GPU's shared memory
    widest_tiled_group: int = 0  # the widest dense group a tile pass takes (wider ones run alone)

    def preferred_fusion_size(self) -> int:
        """The widest fused group this backend's kernels run fastest (the default of
        ``fusion_size``; dask config ``dasq.fusion-size`` overrides it)."""
        return _config.DEFAULT_FUSION_SIZE

    def warm_up(self, dtype: str, fusion_size: int) -> int:
        """Compile (or load from their cache) the kernels that fused groups of up to
        ``fusion_size`` qubits run on ``dtype`` blocks, before a run needs them: how
        many. Nothing to do for a backend whose kernels need no compiling."""
        return 0

    # ------------------------------------------------------------ creation
    def meta(self, dtype: str) -> Any:
        """An empty array of the backend's type: Dask's ``meta`` for its blocks."""
        return self.xp.empty(0, dtype=dtype)

    def empty(self, size: int, dtype: str) -> Any:
        return self.xp.empty(size, dtype=dtype)

    def scratch(self, size: int, dtype: str) -> Any:
        """A working buffer held for a while (a stage's gathered cache tile)."""
        return self.empty(size, dtype)

    def zeros(self, size: int, dtype: str) -> Any:
        """A new block of zeros (a basis state starts from one per block)."""
        return self.xp.zeros(size, dtype=dtype)

    def basis_block(self, size: int, hot: int, dtype: str) -> Any:
        """A block of zeros with a single 1 at ``hot`` (-1: no 1 in this block)."""
        out = self.zeros(size, dtype)
        if hot >= 0:
            out[hot] = 1
        return out

    def fault_in(self, block: Any) -> None:
        """Make the memory of a block of ``basis_block``'s zeros ready to be written
        piece by piece (where its pages are made lazily). Nothing to do elsewhere."""

    def from_host(self, array: Any, dtype: str) -> Any:
        """A block of this backend from a host array (or another backend's block)."""
        if hasattr(array, "get") and not isinstance(array, np.ndarray):  # a device array
            array = array.get()
        return self.xp.asarray(array, dtype=dtype)

    def to_host(self, block: Any) -> np.ndarray:
        return np.asarray(block)

    def memory_bytes(self) -> int | None:
        """Memory that holds the blocks when it is not the host's (a GPU's), else None."""
        return None

    def kernel_threads(self) -> contextlib.AbstractContextManager:
        """A context in which the libraries the kernels call start no threads of their
        own: Dask runs one block per thread, and that is the one level of parallelism."""
        return contextlib.nullcontext()

    # ------------------------------------------------------------ actions (in place)
    def apply_dense(
        self, block: Any, L: int, targets: Sequence[int], controls: Controls, matrix: Any
    ) -> None:
        raise NotImplementedError

    def apply_diagonal(
        self, block: Any, L: int, targets: Sequence[int], values: Any, controls: Controls
    ) -> None:
        raise NotImplementedError

    def apply_combine(
        self,
        block: Any,
        partner: Any,
        L: int,
        controls: Controls,
        own: complex,
        other: complex,
        flips: Sequence[int],
        signs: Sequence[int],
    ) -> None:
        raise NotImplementedError

    def apply_pair_map(
        self, block: Any, L: int, targets: Sequence[int], own: Any, weights: Any, piece: Any
    ) -> None:
        """block <- ``own`` on local ``targets`` + ``weights`` (2^k x r) applied to the
        r values per group a partner sent (``piece``, grouped by the other local bits)."""
        raise NotImplementedError

    def project(self, piece: Any, L: int, targets: Sequence[int], matrix: Any) -> Any:
        """r combinations (rows of ``matrix``, r x 2^m) over bits ``targets`` of a
        2^L piece, grouped by its other bits: what a partner sends of a low-rank read."""
        raise NotImplementedError

    # ------------------------------------------------------------ compiled groups
    def compile_matrix(self, qubits: Sequence[int], matrix: np.ndarray, dtype: str) -> Kernel:
        raise NotImplementedError

    def compile_diagonal(self, qubits: Sequence[int], table: np.ndarray, dtype: str) -> Kernel:
        raise NotImplementedError

    def tile_qubits(self, dtype: Any) -> tuple[int, int]:
        """(width, low) of a shared-memory tile (``shared_tiles`` backends): its bits,
        and how many of the block's lowest bits every tile holds (its runs in memory)."""
        raise NotImplementedError

    def compile_tile_pass(
        self, tile: Sequence[int], groups: Sequence[tuple[Sequence[int], np.ndarray, bool]], dtype: str
    ) -> Kernel:
        """One kernel for a pass of groups over every tile (``shared_tiles`` backends):
        ``tile`` the tile's block positions (increasing), each group its block
        positions, its matrix (or phase table) and whether it is a phase table."""
        raise NotImplementedError

    # ------------------------------------------------------------ bits
    def scatter_to_host(
        self,
        block: Any,
        out: np.ndarray,
        base: int,
        tile: tuple[np.ndarray, np.ndarray],
        outer: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """``block`` written into the host array ``out`` with its bits renamed: source
        offset ``tile[0][i] + (outer[0] summed over the set bits of o)`` goes to ``base +
        tile[1][i] + (outer[1] likewise)``. A tile holds the lowest bits of both orders,
        so reads and writes go in runs while the tile is in cache. ``out`` holds zeros
        where nothing is written: a tile of zeros may be left out."""
        raise NotImplementedError

    def permute_bits(self, block: Any, order: Sequence[int]) -> Any:
        """A new block whose local bit q is the input's local bit ``order[q]``."""
        raise NotImplementedError

    def permute_bits_in_place(self, block: Any, order: Sequence[int]) -> None:
        """``permute_bits`` written back into ``block``, which the caller owns."""
        block[...] = self.permute_bits(block, order)

    def pack(self, block: Any, L: int, fixed: Controls) -> Any:
        """The amplitudes whose local bits equal ``fixed``, contiguous (what is sent)."""
        raise NotImplementedError

    def place(self, block: Any, L: int, fixed: Controls, piece: Any) -> None:
        """Write ``piece`` where the local bits of ``block`` equal ``fixed`` (in place)."""
        raise NotImplementedError

    def swap_pieces(self, a: Any, fixed_a: Controls, b: Any, fixed_b: Controls, L: int) -> None:
        """Exchange, in place, the amplitudes of block ``a`` whose local bits equal
        ``fixed_a`` with those of block ``b`` at ``fixed_b`` (a piece's worth of scratch)."""
        raise NotImplementedError

    # ------------------------------------------------------------ reductions (results on the host)
    def norm2(self, block: Any) -> float:
        raise NotImplementedError

    def holds_only_zeros(self, view: Any) -> bool:
        """Whether ``view`` (a contiguous block or tile) is certainly all zeros, so that
        linear work on it may be left out. False where asking costs more than it
        spares: a GPU would wait for the device at every tile."""
        return False

    def vdot(self, a: Any, b: Any) -> complex:
        raise NotImplementedError

    def pauli_group(self, own: Any, src: Any, flip: int, masks: np.ndarray, weights: np.ndarray) -> complex:
        """sum_i conj(own[i]) src[i ^ flip] sum_k weights[k] (-1)^|(i ^ flip) & masks[k]|:
        a block's share of Pauli terms that share their X/Y mask, in one pass."""
        raise NotImplementedError

    def marginal(self, block: Any, L: int, block_index: int, positions: Sequence[int]) -> np.ndarray:
        """This block's share of the probabilities over ``positions`` (little-endian)."""
        raise NotImplementedError

    def add_marginal(
        self, out: np.ndarray, block: Any, L: int, block_index: int, positions: Sequence[int]
    ) -> None:
        """Add this block's share of the probabilities over ``positions`` to ``out`` (host)."""
        out += self.marginal(block, L, block_index, positions)

    def poisson_draws(
        self, block: Any, block_part: int, local_tables: np.ndarray, lam: float, key: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(logical indices, counts > 0) of Poisson(lam |a_i|^2) draws, one per amplitude,
        each keyed by (``key``, the amplitude's logical index): the logical index of
        local index i is ``block_part | local_tables[0][i & 255] | local_tables[1][...]``.
        The draws depend on the amplitudes only, never on blocks or layout."""
        raise NotImplementedError

    def __reduce__(self) -> str:
        # a backend is a stateless module-level singleton: pickled by name, so a
        # worker uses its own copy (pickle looks the name up in the class's module)
        return self.singleton
