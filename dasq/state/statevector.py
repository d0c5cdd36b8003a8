"""StateVector: a value holding computed blocks, their layout, and the calculations.

A state does not execute circuits: ``dasq.simulate`` (and ``apply``) hand the
blocks to the engine once and wrap what comes back. The blocks are persisted
(in memory, as futures on a client, or in a store), so any number of read-outs
never re-run the circuit. Read-outs reduce every block where it lives and read
straight through the layout; only ``amplitudes`` (logical order) pays to undo it.

A state of one block made in this process (engine/oneblock.py) is held as one numpy
array: its samples are drawn from it directly, and its ``blocks`` are a view of that
array made when first read. The graph modules (and dask.array) are imported by the
read-outs that build graphs, so a small ``dasq run`` imports neither.
"""

from __future__ import annotations

import html
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.utils import format_bytes

from dasq import _config
from dasq.backend.base import Backend
from dasq.backend.registry import get_backend
from dasq.circuit.circuit import Circuit
from dasq.circuit.validation import (
    check_client,
    check_index,
    check_readout_qubits,
    check_seed,
    check_shots,
    not_a_circuit,
)
from dasq.engine.draws import layout_tables, sample_shots, total_by_value
from dasq.engine.report import Report
from dasq.engine.run import RunOptions, evolve, project
from dasq.errors import StoreError, ValidationError
from dasq.plan.steps import PhysicalPlan
from dasq.state.observables import PauliSum
from dasq.storage import store as st
from dasq.storage.chunks import encode_crcs
from dasq.storage.location import check_creatable
from dasq.storage.manifest import Manifest

if TYPE_CHECKING:
    import dask.array as da

MAX_MARGINAL_QUBITS = 30


def labelled_counts(indices: np.ndarray, counts: np.ndarray, qubits: Sequence[int]) -> dict[str, int]:
    """Counts of basis-state indices as Qiskit-style labels over ``qubits`` (qubits[0] rightmost)."""
    outcomes = np.zeros(indices.shape, dtype=np.int64)
    for j, q in enumerate(qubits):
        outcomes |= ((indices >> q) & 1) << j
    values, totals = total_by_value(outcomes, counts)
    return {format(int(v), f"0{len(qubits)}b"): int(c) for v, c in zip(values, totals)}


def as_numpy_array(gather: Any, dtype: Any, copy: bool | None) -> np.ndarray:
    """numpy's ``__array__`` protocol for a state whose ``gather()`` makes a new array."""
    if copy is False:
        raise ValueError(
            "a dasq state is gathered into a new array on every read, so np.asarray(state, copy=False) "
            "cannot avoid a copy; leave copy at None"
        )
    out = gather()
    return out if dtype is None else out.astype(dtype, copy=False)


def qiskit_state(initial: Any) -> np.ndarray | None:
    """The amplitudes (1-D) of a ``qiskit.quantum_info.Statevector`` or the matrix (2-D)
    of a ``DensityMatrix``, else None; refuses subsystems that are not qubits.

    Qiskit numbers qubits as dasq does (qubit 0 the least significant bit), so its data
    is taken as it is. Qiskit is looked up only where it is already imported: no object
    of its classes can exist otherwise, and dasq runs without it."""
    qi = sys.modules.get("qiskit.quantum_info")
    if qi is None or not isinstance(initial, (qi.Statevector, qi.DensityMatrix)):
        return None
    dims = tuple(initial.dims())
    if any(d != 2 for d in dims):
        raise ValidationError(
            f"the initial {type(initial).__name__} has subsystems of dimensions {dims}; "
            "dasq simulates qubits (dimension 2)"
        )
    return np.asarray(initial.data)


class StateVector:
    """A pure state of ``num_qubits`` qubits held as blocks of 2^chunk_qubits amplitudes.

    Build one with ``dasq.simulate``. The bits of a block's index are the global
    ("prefix") qubits; the bits inside a block are local. ``plan`` is the physical
    plan that produced it, ``report`` what each step cost, ``measurements`` the
    (qubit, outcome) pairs of mid-circuit measurements, in order.
    """

    def __init__(
        self,
        blocks: da.Array | None,
        num_qubits: int,
        chunk_qubits: int,
        *,
        layout: Sequence[int] | None = None,
        options: RunOptions | None = None,
        rng: np.random.Generator | None = None,
        plan: PhysicalPlan | Callable[[], PhysicalPlan] | None = None,
        report: Report | None = None,
        measurements: Sequence[tuple[int, int]] = (),
        store: str | None = None,
        storage_fidelity: float = 1.0,
        held: np.ndarray | None = None,
    ) -> None:
        self._blocks = blocks
        self._held = held  # one block's amplitudes in logical order, or None (blocks: a view of it)
        self._n = num_qubits
        self._L = chunk_qubits
        self._layout = tuple(layout) if layout is not None else tuple(range(num_qubits))
        self._options = options if options is not None else RunOptions()
        self._rng = rng if rng is not None else np.random.default_rng()
        self._plan = plan
        self.report = report if report is not None else Report(num_qubits, chunk_qubits)
        self.measurements: list[tuple[int, int]] = list(measurements)
        self.store = store  # the zarr group holding the amplitudes, if stored
        self.storage_fidelity = storage_fidelity  # fidelity kept by lossy storage (1: lossless)
        self._logical: da.Array | None = None

    # ----------------------------------------------------------------- properties
    @property
    def plan(self) -> PhysicalPlan | None:
        """The physical plan that produced this state (a compiled small run plans it
        only when asked)."""
        if callable(self._plan):
            self._plan = self._plan()
        return self._plan

    @plan.setter
    def plan(self, plan: PhysicalPlan | None) -> None:
        self._plan = plan

    @property
    def num_qubits(self) -> int:
        """Number of qubits."""
        return self._n

    @property
    def chunk_qubits(self) -> int:
        """Local qubits per block: blocks hold 2^chunk_qubits amplitudes."""
        return self._L

    @property
    def dtype(self) -> np.dtype:
        """Complex dtype of the amplitudes (complex128 or complex64)."""
        return (self.blocks if self._held is None else self._held).dtype

    @property
    def backend(self) -> Backend:
        """The array backend that runs the blocks' kernels."""
        return get_backend(self._options.backend)

    @property
    def layout(self) -> tuple[int, ...]:
        """Bit position of each qubit in the stored blocks."""
        return self._layout

    @property
    def blocks(self) -> da.Array:
        """The stored blocks (physical order: qubit q at bit ``layout[q]``); a state held
        in one array gives a one-block view of it."""
        if self._blocks is None:
            from dasq.engine.layers import held_blocks

            self._blocks = held_blocks(self._held)
        return self._blocks

    @property
    def amplitudes(self) -> da.Array:
        """The 2^n amplitudes in logical (little-endian) order, lazily. A planned run may
        leave qubits at other positions; undoing that costs one relayout."""
        if self._layout == tuple(range(self._n)):
            return self.blocks
        if self._logical is None:
            from dasq.engine import readout
            from dasq.engine.route import resolve_relayout_method

            method = resolve_relayout_method(
                self._options.relayout_method, self._options.client, self.blocks.numblocks[0]
            )
            self._logical = readout.logical_order(self.blocks, self._L, self._layout, self.backend, method)
        return self._logical

    def __repr__(self) -> str:
        return (
            f"<dasq.StateVector {self._n} qubits, {self.dtype}, {1 << (self._n - self._L)} blocks "
            f"of 2^{self._L} amplitudes>"
        )

    def _repr_html_(self) -> str:
        return self._html("dasq.StateVector")

    def _html(self, title: str, note: str = "") -> str:
        """Qubits, dtype, blocks, layout, where the blocks live, what the plan cost."""
        where = f"stored in {html.escape(self.store)}" if self.store else "in memory"
        client = self._options.client
        if client is not None:
            link = getattr(client, "dashboard_link", None)
            dashboard = f", <a href='{html.escape(link)}'>dashboard</a>" if link else ""
            where = f"on a cluster ({len(client.nthreads())} workers{dashboard})"
        plan = "<br>"
        if self.plan is not None:
            s = self.plan.summary()
            plan = (
                f"<br>plan: {s['stages']} stages, {s['relayouts']} relayouts ({len(self.plan.steps)} steps); "
            )
        moved = self.report.amplitudes_moved
        return (
            f"<b>{title}</b>{note}: {self._n} qubits, {self.dtype}, {1 << (self._n - self._L)} blocks of "
            f"2<sup>{self._L}</sup> amplitudes, {where}<br>layout (position of each qubit): "
            f"{list(self._layout)}{plan}{moved} amplitudes moved between blocks"
        )

    # ----------------------------------------------------------------- evolution
    def apply(self, circuit: Circuit) -> StateVector:
        """A new state: this one with ``circuit`` applied (this state is unchanged)."""
        if not isinstance(circuit, Circuit):
            raise TypeError(not_a_circuit(circuit))
        if circuit.num_qubits != self._n:
            raise ValidationError(f"circuit has {circuit.num_qubits} qubits but the state has {self._n}")
        run = evolve(
            circuit.operations,
            circuit.global_phase,
            self._n,
            self._L,
            self.dtype.name,
            self._options,
            self._rng,
            blocks=self._blocks if self._held is None else None,
            layout=self._layout,
            held=self._held,
        )
        return StateVector(
            run.blocks,
            self._n,
            self._L,
            layout=run.layout,
            options=self._options,
            rng=self._rng,
            plan=run.plan,
            report=self.report.extended(tuple(run.records)),
            measurements=self.measurements + run.measurements,
            held=run.held,
        )

    @staticmethod
    def apply_each(states: Sequence[StateVector], circuit: Circuit) -> list[StateVector]:
        """Each of ``states`` with ``circuit`` applied, as ``apply`` gives it. States held
        in one array each on the CPU, small enough for the row engine (one cache tile),
        run as the rows of one array: one call per fused group for all of them, not a
        run each (a walk's branches that wait on the same gates, engine/rows.py). Their
        plan is then the row program's, and their reports gain no steps."""
        from dasq.engine.program import default_cache_qubits
        from dasq.engine.rows import row_program
        from dasq.engine.series import RowError

        if len(states) < 2 or not all(s._rows_with(states[0], circuit) for s in states):
            return [s.apply(circuit) for s in states]
        if states[0]._n > default_cache_qubits(states[0].dtype):
            return [s.apply(circuit) for s in states]
        try:
            program = row_program(circuit)
        except RowError:
            return [s.apply(circuit) for s in states]
        rows = program.apply(np.stack([s._held for s in states]), np.zeros((1, 0)))
        # each row its own array: a branch that lives on keeps no other's amplitudes
        return [s._derived(None, s.measurements, row.copy(), program.plan) for s, row in zip(states, rows)]

    def _rows_with(self, first: StateVector, circuit: Any) -> bool:
        """Whether this state can run ``circuit`` as a row beside ``first``: held, of its
        qubits and dtype, on the CPU in this process with no bar or lazy graph asked for
        (a circuit ``apply`` would refuse is left to it)."""
        options = self._options
        return (
            self._held is not None
            and isinstance(circuit, Circuit)
            and circuit.num_qubits == self._n == first._n
            and self.dtype == first.dtype
            and options.backend == "cpu"
            and not (options.progress or options.lazy)
            and options.client is None
        )

    def project(self, qubit: int, outcome: int, *, reset: bool = False) -> StateVector:
        """A new state: this one after measuring ``qubit`` with ``outcome`` (0 or 1),
        renormalised; with ``reset=True`` the qubit is then returned to |0>. Refuses
        an outcome of probability 0."""
        (q,) = check_readout_qubits([qubit], self._n)
        if outcome not in (0, 1):
            raise ValidationError(f"a measurement outcome is 0 or 1, got {outcome!r}")
        probs = self.probabilities([q])
        p = float(probs[outcome] / probs.sum())
        if p <= 0:
            raise ValidationError(f"qubit {q} has probability 0 of outcome {outcome}")
        return self.projected(q, outcome, p, reset=reset)

    def projected(self, qubit: int, outcome: int, probability: float, *, reset: bool = False) -> StateVector:
        """``project`` when the outcome's ``probability`` (> 0) is known already. A state
        held in one array is projected in it (a circuit's mid-circuit measurements of a
        small state cost microseconds, not a graph each)."""
        measurements = self.measurements + ([] if reset else [(qubit, outcome)])
        if self._held is not None:
            pairs = self._held.reshape(-1, 2, 1 << qubit)  # [higher bits, bit ``qubit``, lower bits]
            out = np.zeros_like(pairs)
            out[:, 0 if reset else outcome] = pairs[:, outcome] * (1 / np.sqrt(probability))
            return self._derived(None, measurements, held=out.reshape(-1))
        blocks = project(
            self.blocks, self._layout, self._L, qubit, outcome, probability, self._options, reset=reset
        )
        return self._derived(blocks, measurements)

    def projected_onto(self, fixed: Sequence[tuple[int, int]], probability: float) -> StateVector:
        """The state projected onto every (qubit, bit) of ``fixed`` at once, renormalised
        by their joint ``probability`` (> 0): one pass where ``projected`` per pair
        would make one each (a branch of shots fixes every bit its measurements read)."""
        bits: dict[int, int] = {}
        for q, b in fixed:
            if bits.setdefault(check_readout_qubits(q, self._n)[0], b) != b or b not in (0, 1):
                raise ValidationError(
                    f"cannot project qubit {q} onto {b!r}: the fixed bits are 0 or 1, one per qubit"
                )
        if self._held is None or len(fixed) < 2:
            state = self
            for i, (q, b) in enumerate(fixed):
                state = state.projected(q, b, probability if i == len(fixed) - 1 else 1.0)
            return state
        mask = sum(1 << q for q in bits)
        value = sum(b << q for q, b in bits.items())
        held = np.zeros_like(self._held)
        kept = (np.arange(self._held.size) & mask) == value
        held[kept] = self._held[kept] * (1 / np.sqrt(probability))
        return self._derived(None, self.measurements + list(fixed), held=held)

    def _derived(
        self,
        blocks: da.Array | None,
        measurements: list[tuple[int, int]],
        held: np.ndarray | None = None,
        plan: PhysicalPlan | None = None,
    ) -> StateVector:
        """This state's kind of state, with other amplitudes (and the plan that made them)."""
        return StateVector(
            blocks,
            self._n,
            self._L,
            layout=self._layout,
            options=self._options,
            rng=self._rng,
            plan=self.plan if plan is None else plan,
            report=self.report,
            measurements=measurements,
            held=held,
        )

    # ----------------------------------------------------------------- read-out
    def _compute(self, *things: Any) -> tuple:
        from dasq.engine.memory import compute

        with self.backend.kernel_threads():
            return compute(*things, client=self._options.client, blocks=self.blocks)

    def to_numpy(self, force: bool = False) -> np.ndarray:
        """All amplitudes in one numpy array; refuses above ``dasq.to-numpy-limit`` bytes
        (default a quarter of RAM) unless ``force=True``."""
        nbytes = self.dtype.itemsize << self._n
        if not force and nbytes > (limit := _config.to_numpy_limit()):
            raise ValidationError(
                f"the state is {format_bytes(nbytes)}, over the to_numpy limit of "
                f"{format_bytes(limit)}; pass force=True, or raise dask.config "
                "'dasq.to-numpy-limit'"
            )
        if self._held is not None:
            return self._held.copy()
        from dasq.engine import readout
        from dasq.engine.memory import runs_in_this_process

        if runs_in_this_process(self._options.client):  # one copy into one array
            return self._compute(readout.host_array(self.blocks, self._L, self._layout, self.backend))[0]
        return np.asarray(self.backend.to_host(self._compute(self.amplitudes)[0]))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(state)``: the 2^n amplitudes in one new numpy array, qubit 0 the
        least significant bit of the index (Qiskit's order too, so
        ``qiskit.quantum_info.Statevector(np.asarray(state))`` is the same state).

        It is ``to_numpy()``, size guard included: a state over ``dasq.to-numpy-limit``
        bytes (default a quarter of RAM) is refused, since numpy would gather it on this
        machine; call ``state.to_numpy(force=True)`` to gather it anyway. Each call makes
        a new array, so ``copy=False`` (numpy's "never copy") is refused."""
        return as_numpy_array(self.to_numpy, dtype, copy)

    def to_qiskit(self) -> Any:
        """This state as a ``qiskit.quantum_info.Statevector`` of ``num_qubits`` qubits
        (the amplitudes gathered as by ``to_numpy()``, with its size guard)."""
        from qiskit.quantum_info import Statevector

        return Statevector(self.to_numpy(), dims=(2,) * self._n)

    def amplitude(self, index: int) -> complex:
        """The amplitude of basis state ``index`` (qubit 0 is bit 0)."""
        i = check_index(index, self._n)
        if self._held is not None:
            return complex(self._held[i])
        from dasq.engine import readout

        stored = sum(((i >> q) & 1) << p for q, p in enumerate(self._layout))
        return complex(self._compute(readout.entry(self.blocks, stored))[0])

    def norm(self) -> float:
        """The 2-norm sqrt(sum |a_i|^2) (1 for a normalised state)."""
        if self._held is not None:
            return float(np.sqrt(self.backend.norm2(self._held)))
        from dasq.engine import readout

        return float(np.sqrt(complex(self._compute(readout.norm2(self.blocks, self.backend))[0]).real))

    def probabilities(self, qubits: Sequence[int] | None = None) -> np.ndarray:
        """Marginal probabilities over ``qubits``; bit j of the index is ``qubits[j]``.

        In the state's real precision (float32 for complex64, as qsim and Cirq give;
        float64 for complex128), so the full vector costs half the state, not all of
        it; marginals over few qubits are summed in float64 first."""
        qs = check_readout_qubits(qubits, self._n)
        if len(qs) > MAX_MARGINAL_QUBITS:
            raise ValidationError(
                f"a marginal over {len(qs)} qubits has 2^{len(qs)} entries; at most "
                f"{MAX_MARGINAL_QUBITS} qubits are allowed (use sample() instead)"
            )
        positions = tuple(self._layout[q] for q in qs)
        real = np.finfo(self.dtype).dtype
        if self._held is not None:  # as the graph's read-out sums one block, with no graph
            if positions == tuple(range(self._n)):  # every qubit in order: |a|^2 as it lies
                return (self._held.real**2 + self._held.imag**2).astype(real, copy=False)
            if 1 << len(qs) < _config.CHAIN_MARGINAL_FROM:
                return self.backend.marginal(self._held, self._n, 0, positions).astype(real)
            out = np.zeros(1 << len(qs), dtype=real)
            self.backend.add_marginal(out, self._held, self._n, 0, positions)
            return out
        from dasq.engine import readout

        return self._compute(readout.marginal(self.blocks, self._L, positions, self.backend, real))[0]

    def sample(
        self, shots: int, qubits: Sequence[int] | None = None, seed: int | None = None
    ) -> dict[str, int]:
        """Counts of ``shots`` measurements of ``qubits`` (all by default), Qiskit-style
        labels with ``qubits[0]`` rightmost. A ``seed`` gives the same samples whatever
        the chunking, layout, executor or cluster (see ``sample_counts``)."""
        qs = check_readout_qubits(qubits, self._n)
        indices, counts = self.sample_counts(shots, seed)
        return labelled_counts(indices, counts, qs)

    def sample_counts(self, shots: int, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(basis-state indices ascending, how many of ``shots`` drew each), drawn from
        |amplitude|^2 in one pass (a few above 5*10^8 shots: time does not grow with
        the shots), each block drawing where it lives; memory grows with the distinct
        outcomes, not the shots.

        Every amplitude draws a Poisson count keyed by its logical index and the seed,
        and the surplus draws are removed in logical order, so a seed fixes the
        samples for any chunking, layout, executor and block order (up to amplitudes
        that differ by rounding between two runs)."""
        shots = check_shots(shots)
        key = int(np.random.default_rng(check_seed(seed)).integers(0, 2**62))
        drawn = sample_shots(self._draw_pass, shots, key)
        if drawn is None:
            raise ValidationError(f"cannot sample: the state's norm is {self.norm():.3g}, not 1")
        return drawn

    def _draw_pass(self, lam: float, key: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """One pass of keyed Poisson draws over every block, where each block lives."""
        if self._held is not None:  # one array here: the keys a graph's block would draw with
            tables, parts = layout_tables(self._layout, self._n)
            return [self.backend.poisson_draws(self._held, parts[0], tables, lam, key)]
        from dasq.engine import readout

        return self._compute(
            *readout.poisson_draws(self.blocks, self._L, self._layout, lam, key, self.backend)
        )

    def expectation(self, observable: Any) -> float | complex:
        """⟨psi|H|psi⟩ for a Pauli sum H (PauliSum, label, list of (label, coeff) or a
        qiskit SparsePauliOp). Real (float) when all coefficients are real."""
        obs = PauliSum.parse(observable)
        if obs.num_qubits != self._n:
            raise ValidationError(f"observable acts on {obs.num_qubits} qubits but the state has {self._n}")
        if self._held is not None:
            from dasq.engine.rows import PauliTerms, expectations

            total = complex(expectations(self._held[None], PauliTerms.of(obs))[0])
            return float(total.real) if obs.is_hermitian else total
        from dasq.engine import readout

        expectation = readout.pauli_sum_expectation(
            self.blocks, self._L, self._layout, obs.terms, self.backend
        )
        (total,) = self._compute(expectation)
        total = complex(total)
        return float(total.real) if obs.is_hermitian else complex(total)

    def inner(self, other: StateVector) -> complex:
        """⟨self|other⟩."""
        if not isinstance(other, StateVector):
            raise TypeError(f"expected a dasq.StateVector, got {type(other).__name__}")
        if other.num_qubits != self._n:
            raise ValidationError(f"states have {self._n} and {other.num_qubits} qubits")
        from dasq.engine import layers, readout

        if other.layout == self._layout and other.blocks.chunks == self.blocks.chunks:
            x, y = self.blocks, other.blocks
        else:
            x, y = self.amplitudes, other.amplitudes
            if y.chunks != x.chunks:
                y = y.rechunk(x.chunks, method="tasks")
        y = layers.on_backend(y, self.backend)  # a GPU state against a CPU one, say
        return complex(self._compute(readout.vdot(x, y, self.backend))[0])

    def fidelity(self, other: StateVector) -> float:
        """|⟨self|other⟩|^2 / (⟨self|self⟩⟨other|other⟩)."""
        overlap = self.inner(other)
        return float(abs(overlap) ** 2 / (self.norm() ** 2 * other.norm() ** 2))

    # ----------------------------------------------------------------- storage
    def to_zarr(self, path: str | os.PathLike[str]) -> None:
        """Save the amplitudes (in their stored layout) as a complete dasq store at
        ``path``; the store appears whole or not at all."""
        self._save(path, density_qubits=0)

    def _save(self, path: str | os.PathLike[str], density_qubits: int) -> None:
        """``to_zarr``, the manifest saying whether this is the Choi vector of a density
        matrix of ``density_qubits`` qubits (``DensityMatrix.to_zarr``) or a state (0)."""
        target = st.new_store_path(path)
        check_creatable(target)  # before the free space, which an unwritable file system reports as 0
        dtype = self.dtype.name
        st.check_disk_space(target, st.disk_needed(self._n, dtype, self._L) // 2)
        manifest = Manifest(
            num_qubits=self._n,
            dtype=dtype,
            chunk_qubits=self._L,
            storage_qubits=self._L,
            layout=list(self._layout),
            circuit_hash=None,
            stages_total=0,
            codec=st.Codec().as_dict(),
            density_qubits=density_qubits,
        )

        from dasq.engine import stream

        def build(staging: st.StoreName) -> None:
            manifest.array_metadata = st.create_arrays(staging, self._n, dtype, self._L, st.Codec())
            (crcs,) = self._compute(stream.save_blocks(self.blocks, staging, manifest, self.backend))
            st.sync_to_disk(staging, (st.ARRAYS[0],))
            manifest.current = st.ARRAYS[0]
            manifest.chunk_crc32c = encode_crcs(crcs)
            manifest.write(staging)

        st.create_store(target, build).release()

    @classmethod
    def from_zarr(cls, path: str | os.PathLike[str], *, client: Any = None) -> StateVector:
        """The state in a dasq store (saved, or a completed run), read lazily block by block."""
        return cls._opened(path, client, density=False)

    @classmethod
    def _opened(cls, path: str | os.PathLike[str], client: Any, density: bool) -> StateVector:
        """``from_zarr`` of a store of a state (``density`` False) or of a density
        matrix's Choi vector (True: ``DensityMatrix.from_zarr``); the other is refused."""
        client = check_client(client)
        where = st.location(path)  # a path, or an fsspec URL
        manifest = st.open_store(where)
        if bool(manifest.density_qubits) != density:
            held, opener = (
                (f"a density matrix of {manifest.density_qubits} qubits", "dasq.DensityMatrix.from_zarr")
                if manifest.density_qubits
                else (f"a state vector of {manifest.num_qubits} qubits", "dasq.StateVector.from_zarr")
            )
            raise StoreError(f"{where} holds {held}: open it with {opener}({str(where)!r})")
        if not manifest.complete:
            raise StoreError(
                f"the run in {where} is incomplete ({manifest.stages_done}/{manifest.stages_total} stages); "
                f"finish it with dasq.resume({str(where)!r}) or `dasq resume {where}`"
            )
        from dasq.engine import stream

        options = RunOptions(client=client)
        blocks = stream.stored_blocks(where, manifest, get_backend(options.backend))
        return cls(
            blocks,
            manifest.num_qubits,
            manifest.chunk_qubits,
            layout=manifest.layout,
            options=options,
            store=str(where),
            storage_fidelity=manifest.fidelity,
        )
