"""Quantum channels as numbers: Kraus sets, superoperators, and the named channels.

A channel on k qubits is kept as its Kraus operators K_i (2^k x 2^k each, indexed
as ``Circuit.unitary`` matrices: bit j of an index belongs to ``targets[j]``), so
that density matrices (their superoperator) and trajectories (a Kraus branch per
shot) read the same record. Superoperators use column stacking, as Qiskit's
``SuperOp``: rho[i, j] sits at i + j * 2^k, so the ket bits are the low bits and
the bra bits the high ones, exactly the layout of dasq's Choi vector.

Tolerance: a channel is trace preserving when every entry of sum_i K_i^dagger K_i - I
has modulus <= ``CHANNEL_ATOL`` (1e-8, the unitarity tolerance); a superoperator
given by the user is completely positive when the eigenvalues of its Choi matrix
are >= -``CHANNEL_ATOL`` times their largest.
"""

from __future__ import annotations

import numpy as np

from dasq.circuit.validation import UNITARY_ATOL, as_complex_array, check_probability
from dasq.errors import ValidationError

CHANNEL_ATOL = UNITARY_ATOL
MAX_CHANNEL_QUBITS = 6  # a superoperator on k qubits is 4^k x 4^k: 16M entries at k = 6

PAULIS = {
    "I": np.eye(2, dtype=complex),
    "X": np.array([[0, 1], [1, 0]], dtype=complex),
    "Y": np.array([[0, -1j], [1j, 0]], dtype=complex),
    "Z": np.diag([1.0 + 0j, -1.0]),
}


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.complex128)
    a.setflags(write=False)
    return a


def check_kraus(ops: object, num_targets: int) -> np.ndarray:
    """A read-only (m, 2^k, 2^k) array of Kraus operators whose map preserves the trace."""
    if num_targets > MAX_CHANNEL_QUBITS:
        raise ValidationError(
            f"a channel on {num_targets} qubits is too large; dasq allows 1..{MAX_CHANNEL_QUBITS}"
        )
    if isinstance(ops, np.ndarray) and ops.ndim == 2:
        raise ValidationError("kraus() takes a list of Kraus matrices, got one matrix (wrap it in a list)")
    k, _ = as_complex_array(ops, "Kraus operators")
    dim = 1 << num_targets
    if k.ndim != 3 or k.shape[1:] != (dim, dim) or k.shape[0] == 0:
        raise ValidationError(
            f"Kraus operators for {num_targets} target(s) must be a non-empty list of ({dim}, {dim}) "
            f"matrices, got an array of shape {k.shape}"
        )
    total = np.einsum("kji,kjl->il", k.conj(), k)
    err = float(np.max(np.abs(total - np.eye(dim))))
    if err > CHANNEL_ATOL:
        raise ValidationError(
            f"Kraus operators do not preserve the trace: max |sum K^dagger K - I| = {err:.3g} "
            f"> tolerance {CHANNEL_ATOL:g}"
        )
    return _frozen(k)


def superop_of(kraus: np.ndarray) -> np.ndarray:
    """The column-stacking superoperator sum_i conj(K_i) (x) K_i (bra bits high)."""
    dim = kraus.shape[1]
    s = np.zeros((dim * dim, dim * dim), dtype=np.complex128)
    for k in kraus:
        s += np.kron(k.conj(), k)
    return s


def kraus_of_superop(superop: object, num_targets: int) -> np.ndarray:
    """Kraus operators of a user's superoperator (via its Choi matrix), checked to be
    completely positive and trace preserving."""
    s, _ = as_complex_array(superop, "superoperator")
    dim = 1 << num_targets
    if s.shape != (dim * dim, dim * dim):
        raise ValidationError(
            f"a superoperator on {num_targets} target(s) must have shape ({dim * dim}, {dim * dim}), "
            f"got {s.shape}"
        )
    # S[a + b d, c + e d] = sum_K K[a, c] conj(K[b, e]) = C[(a, c), (b, e)]
    choi = s.reshape(dim, dim, dim, dim).transpose(1, 3, 0, 2).reshape(dim * dim, dim * dim)
    if np.max(np.abs(choi - choi.conj().T)) > CHANNEL_ATOL * max(1.0, np.max(np.abs(choi))):
        raise ValidationError(
            "superoperator does not preserve Hermiticity (its Choi matrix is not Hermitian)"
        )
    values, vectors = np.linalg.eigh((choi + choi.conj().T) / 2)
    if values[0] < -CHANNEL_ATOL * max(1.0, values[-1]):
        raise ValidationError(
            f"superoperator is not completely positive: its Choi matrix has eigenvalue {values[0]:.3g}"
        )
    keep = values > CHANNEL_ATOL * max(1.0, values[-1])
    kraus = [np.sqrt(val) * vec.reshape(dim, dim) for val, vec in zip(values[keep], vectors.T[keep])]
    return check_kraus(np.array(kraus), num_targets)


# --------------------------------------------------------------------- named channels (QuEST's conventions)
def pauli_matrix(label: str) -> np.ndarray:
    """The matrix of a Pauli label, its rightmost character on bit 0."""
    m = np.eye(1, dtype=complex)
    for ch in label:
        m = np.kron(m, PAULIS[ch])
    return m


def pauli_mixture(weights: dict[str, float]) -> np.ndarray:
    """Kraus operators sqrt(w_P) P of sum_P w_P P rho P (weights of the identity first)."""
    ops = [np.sqrt(w) * pauli_matrix(lab) for lab, w in weights.items() if w > 0]
    return np.array(ops or [pauli_matrix("I")])


def dephasing(p: float) -> np.ndarray:
    p = check_probability(p, "dephasing probability")
    return pauli_mixture({"I": 1 - p, "Z": p})


def dephasing2(p: float) -> np.ndarray:
    p = check_probability(p, "two-qubit dephasing probability")
    return pauli_mixture({"II": 1 - p, "IZ": p / 3, "ZI": p / 3, "ZZ": p / 3})


def depolarising(p: float) -> np.ndarray:
    p = check_probability(p, "depolarising probability")
    return pauli_mixture({"I": 1 - p, "X": p / 3, "Y": p / 3, "Z": p / 3})


def depolarising2(p: float) -> np.ndarray:
    p = check_probability(p, "two-qubit depolarising probability")
    weights = {a + b: p / 15 for a in "IXYZ" for b in "IXYZ"}
    weights["II"] = 1 - p
    return pauli_mixture(dict(sorted(weights.items(), key=lambda kv: kv[0] != "II")))


def amplitude_damping(gamma: float) -> np.ndarray:
    g = check_probability(gamma, "damping probability gamma")
    return np.array([[[1, 0], [0, np.sqrt(1 - g)]], [[0, np.sqrt(g)], [0, 0]]], dtype=complex)


def pauli_channel(px: float, py: float, pz: float) -> np.ndarray:
    ps = [check_probability(p, name) for p, name in ((px, "px"), (py, "py"), (pz, "pz"))]
    if sum(ps) > 1 + CHANNEL_ATOL:
        raise ValidationError(f"px + py + pz must be at most 1, got {sum(ps):.6g}")
    return pauli_mixture({"I": max(0.0, 1 - sum(ps)), "X": ps[0], "Y": ps[1], "Z": ps[2]})


def reset_kraus() -> np.ndarray:
    """|0><0| and |0><1|: a reset as a channel (no outcome to draw)."""
    return np.array([[[1, 0], [0, 0]], [[0, 1], [0, 0]]], dtype=complex)


def mixed_unitary(kraus: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """(probabilities, unitaries) when every K_i is sqrt(p_i) times a unitary (the
    branch probabilities of a trajectory then do not depend on the state); else None."""
    probs, unitaries = [], []
    dim = kraus.shape[1]
    for k in kraus:
        kk = k.conj().T @ k
        p = float(np.real(np.trace(kk))) / dim
        if np.max(np.abs(kk - p * np.eye(dim))) > CHANNEL_ATOL:
            return None
        if p > 0:
            probs.append(p)
            unitaries.append(k / np.sqrt(p))
    return np.array(probs) / sum(probs), unitaries
