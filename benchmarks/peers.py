"""How each contender runs a benchmark circuit, for the same work at the same threads.

Every contender is given the circuit once, converted outside the timing to its own
native gates where it has them (controlled phases, swaps, CNOTs, Hadamards, Z
rotations) and to dense matrices only where the circuit has them (``u``, quantum
volume's two-qubit unitaries). The timed part builds the state, runs the gates and
returns the final state as a numpy array the contender's own way:

- dasq: ``dasq.simulate`` then ``State.to_numpy``, on at most ``threads`` Dask threads;
- Aer: ``AerSimulator.run`` with ``save_statevector`` on the original Qiskit circuit;
- qsim: ``QSimSimulator.simulate_into_1d_array`` (qsim's own buffer; not
  ``simulate(...).final_state_vector``, which wraps, copies and renormalises it);
- qulacs: ``QuantumCircuit.update_quantum_state`` (its ``QuantumCircuitOptimizer``
  applied inside the timing when a fusion size is asked for) then ``get_vector``;
- lightning.qubit: PennyLane Lightning's C++ state vector (``StateVectorC64/C128``),
  its named gate methods and ``getState``: the calls PennyLane's device makes, without
  PennyLane's tape processing.

Qubit q of dasq and Qiskit is qubit q of qulacs (both little-endian) and wire
``n - 1 - q`` of Cirq and Lightning (big-endian), so every state comes back in one
index order.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PEERS = ("aer", "qsim", "qulacs", "lightning")
SINGLE_ONLY = frozenset({"qsim"})  # qsimcirq simulates in complex64 only
DOUBLE_ONLY = frozenset({"qulacs"})  # the qulacs wheel is built in complex128 only


def precisions(peer: str) -> tuple[str, ...]:
    """The dtypes a peer can run."""
    if peer in SINGLE_ONLY:
        return ("complex64",)
    if peer in DOUBLE_ONLY:
        return ("complex128",)
    return ("complex64", "complex128")


@dataclass(frozen=True)
class Timed:
    """Seconds of one timed run and the final state it returned."""

    seconds: float
    state: np.ndarray


@dataclass(frozen=True)
class NativeGate:
    """One gate of a dasq circuit in a form every peer can name: ``kind`` is one of
    h, x, cx, cp, swap, rz (with ``angle`` for cp and rz) or matrix (``matrix``
    little-endian over ``qubits``). ``qubits`` are (control, target) for cx and cp."""

    kind: str
    qubits: tuple[int, ...]
    angle: float = 0.0
    matrix: np.ndarray | None = None


def native_gates(circuit) -> list[NativeGate]:
    """A dasq circuit as gates the peers have natively; dense only where dasq's
    record is a general unitary (``u``, ``unitary``) or a gate with no native form."""
    from dasq.engine.program import group_matrix
    from dasq.plan.fusion import Group

    out = []
    for op in circuit:
        if op.name in ("barrier", "measure"):
            continue
        name, targets, controls = op.name, tuple(op.targets), tuple(op.controls)
        if name in ("h", "x") and not controls:
            out.append(NativeGate(name, targets))
        elif name == "cx" and len(controls) == 1 and tuple(op.control_states) == (1,):
            out.append(NativeGate("cx", controls + targets))
        elif name == "cp" and len(controls) == 1 and tuple(op.control_states) == (1,):
            out.append(NativeGate("cp", controls + targets, float(op.params[0])))
        elif name == "swap" and not controls:
            out.append(NativeGate("swap", targets))
        elif name == "rz" and not controls:
            out.append(NativeGate("rz", targets, float(op.params[0])))
        else:
            qubits = targets + controls
            matrix = group_matrix(Group(qubits, (op,)), circuit.num_qubits, 0)
            out.append(NativeGate("matrix", qubits, matrix=np.ascontiguousarray(matrix)))
    return out


# --------------------------------------------------------------------- conversions
def to_cirq(circuit):
    """A cirq.Circuit with cirq's native gates (qsim has kernels for each)."""
    import cirq

    n = circuit.num_qubits
    line = cirq.LineQubit.range(n)

    def wire(q: int):
        return line[n - 1 - q]

    ops = []
    for g in native_gates(circuit):
        qs = [wire(q) for q in g.qubits]
        if g.kind == "h":
            ops.append(cirq.H(*qs))
        elif g.kind == "x":
            ops.append(cirq.X(*qs))
        elif g.kind == "cx":
            ops.append(cirq.CNOT(*qs))
        elif g.kind == "cp":
            ops.append(cirq.CZPowGate(exponent=g.angle / np.pi)(*qs))
        elif g.kind == "swap":
            ops.append(cirq.SWAP(*qs))
        elif g.kind == "rz":
            ops.append(cirq.rz(g.angle)(*qs))
        else:  # cirq's matrix index is big-endian over the listed qubits: list them reversed
            ops.append(cirq.MatrixGate(g.matrix).on(*reversed(qs)))
    return cirq.Circuit(ops)


def to_qulacs(circuit):
    """A qulacs.QuantumCircuit with qulacs's native gates."""
    import qulacs
    import qulacs.gate as gate

    qc = qulacs.QuantumCircuit(circuit.num_qubits)
    for g in native_gates(circuit):
        if g.kind == "h":
            qc.add_gate(gate.H(*g.qubits))
        elif g.kind == "x":
            qc.add_gate(gate.X(*g.qubits))
        elif g.kind == "cx":
            qc.add_gate(gate.CNOT(*g.qubits))
        elif g.kind == "cp":  # qulacs has no named controlled phase: a controlled 1-qubit diagonal
            control, target = g.qubits
            cp = gate.DenseMatrix(target, np.diag([1.0, np.exp(1j * g.angle)]))
            cp.add_control_qubit(control, 1)
            qc.add_gate(cp)
        elif g.kind == "swap":
            qc.add_gate(gate.SWAP(*g.qubits))
        elif g.kind == "rz":  # qulacs rotates by exp(+i angle/2 Z): the opposite sign of Qiskit's
            qc.add_gate(gate.RZ(g.qubits[0], -g.angle))
        else:  # qulacs's matrix index is little-endian over the listed qubits, as dasq's
            qc.add_gate(gate.DenseMatrix(list(g.qubits), g.matrix))
    return qc


LIGHTNING_NAMES = {
    "h": "Hadamard",
    "x": "PauliX",
    "cx": "CNOT",
    "cp": "ControlledPhaseShift",
    "swap": "SWAP",
    "rz": "RZ",
}


def to_lightning(circuit, dtype: str) -> list[Callable]:
    """Calls on a Lightning state vector, one per gate, with their wires and matrices
    prepared (matrices in the state's precision, as Lightning's device casts them)."""
    n = circuit.num_qubits
    calls = []
    for g in native_gates(circuit):
        wires = [n - 1 - q for q in g.qubits]
        if g.kind == "matrix":  # big-endian over the listed wires: list them reversed
            m = np.ascontiguousarray(g.matrix, dtype=dtype)
            calls.append(lambda sv, m=m, w=wires[::-1]: sv.applyMatrix(m, w, False))
        else:
            method, params = LIGHTNING_NAMES[g.kind], [g.angle] if g.kind in ("cp", "rz") else []
            calls.append(lambda sv, f=method, w=wires, p=params: getattr(sv, f)(w, False, p))
    return calls


# --------------------------------------------------------------------- timed runs
_FRESH = itertools.count()


def run_dasq(qc, dtype: str, threads: int, fusion: int | None, fresh: bool = False) -> Timed:
    """``fresh``: a circuit dasq has not planned in this process, as a new circuit is (an
    identity gate named for the call added: its plan cache finds circuits by their
    fingerprint); else the same circuit again, its plan found in the cache after the
    untimed first run."""
    import dask

    import dasq

    c = dasq.Circuit.from_qiskit(qc)
    if fresh:
        c.unitary(np.eye(2), [0], name=f"fresh{next(_FRESH)}")
    with dask.config.set(num_workers=threads):
        t = time.perf_counter()
        state = dasq.simulate(c, dtype=dtype, fusion_size=fusion)
        out = state.to_numpy(force=True)
        return Timed(time.perf_counter() - t, out)


def run_aer(qc, dtype: str, threads: int) -> Timed:
    from qiskit_aer import AerSimulator

    sim = AerSimulator(
        method="statevector",
        max_parallel_threads=threads,
        precision="single" if dtype == "complex64" else "double",
    )
    qc = qc.copy()
    qc.save_statevector()
    t = time.perf_counter()
    out = np.asarray(sim.run(qc).result().get_statevector())
    return Timed(time.perf_counter() - t, out)


def run_qsim(qc, dtype: str, threads: int, fusion: int | None) -> Timed:
    import qsimcirq

    import dasq

    if dtype != "complex64":
        raise ValueError(f"qsim simulates in complex64 only, not {dtype}")
    cc = to_cirq(dasq.Circuit.from_qiskit(qc))
    sim = qsimcirq.QSimSimulator(qsimcirq.QSimOptions(max_fused_gate_size=fusion or 2, cpu_threads=threads))
    t = time.perf_counter()
    _, out, _ = sim.simulate_into_1d_array(cc)
    return Timed(time.perf_counter() - t, out)


def run_qulacs(qc, dtype: str, fusion: int | None) -> Timed:
    """``fusion`` 0 or None: the circuit as given; 1: ``optimize_light``; k >= 2:
    ``optimize(circuit, k)`` (gates merged into dense blocks of up to k qubits)."""
    import qulacs
    from qulacs.circuit import QuantumCircuitOptimizer

    import dasq

    if dtype != "complex128":
        raise ValueError(f"qulacs simulates in complex128 only, not {dtype}")
    circuit = dasq.Circuit.from_qiskit(qc)
    qulacs_circuit = to_qulacs(circuit)
    t = time.perf_counter()
    if fusion == 1:
        QuantumCircuitOptimizer().optimize_light(qulacs_circuit)
    elif fusion is not None and fusion >= 2:
        QuantumCircuitOptimizer().optimize(qulacs_circuit, fusion)
    state = qulacs.QuantumState(circuit.num_qubits)
    qulacs_circuit.update_quantum_state(state)
    out = state.get_vector()
    return Timed(time.perf_counter() - t, out)


def run_lightning(qc, dtype: str) -> Timed:
    import pennylane_lightning.lightning_qubit_ops as ops

    import dasq

    circuit = dasq.Circuit.from_qiskit(qc)
    calls = to_lightning(circuit, dtype)
    make = ops.StateVectorC64 if dtype == "complex64" else ops.StateVectorC128
    t = time.perf_counter()
    sv = make(circuit.num_qubits)
    for call in calls:
        call(sv)
    out = np.empty(1 << circuit.num_qubits, dtype=dtype)
    sv.getState(out)
    # Lightning's wire 0 is the most significant bit, as dasq's qubit n-1: same order
    return Timed(time.perf_counter() - t, out)


def run(contender: str, qc, dtype: str, threads: int, fusion: int | None) -> Timed:
    """One timed run of ``contender``; ``fusion`` is its own fusion setting."""
    if contender in ("dasq", "dasq-old", "dasq-new"):
        return run_dasq(qc, dtype, threads, fusion, fresh=contender == "dasq-new")
    if contender == "aer":
        return run_aer(qc, dtype, threads)
    if contender == "qsim":
        return run_qsim(qc, dtype, threads, fusion)
    if contender == "qulacs":
        return run_qulacs(qc, dtype, fusion)
    if contender == "lightning":
        return run_lightning(qc, dtype)
    raise ValueError(f"unknown contender {contender!r}; known: dasq, dasq-old, dasq-new, {', '.join(PEERS)}")
