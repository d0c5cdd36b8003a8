"""A density-matrix circuit as a circuit on its Choi vector (one engine, 2N qubits).

rho[i, j] of an N-qubit density matrix is amplitude i + j 2^N of a 2N-qubit vector:
ket qubit q at q, bra qubit q at q + N. Each kind's row of the lowering table
says what it is there (``on_choi``): a unitary U becomes U on the ket qubits and
conj(U) on the bra qubits, a channel or a reset its superoperator. The engine then plans,
fuses and runs the result as any statevector circuit; measurements are drawn
before lowering (they need the state's probabilities).
"""

from __future__ import annotations

from collections.abc import Iterable

from dasq.circuit.circuit import Circuit
from dasq.circuit.kinds import Operation
from dasq.plan.lowering import on_choi


def choi_operations(ops: Iterable[Operation], num_qubits: int) -> list[Operation]:
    """The operations of an N-qubit circuit acting on its 2N-qubit Choi vector."""
    out: list[Operation] = []
    for op in ops:
        out.extend(on_choi(op, num_qubits))
    return out


def choi_circuit(circuit: Circuit) -> Circuit:
    """``circuit`` (no measurements left) on the Choi vector; the global phase cancels."""
    lowered = Circuit(2 * circuit.num_qubits)
    for op in choi_operations(circuit, circuit.num_qubits):
        lowered.append(op)
    return lowered


def resets_as_channels(circuit: Circuit) -> Circuit:
    """``circuit`` with every top-level reset written as its channel: a density matrix
    resets without drawing an outcome, so a reset does not split shots."""
    from dasq.circuit.channels import reset_kraus
    from dasq.circuit.kinds import Channel, Reset

    if not any(isinstance(op, Reset) for op in circuit):
        return circuit
    return circuit.with_operations(
        Channel.create(circuit.num_qubits, op.targets, name="reset", kraus=reset_kraus())
        if isinstance(op, Reset)
        else op
        for op in circuit
    )
