"""StateVector: amplitudes as a chunked Dask array, and the calculations on it."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from functools import partial
from typing import Any

import dask
import dask.array as da
import numpy as np

from dasq import _config
from dasq.circuit.circuit import Circuit
from dasq.circuit.operations import Barrier, Diagonal, Measure, PauliString, Reset
from dasq.kernels import cpu
from dasq.kernels.stage import DEFAULT_CACHE_QUBITS
from dasq.lower.graph import basis_state
from dasq.lower.operations import lower_operation
from dasq.lower.report import OperationRecord, Report, Traffic
from dasq.lower.staged import basis_state_in_layout, lower_stage, physical_index, to_logical
from dasq.plan.fusion import DEFAULT_FUSION_SIZE
from dasq.plan.plan import Collapse, Plan, make_plan
from dasq.plan.stages import needs_local
from dasq.state.observables import PauliSum

MAX_MARGINAL_QUBITS = 30
METHODS = ("auto", "planned", "per-operation")


class StateVector:
    """A pure state of ``num_qubits`` qubits held as blocks of 2^chunk_qubits amplitudes.

    Build one with :func:`dasq.simulate`. The bits of a block's index are the global
    ("prefix") qubits chunk_qubits..num_qubits-1; the bits inside a block are local.
    ``report`` records how every operation was lowered and what it moved.
    ``measurements`` lists (qubit, outcome) of mid-circuit measurements, in order.
    """

    def __init__(
        self,
        amplitudes: da.Array | None,
        num_qubits: int,
        chunk_qubits: int,
        *,
        layout: Sequence[int] | None = None,
        basis: int = 0,
        report: Report | None = None,
        client: Any = None,
        seed: int | np.random.Generator | None = None,
        measurements: Sequence[tuple[int, int]] = (),
        progress: bool = False,
        dtype: str = "complex128",
        method: str = "auto",
        fusion_size: int = DEFAULT_FUSION_SIZE,
        cache_qubits: int = DEFAULT_CACHE_QUBITS,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self._x = amplitudes  # stored (physical) order; None: basis state |basis>, not laid out yet
        self._dtype_name = np.dtype(amplitudes.dtype if amplitudes is not None else dtype).name
        self._basis = basis
        self._n = num_qubits
        self._L = chunk_qubits
        self._layout = tuple(layout) if layout is not None else tuple(range(num_qubits))
        self._logical: da.Array | None = None
        self.report = report if report is not None else Report(num_qubits, chunk_qubits)
        self.plan: Plan | None = None
        self._client = client
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.measurements: list[tuple[int, int]] = list(measurements)
        self._progress = progress
        self._method = method
        self._fusion_size = fusion_size
        self._cache_qubits = cache_qubits
        self.store: str | None = None  # the zarr group holding the amplitudes, if stored
        self.storage_fidelity = 1.0  # fidelity kept by lossy storage (1: lossless)

    # ----------------------------------------------------------------- properties
    @property
    def num_qubits(self) -> int:
        return self._n

    @property
    def chunk_qubits(self) -> int:
        return self._L

    @property
    def dtype(self) -> np.dtype:
        return self._stored().dtype

    @property
    def layout(self) -> tuple[int, ...]:
        """Bit position of each qubit in the stored array (identity after per-operation runs)."""
        return self._layout

    @property
    def amplitudes(self) -> da.Array:
        """The 2^n amplitudes in logical (little-endian) order, lazily. A planned run may
        leave qubits at other positions; undoing that costs one relayout, done once."""
        x = self._stored()
        if self._layout == tuple(range(self._n)):
            return x
        if self._logical is None:
            self._logical = to_logical(x, self._L, self._layout).x
        return self._logical

    def _stored(self) -> da.Array:
        if self._x is None:
            self._x = basis_state(self._n, self._L, self._basis, self._dtype_name)
        return self._x

    def _set(self, x: da.Array, layout: Sequence[int] | None = None) -> None:
        self._x = x
        self._logical = None
        if layout is not None:
            self._layout = tuple(layout)

    def __repr__(self) -> str:
        return (
            f"<dasq.StateVector {self._n} qubits, {self.dtype}, {1 << (self._n - self._L)} blocks "
            f"of 2^{self._L} amplitudes>"
        )

    def _repr_html_(self) -> str:
        t = self.report.total
        return (
            f"<b>dasq.StateVector</b>: {self._n} qubits, {self.dtype}, {1 << (self._n - self._L)} blocks "
            f"of 2<sup>{self._L}</sup> amplitudes; {len(self.report.records)} operations lowered, "
            f"{t.amplitudes_moved} amplitudes moved between blocks<br>{self._stored()._repr_html_()}"
        )

    # ----------------------------------------------------------------- execution
    def _compute(self, *collections: Any) -> tuple:
        kwargs = {"scheduler": self._client} if self._client is not None else {}
        if self._progress and self._client is None:
            from dask.diagnostics import ProgressBar

            with ProgressBar():
                return dask.compute(*collections, **kwargs)
        return dask.compute(*collections, **kwargs)

    def _persist(self) -> None:
        kwargs = {"scheduler": self._client} if self._client is not None else {}
        (x,) = dask.persist(self._stored(), **kwargs)
        self._set(x)

    def apply(self, circuit: Circuit) -> StateVector:
        """A new state: this one with ``circuit`` applied (this state is unchanged)."""
        if not isinstance(circuit, Circuit):
            raise TypeError(f"expected a dasq.Circuit, got {type(circuit).__name__}")
        if circuit.num_qubits != self._n:
            raise ValueError(f"circuit has {circuit.num_qubits} qubits but the state has {self._n}")
        new = StateVector(
            self._x,
            self._n,
            self._L,
            layout=self._layout,
            basis=self._basis,
            report=Report(self._n, self._L, list(self.report.records)),
            client=self._client,
            seed=self._rng,
            measurements=self.measurements,
            progress=self._progress,
            method=self._method,
            fusion_size=self._fusion_size,
            cache_qubits=self._cache_qubits,
            dtype=self._dtype_name,
        )
        if new._use_planner(circuit):
            new._run_plan(circuit)
        else:
            new._run_per_operation(circuit)
        if circuit.global_phase:
            new._set(new._stored() * complex(np.exp(1j * circuit.global_phase)))
        return new

    def _use_planner(self, circuit: Circuit) -> bool:
        if self._method != "auto":
            return self._method == "planned"
        return all(len(needs_local(op)) <= self._L for op in circuit)

    def _run_per_operation(self, circuit: Circuit) -> None:
        """The reference path: every operation lowered on its own, logical layout."""
        if self._layout != tuple(range(self._n)):
            self._set(self.amplitudes, tuple(range(self._n)))
        for op in circuit:
            self._apply_operation(op)

    def _run_plan(self, circuit: Circuit) -> None:
        """The fast path: stages of fused groups, one fused relayout between stages."""
        fresh = self._x is None
        plan = make_plan(
            list(circuit),
            self._n,
            self._L,
            initial_layout=None if fresh else self._layout,
            fusion_size=self._fusion_size,
        )
        self.plan = plan
        if fresh:
            self._set(
                basis_state_in_layout(self._n, self._L, self._basis, plan.initial_layout, self._dtype_name),
                plan.initial_layout,
            )
        stage_number = 0
        for step in plan.steps:
            index = len(self.report.records)
            if isinstance(step, Collapse):
                self._collapse_step(step.op, index, step.qubit)
                continue
            lowered = lower_stage(self._stored(), step, self._L, self._cache_qubits)
            self._set(lowered.x)
            name = f"stage {stage_number}: {len(step.ops)} ops in {len(step.groups)} groups"
            self.report.records.append(OperationRecord(index, name, lowered.path, lowered.traffic))
            stage_number += 1
        self._layout = plan.final_layout
        self._logical = None

    def _apply_operation(self, op: Any) -> None:
        index = len(self.report.records)
        if isinstance(op, Barrier):
            return
        if isinstance(op, (Measure, Reset)):
            self._collapse_step(op, index, op.targets[0])
            return
        lowered = lower_operation(self._stored(), op, self._n, self._L)
        self._set(lowered.x)
        self.report.records.append(OperationRecord(index, op.describe(), lowered.path, lowered.traffic))

    def _collapse_step(self, op: Measure | Reset, index: int, qubit: int) -> None:
        """Measure (or reset) ``qubit``, stored at position ``op.targets[0]``."""
        position = op.targets[0]
        outcome, traffic = self._collapse(position)
        if isinstance(op, Reset) and outcome:
            flip = lower_operation(
                self._stored(), PauliString((position,), name="x", label="X"), self._n, self._L
            )
            self._set(flip.x)
            traffic += flip.traffic
        elif isinstance(op, Measure):
            self.measurements.append((qubit, outcome))
        self.report.records.append(OperationRecord(index, f"{op.name} {qubit}", op.name, traffic))

    def _collapse(self, position: int) -> tuple[int, Traffic]:
        """Measure the qubit at ``position``: draw a seeded outcome and project."""
        self._persist()
        probs = self._marginal((position,))
        total = probs.sum()
        outcome = int(self._rng.random() * total < probs[1])
        scale = np.sqrt(total / probs[outcome])
        values = np.array([scale, 0.0] if outcome == 0 else [0.0, scale], dtype=complex)
        proj = Diagonal((position,), name="collapse", values=values)  # a scaled projector
        lowered = lower_operation(self._stored(), proj, self._n, self._L)
        self._set(lowered.x)
        return outcome, lowered.traffic

    # ----------------------------------------------------------------- read-out
    def to_numpy(self, force: bool = False) -> np.ndarray:
        """All amplitudes in one numpy array; refuses above ``dasq.to-numpy-limit`` bytes
        (default a quarter of RAM) unless ``force=True``."""
        limit = _config.to_numpy_limit()
        x = self.amplitudes
        if x.nbytes > limit and not force:
            raise ValueError(
                f"the state is {x.nbytes / 2**30:.3g} GiB, over the to_numpy limit of "
                f"{limit / 2**30:.3g} GiB; pass force=True, or raise dask.config "
                "'dasq.to-numpy-limit'"
            )
        return self._compute(x)[0]

    def amplitude(self, index: int) -> complex:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"index must be an int, got {index!r}")
        if not 0 <= index < (1 << self._n):
            raise ValueError(f"index {index} out of range 0..{(1 << self._n) - 1}")
        stored = physical_index(int(index), self._layout)
        return complex(self._compute(self._stored()[stored])[0])

    def norm(self) -> float:
        """The 2-norm sqrt(sum |a_i|^2) (1 for a normalised state)."""
        return float(np.sqrt(self._compute(_abs2(self._stored()).sum())[0]))

    def _check_qubits(self, qubits: Sequence[int] | None) -> tuple[int, ...]:
        if qubits is None:
            return tuple(range(self._n))
        if isinstance(qubits, numbers.Integral):
            qubits = (qubits,)
        out = tuple(qubits)
        for q in out:
            if isinstance(q, bool) or not isinstance(q, numbers.Integral):
                raise TypeError(f"qubits must be ints, got {q!r}")
            if not 0 <= q < self._n:
                raise ValueError(f"qubit {q} out of range 0..{self._n - 1}")
        if len(set(out)) != len(out):
            raise ValueError(f"repeated qubit in {list(out)}")
        return out

    def probabilities(self, qubits: Sequence[int] | None = None) -> np.ndarray:
        """Marginal probabilities over ``qubits``; bit j of the index is ``qubits[j]``."""
        qs = self._check_qubits(qubits)
        if len(qs) > MAX_MARGINAL_QUBITS:
            raise ValueError(
                f"a marginal over {len(qs)} qubits has 2^{len(qs)} entries; at most "
                f"{MAX_MARGINAL_QUBITS} qubits are allowed (use sample() instead)"
            )
        return self._marginal(tuple(self._layout[q] for q in qs))

    def _marginal(self, positions: tuple[int, ...]) -> np.ndarray:
        """Probabilities over stored bit ``positions`` (bit j of the index -> positions[j])."""
        x = self._stored()
        width = 1 << len(positions)
        nb = x.numblocks[0]
        parts = x.map_blocks(
            partial(_marginal_block, L=self._L, qubits=positions),
            chunks=((width,) * nb,),
            dtype=np.float64,
            meta=np.empty(0, np.float64),
        )
        return self._compute(parts.reshape(nb, width).sum(axis=0))[0]

    def sample(
        self, shots: int, qubits: Sequence[int] | None = None, seed: int | None = None
    ) -> dict[str, int]:
        """Counts of ``shots`` measurements of ``qubits`` (all by default), Qiskit-style
        labels with ``qubits[0]`` rightmost; reproducible for a given ``seed``.

        Two levels, so no machine ever holds all probabilities: shots are split over
        blocks by their weights, then each block draws its share where it lives.
        """
        if isinstance(shots, bool) or not isinstance(shots, numbers.Integral) or shots < 0:
            raise ValueError(f"shots must be a non-negative int, got {shots!r}")
        qs = self._check_qubits(qubits)
        rng = np.random.default_rng(seed)
        x = self._stored()
        nb = x.numblocks[0]
        weights = self._compute(
            x.map_blocks(_block_weight, chunks=((1,) * nb,), dtype=np.float64, meta=np.empty(0, np.float64))
        )[0]
        per_block = rng.multinomial(int(shots), weights / weights.sum())
        seeds = rng.integers(0, 2**63, size=nb)
        blocks = [b for b in range(nb) if per_block[b]]
        draws = self._compute(
            *[dask.delayed(cpu.sample_indices)(x.blocks[b], int(per_block[b]), int(seeds[b])) for b in blocks]
        )
        if not blocks:
            return {}
        indices = np.concatenate([d + (b << self._L) for b, d in zip(blocks, draws)])
        outcomes = np.zeros(indices.shape, dtype=np.int64)
        for j, q in enumerate(qs):
            outcomes |= ((indices >> self._layout[q]) & 1) << j
        values, counts = np.unique(outcomes, return_counts=True)
        width = len(qs)
        return {format(int(v), f"0{width}b"): int(c) for v, c in zip(values, counts)}

    def expectation(self, observable: Any) -> float | complex:
        """<psi|H|psi> for a Pauli sum H (PauliSum, label, list of (label, coeff) or a
        qiskit SparsePauliOp). Real (float) when all coefficients are real."""
        obs = PauliSum.parse(observable)
        if obs.num_qubits != self._n:
            raise ValueError(f"observable acts on {obs.num_qubits} qubits but the state has {self._n}")
        x = self._stored()
        targets = self._layout  # label character for qubit q acts on its stored position
        terms = []
        for label, _ in obs:
            applied = lower_operation(x, PauliString(targets, label=label), self._n, self._L)
            terms.append(_vdot(x, applied.x))
        values = self._compute(*terms)
        total = sum(c * v for (_, c), v in zip(obs, values))
        return float(total.real) if obs.is_hermitian else complex(total)

    def inner(self, other: StateVector) -> complex:
        """<self|other>."""
        if not isinstance(other, StateVector):
            raise TypeError(f"expected a dasq.StateVector, got {type(other).__name__}")
        if other.num_qubits != self._n:
            raise ValueError(f"states have {self._n} and {other.num_qubits} qubits")
        x, y = self.amplitudes, other.amplitudes
        if y.chunks != x.chunks:
            y = y.rechunk(x.chunks, method="tasks")
        return complex(self._compute(_vdot(x, y))[0])

    def fidelity(self, other: StateVector) -> float:
        """|<self|other>|^2 / (<self|self><other|other>)."""
        overlap = self.inner(other)
        return float(abs(overlap) ** 2 / (self.norm() ** 2 * other.norm() ** 2))

    # ----------------------------------------------------------------- storage
    def to_zarr(self, path: str) -> None:
        """Save the amplitudes (in their stored layout) as a dasq zarr store at ``path``."""
        from dasq.storage.run import save_state

        save_state(self, path)

    @classmethod
    def from_zarr(cls, path: str, *, client: Any = None) -> StateVector:
        """The state in a dasq zarr store (saved or a completed run), read lazily."""
        from dasq.storage.run import open_state

        return open_state(path, client=client)


def _abs2(x: da.Array) -> da.Array:
    return x.real**2 + x.imag**2


def _vdot(x: da.Array, y: da.Array) -> da.Array:
    return (x.conj() * y).sum()


def _marginal_block(
    block: np.ndarray, block_id: tuple[int] = (0,), *, L: int, qubits: tuple[int, ...]
) -> np.ndarray:
    return cpu.marginal(block, L=L, block_index=block_id[0], qubits=qubits)


def _block_weight(block: np.ndarray) -> np.ndarray:
    return np.array([float(np.vdot(block, block).real)])
