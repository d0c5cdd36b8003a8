"""DensityMatrix: an N-qubit mixed state held as its 2N-qubit Choi vector.

rho[i, j] is amplitude i + j 2^N of a StateVector on 2N qubits (ket qubit q at q,
bra qubit q at q + N), so a density matrix is run by the same engine, planner and
stores as a pure state (``dasq/circuit/choi.py`` says what each operation is on
the Choi vector). The read-outs here are the density-matrix ones: probabilities,
traces and Pauli expectations read only the 2^N entries rho[k, k ^ f] where they
live (no exchange: the seed paper's Alg. 26); the purity is the vector's squared
norm; the partial trace (Alg. 28) gives a smaller DensityMatrix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dasq.backend.registry import get_backend
from dasq.circuit.circuit import Circuit
from dasq.circuit.kinds import pauli_masks
from dasq.circuit.validation import (
    check_index,
    check_qubits,
    check_readout_qubits,
    check_seed,
    check_shots,
    not_a_circuit,
)
from dasq.engine.draws import layout_tables, sample_shots
from dasq.errors import ValidationError
from dasq.plan.choi import choi_circuit
from dasq.state.observables import PauliSum
from dasq.state.statevector import (
    MAX_MARGINAL_QUBITS,
    StateVector,
    as_numpy_array,
    labelled_counts,
    qiskit_state,
)

if TYPE_CHECKING:  # graph modules are imported by the read-outs that build graphs
    import dask.array as da


class DensityMatrix:
    """A density matrix of ``num_qubits`` qubits; build one with
    ``dasq.simulate(circuit, density=True)``. ``chunk_qubits`` and ``layout`` are
    those of the Choi vector (2N qubits); ``choi`` is that vector as a StateVector."""

    def __init__(self, choi: StateVector, measurements: Sequence[tuple[int, int]] = ()) -> None:
        if choi.num_qubits % 2:
            raise ValidationError(f"a Choi vector has an even number of qubits, got {choi.num_qubits}")
        self.choi = choi
        self._n = choi.num_qubits // 2
        self.measurements: list[tuple[int, int]] = list(measurements)

    # ----------------------------------------------------------------- properties
    @property
    def num_qubits(self) -> int:
        """N, the qubits of the density matrix (its Choi vector has 2N)."""
        return self._n

    @property
    def chunk_qubits(self) -> int:
        """Local qubits per block of the Choi vector."""
        return self.choi.chunk_qubits

    @property
    def dtype(self) -> np.dtype:
        """Complex dtype of the amplitudes."""
        return self.choi.dtype

    @property
    def layout(self) -> tuple[int, ...]:
        """Bit position of each Choi qubit (ket q at q, bra q at q + N) in the blocks."""
        return self.choi.layout

    @property
    def blocks(self) -> da.Array:
        """The Choi vector's stored blocks (physical order: see ``layout``)."""
        return self.choi.blocks

    @property
    def plan(self) -> Any:
        """The physical plan that produced this state (None for an initial state)."""
        return self.choi.plan

    @property
    def report(self) -> Any:
        """What the run did: steps, seconds, amplitudes moved (a ``dasq.engine.report.Report``)."""
        return self.choi.report

    @property
    def store(self) -> str | None:
        """Path of the zarr store holding the state, or None in memory."""
        return self.choi.store

    @property
    def storage_fidelity(self) -> float:
        """Fidelity kept by lossy storage (1.0 unless ``keep_bits=`` was set)."""
        return self.choi.storage_fidelity

    @property
    def amplitudes(self) -> da.Array:
        """rho as a lazy 2^N x 2^N dask array (row i, column j)."""
        d = 1 << self._n
        return self.choi.amplitudes.reshape(d, d).T

    def __repr__(self) -> str:
        c = self.choi
        return (
            f"<dasq.DensityMatrix {self._n} qubits, {self.dtype}, {1 << (2 * self._n - c.chunk_qubits)} "
            f"blocks of 2^{c.chunk_qubits} amplitudes>"
        )

    def _repr_html_(self) -> str:
        return self.choi._html("dasq.DensityMatrix", f" of {self._n} qubits, held as its Choi vector")

    # ----------------------------------------------------------------- storage
    def to_zarr(self, path: str | os.PathLike[str]) -> None:
        """Save rho (its Choi vector, in its stored layout) as a complete dasq store at
        ``path``, whole or not at all; ``DensityMatrix.from_zarr`` reads it back. The
        outcomes of the projections made on the way (``measurements``) are not kept."""
        self.choi._save(path, density_qubits=self._n)

    @classmethod
    def from_zarr(cls, path: str | os.PathLike[str], *, client: Any = None) -> DensityMatrix:
        """The density matrix in a dasq store (saved by ``to_zarr``, or a completed
        ``density=True`` run), read lazily block by block."""
        return cls(StateVector._opened(path, client, density=True))

    # ----------------------------------------------------------------- evolution
    def apply(self, circuit: Circuit) -> DensityMatrix:
        """A new density matrix: this one with ``circuit`` (gates, channels, resets) applied."""
        if not isinstance(circuit, Circuit):
            raise TypeError(not_a_circuit(circuit))
        if circuit.num_qubits != self._n:
            raise ValidationError(f"circuit has {circuit.num_qubits} qubits but the state has {self._n}")
        return DensityMatrix(self.choi.apply(choi_circuit(circuit)), self.measurements)

    def project(self, qubit: int, outcome: int) -> DensityMatrix:
        """A new density matrix: this one after measuring ``qubit`` with ``outcome``,
        renormalised. Refuses an outcome of probability 0."""
        (q,) = check_readout_qubits([qubit], self._n)
        if outcome not in (0, 1):
            raise ValidationError(f"a measurement outcome is 0 or 1, got {outcome!r}")
        probs = self.probabilities([q])
        p = float(probs[outcome] / probs.sum())
        if p <= 0:
            raise ValidationError(f"qubit {q} has probability 0 of outcome {outcome}")
        return self.projected(q, outcome, p)

    def projected(
        self, qubit: int, outcome: int, probability: float, *, reset: bool = False
    ) -> DensityMatrix:
        """``project`` when the outcome's ``probability`` is known: the ket and the
        bra bit are both kept at ``outcome`` and the entries divided by it."""
        ket = self.choi.projected(qubit, outcome, probability**2, reset=reset)
        both = ket.projected(qubit + self._n, outcome, 1.0, reset=reset)
        return DensityMatrix(both, self.measurements + ([] if reset else [(qubit, outcome)]))

    def projected_onto(self, fixed: Sequence[tuple[int, int]], probability: float) -> DensityMatrix:
        """``projected`` for every (qubit, bit) of ``fixed`` at once, divided once by their
        joint ``probability``: ket and bra bits kept in one projection of the Choi vector."""
        both = fixed + tuple((q + self._n, b) for q, b in fixed)
        return DensityMatrix(self.choi.projected_onto(both, probability**2), self.measurements + list(fixed))

    # ----------------------------------------------------------------- read-out
    def _entries(self, flip: int) -> np.ndarray:
        """rho[k, k ^ flip] for every k (2^N numbers)."""
        c = self.choi
        if c._held is not None:  # one array in logical order: rho[i, j] at i + (j << N)
            k = np.arange(1 << self._n, dtype=np.int64)
            return c._held[k + ((k ^ flip) << self._n)]
        from dasq.engine import readout

        part = readout.choi_entries(c.blocks, c.chunk_qubits, c.layout, self._n, flip, c.backend)
        return c._compute(part)[0]

    def _diagonal(self) -> np.ndarray:
        return self._entries(0).real

    def trace(self) -> float:
        """Tr(rho) (1 for a normalised density matrix)."""
        return float(self._diagonal().sum())

    def norm(self) -> float:
        """Tr(rho), the density-matrix counterpart of a statevector's norm."""
        return self.trace()

    def purity(self) -> float:
        """Tr(rho^2): 1 for a pure state, 2^-N for the maximally mixed one."""
        return self.choi.norm() ** 2

    def to_numpy(self, force: bool = False) -> np.ndarray:
        """rho as a 2^N x 2^N numpy array; refuses above ``dasq.to-numpy-limit`` bytes
        (default a quarter of RAM) unless ``force=True``."""
        d = 1 << self._n
        return self.choi.to_numpy(force=force).reshape(d, d).T

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(dm)``: rho as a new 2^N x 2^N numpy array, qubit 0 the least
        significant bit of row and column (Qiskit's order). It is ``to_numpy()``, so
        the ``dasq.to-numpy-limit`` guard holds (``to_numpy(force=True)`` passes it), and
        ``copy=False`` is refused: each call makes a new array."""
        return as_numpy_array(self.to_numpy, dtype, copy)

    def to_operator(self) -> Any:
        """rho as a ``qiskit.quantum_info.Operator`` on N qubits: what Qiskit reads to build
        ``qiskit.quantum_info.DensityMatrix(dm)`` (or ``Operator(dm)``)."""
        from qiskit.quantum_info import Operator

        dims = (2,) * self._n
        return Operator(self.to_numpy(), input_dims=dims, output_dims=dims)

    def to_qiskit(self) -> Any:
        """This state as a ``qiskit.quantum_info.DensityMatrix`` of N qubits."""
        from qiskit.quantum_info import DensityMatrix as QiskitDensityMatrix

        return QiskitDensityMatrix(self.to_numpy(), dims=(2,) * self._n)

    def amplitude(self, row: int, column: int) -> complex:
        """rho[row, column]."""
        i, j = check_index(row, self._n, "row"), check_index(column, self._n, "column")
        return self.choi.amplitude(i + (j << self._n))

    def probabilities(self, qubits: Sequence[int] | None = None) -> np.ndarray:
        """Marginal probabilities over ``qubits``; bit j of the index is ``qubits[j]``,
        in the state's real precision (as ``StateVector.probabilities``)."""
        qs = check_readout_qubits(qubits, self._n)
        if len(qs) > MAX_MARGINAL_QUBITS:
            raise ValidationError(f"a marginal over at most {MAX_MARGINAL_QUBITS} qubits is allowed")
        p = np.clip(self._diagonal(), 0.0, None)
        k = np.arange(p.size, dtype=np.int64)
        index = np.zeros_like(k)
        for j, q in enumerate(qs):
            index |= ((k >> q) & 1) << j
        return np.bincount(index, weights=p, minlength=1 << len(qs)).astype(np.finfo(self.dtype).dtype)

    def sample(
        self, shots: int, qubits: Sequence[int] | None = None, seed: int | None = None
    ) -> dict[str, int]:
        """Counts of ``shots`` measurements of ``qubits`` (all by default), Qiskit-style
        labels with ``qubits[0]`` rightmost; a seed fixes them for any chunking."""
        qs = check_readout_qubits(qubits, self._n)
        indices, counts = self.sample_counts(shots, seed)
        return labelled_counts(indices, counts, qs)

    def sample_counts(self, shots: int, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(basis-state indices ascending, counts) of ``shots`` draws from the diagonal,
        drawn as a statevector with the same probabilities would draw them."""
        shots = check_shots(shots)
        key = int(np.random.default_rng(check_seed(seed)).integers(0, 2**62))
        amplitudes = np.sqrt(np.clip(self._diagonal(), 0.0, None)).astype(np.complex128)
        tables, _ = layout_tables(range(self._n), self._n)
        cpu = get_backend("cpu")

        def draw_pass(lam: float, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
            return [cpu.poisson_draws(amplitudes, 0, tables, lam, k)]

        drawn = sample_shots(draw_pass, shots, key)
        if drawn is None:
            raise ValidationError(f"cannot sample: the trace is {self.trace():.3g}, not 1")
        return drawn

    def expectation(self, observable: Any) -> float | complex:
        """Tr(H rho) for a Pauli sum H (PauliSum, label, list of (label, coeff) or a
        qiskit SparsePauliOp): one read of 2^N entries per distinct X/Y mask."""
        obs = PauliSum.parse(observable)
        if obs.num_qubits != self._n:
            raise ValidationError(f"observable acts on {obs.num_qubits} qubits but the state has {self._n}")
        k = np.arange(1 << self._n, dtype=np.int64)
        by_flip: dict[int, list[tuple[int, complex]]] = {}
        for label, coeff in obs.terms:
            xm, ym, zm = pauli_masks(label, range(self._n))
            by_flip.setdefault(xm | ym, []).append((ym | zm, coeff * 1j ** bin(ym).count("1")))
        total = 0j
        for flip, terms in by_flip.items():
            entries = self._entries(flip)
            for yz, weight in terms:
                parity = np.zeros_like(k)
                for q in range(self._n):
                    if (yz >> q) & 1:
                        parity ^= (k >> q) & 1
                total += weight * complex(np.sum(entries * (1 - 2 * parity)))
        return float(total.real) if obs.is_hermitian else complex(total)

    def fidelity(self, other: Any) -> float:
        """Fidelity with a pure state (a StateVector or 2^N amplitudes: ⟨psi|rho|psi⟩)
        or a mixed one (a DensityMatrix or a 2^N x 2^N array: Uhlmann's
        (Tr sqrt(sqrt(rho) sigma sqrt(rho)))^2, from dense matrices)."""
        if isinstance(other, StateVector):
            if other.num_qubits != self._n:
                raise ValidationError(f"states have {self._n} and {other.num_qubits} qubits")
            psi = other.to_numpy()
        elif isinstance(other, DensityMatrix):
            if other.num_qubits != self._n:
                raise ValidationError(f"states have {self._n} and {other.num_qubits} qubits")
            return _uhlmann(self.to_numpy(), other.to_numpy())
        else:
            arr = np.asarray(other)
            d = 1 << self._n
            if arr.shape == (d, d):
                return _uhlmann(self.to_numpy(), arr.astype(np.complex128))
            if arr.shape != (d,):
                raise ValidationError(
                    f"expected {d} amplitudes or a ({d}, {d}) matrix, got shape {arr.shape}"
                )
            psi = arr.astype(np.complex128)
        psi = psi / np.linalg.norm(psi)
        rho_psi = self.choi._compute(self.amplitudes @ psi)[0]
        return float(np.real(np.vdot(psi, rho_psi)))

    def partial_trace(self, qubits: Sequence[int] | int) -> DensityMatrix:
        """The density matrix of the other qubits: ``qubits`` traced out (the others
        keep their order, renumbered from 0)."""
        from dasq.engine.memory import persist

        traced = check_qubits(qubits, self._n, "qubits")
        if len(traced) == self._n:
            raise ValidationError(
                f"partial_trace over all {self._n} qubits leaves nothing; use trace() for the number"
            )
        n = self._n
        bits = list(range(2 * n - 1, -1, -1))  # the original bit of each axis
        y = self.choi.amplitudes.reshape((2,) * (2 * n))
        for q in traced:
            ket, bra = bits.index(q), bits.index(q + n)
            picks = []
            for b in (0, 1):
                index: list[Any] = [slice(None)] * len(bits)
                index[ket] = index[bra] = b
                picks.append(y[tuple(index)])
            y = picks[0] + picks[1]
            bits = [x for x in bits if x not in (q, q + n)]
        m = n - len(traced)
        L = min(self.chunk_qubits, 2 * m)
        vector = y.reshape(-1).rechunk(1 << L, method="tasks")
        c = self.choi
        options = c._options
        blocks = vector if options.lazy else persist(vector, options.client)
        smaller = StateVector(blocks, 2 * m, L, options=options, rng=c._rng)
        return DensityMatrix(smaller)


def _uhlmann(rho: np.ndarray, sigma: np.ndarray) -> float:
    def sqrt_psd(a: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh((a + a.conj().T) / 2)
        return (v * np.sqrt(np.clip(w, 0, None))) @ v.conj().T

    root = sqrt_psd(rho)
    w = np.linalg.eigvalsh(root @ sigma @ root)
    return float(np.sum(np.sqrt(np.clip(w, 0, None))) ** 2)


MAXIMALLY_MIXED = "maximally_mixed"


def initial_choi(
    initial: Any, num_qubits: int, chunk_qubits: int, dtype: str
) -> int | tuple[da.Array, tuple]:
    """The starting Choi vector of a density-matrix run: a basis index of the 2N-qubit
    vector (for None or a basis-state int), or (blocks, layout)."""
    from dasq.circuit import validation as v

    n, L = num_qubits, chunk_qubits
    if initial is None or v.is_int(initial):
        b = 0 if initial is None else v.check_basis(initial, n)
        return b | (b << n)
    import dask.array as da

    if isinstance(initial, DensityMatrix):
        if initial.num_qubits != n:
            raise ValidationError(f"initial state has {initial.num_qubits} qubits, the circuit {n}")
        c = initial.choi
        if c.chunk_qubits == L:
            return c.blocks.astype(dtype), c.layout
        return c.amplitudes.astype(dtype).rechunk(1 << L, method="tasks"), tuple(range(2 * n))
    d = 1 << n
    from_qiskit = qiskit_state(initial)
    if from_qiskit is not None:
        qubits = from_qiskit.shape[0].bit_length() - 1
        if qubits != n:
            kind = type(initial).__name__
            raise ValidationError(f"the initial {kind} has {qubits} qubits, the circuit {n}")
        initial = from_qiskit
    if isinstance(initial, str):
        if initial != MAXIMALLY_MIXED:
            raise ValidationError(f"initial={initial!r}: the named initial state is {MAXIMALLY_MIXED!r}")
        step = d + 1  # rho[i, i] sits at i (2^N + 1)
        blocks = da.map_blocks(
            _mixed_block, da.empty(d * d, chunks=1 << L, dtype=dtype), d=d, step=step, dtype=dtype
        )
        return blocks, tuple(range(2 * n))
    if isinstance(initial, StateVector):
        if initial.num_qubits != n:
            raise ValidationError(f"initial state has {initial.num_qubits} qubits, the circuit {n}")
        psi = initial.amplitudes.astype(dtype)
        return da.outer(psi.conj(), psi).reshape(-1).rechunk(1 << L, method="tasks"), tuple(range(2 * n))
    if isinstance(initial, (np.ndarray, list, tuple)):
        arr = np.asarray(initial)
        if not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"initial amplitudes must be numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.complex128)
        if not np.all(np.isfinite(arr)):
            raise ValidationError("the initial state contains NaN or infinity")
        if arr.shape == (d,):
            v.check_initial_amplitudes(True, float(np.linalg.norm(arr)))
            rho = np.outer(arr, arr.conj())
        elif arr.shape == (d, d):
            rho = arr
            if np.max(np.abs(rho - rho.conj().T)) > 1e-8 or abs(np.trace(rho) - 1) > v.NORM_ATOL:
                raise ValidationError("an initial density matrix must be Hermitian with trace 1")
        else:
            raise ValidationError(
                f"an initial state of {n} qubits is {d} amplitudes or a ({d}, {d}) density matrix, "
                f"got shape {arr.shape}"
            )
        vector = np.ascontiguousarray(rho.T).reshape(-1).astype(dtype)
        return da.from_array(vector, chunks=1 << L), tuple(range(2 * n))
    raise TypeError(
        "initial must be None, a basis-state int, 'maximally_mixed', amplitudes, a density matrix "
        "array, a StateVector or a DensityMatrix (dasq's or qiskit.quantum_info's), got "
        f"{type(initial).__name__}"
    )


def _mixed_block(block: np.ndarray, block_info: Any = None, *, d: int, step: int) -> np.ndarray:
    start = block_info[0]["array-location"][0][0]
    out = np.zeros(block.shape, dtype=block.dtype)
    first = (-start) % step
    out[first::step] = 1.0 / d
    return out
