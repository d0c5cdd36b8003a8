"""A slow, defensive dense reference: full 2^n x 2^n operators from Kronecker products.

Nothing here shares code with dasq: operators are built from 2x2 matrices, Kronecker
products and swap matrices (themselves Pauli sums), as QuEST's tests do.
"""

from __future__ import annotations

import numpy as np

I2 = np.eye(2, dtype=complex)
X = np.array([[0, 1], [1, 0]], dtype=complex)
Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
Z = np.array([[1, 0], [0, -1]], dtype=complex)
PAULI = {"I": I2, "X": X, "Y": Y, "Z": Z}
PROJ = {0: np.diag([1, 0]).astype(complex), 1: np.diag([0, 1]).astype(complex)}


def kron_chain(ops: dict[int, np.ndarray], n: int) -> np.ndarray:
    """op_{n-1} (x) ... (x) op_0, identity where a qubit has no operator (qubit 0 rightmost)."""
    out = np.ones((1, 1), dtype=complex)
    for q in reversed(range(n)):
        out = np.kron(out, ops.get(q, I2))
    return out


def swap_matrix(a: int, b: int, n: int) -> np.ndarray:
    return sum(kron_chain({a: P, b: P}, n) for P in (I2, X, Y, Z)) / 2


def embed(matrix: np.ndarray, targets: tuple[int, ...], n: int) -> np.ndarray:
    """``matrix`` (index bit j <-> targets[j]) as a full operator on n qubits."""
    k = len(targets)
    base = np.kron(np.eye(1 << (n - k)), matrix)  # acts on qubits 0..k-1
    rest = [q for q in range(n) if q not in targets]
    dest = list(targets) + rest  # slot j must end at qubit dest[j]
    where = list(range(n))  # where[slot] = current qubit of that slot
    q_total = np.eye(1 << n, dtype=complex)
    for slot in range(n):
        p_now, p_want = where[slot], dest[slot]
        if p_now != p_want:
            other = where.index(p_want)
            q_total = swap_matrix(p_now, p_want, n) @ q_total
            where[slot], where[other] = p_want, p_now
    return q_total @ base @ q_total.conj().T


def controlled(full: np.ndarray, controls: tuple[int, ...], states: tuple[int, ...], n: int) -> np.ndarray:
    if not controls:
        return full
    proj = kron_chain({c: PROJ[s] for c, s in zip(controls, states)}, n)
    return np.eye(1 << n) - proj + proj @ full


def operator(matrix: np.ndarray, targets, controls=(), states=None, n: int = 1) -> np.ndarray:
    states = tuple(states) if states is not None else (1,) * len(controls)
    return controlled(embed(np.asarray(matrix, dtype=complex), tuple(targets), n), tuple(controls), states, n)


def pauli_matrix(label: str) -> np.ndarray:
    """Matrix of a Pauli label, rightmost character on index bit 0."""
    out = np.ones((1, 1), dtype=complex)
    for ch in label:
        out = np.kron(out, PAULI[ch])
    return out


def random_state(n: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=1 << n) + 1j * rng.normal(size=1 << n)
    return v / np.linalg.norm(v)


def random_unitary(k: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.normal(size=(1 << k, 1 << k)) + 1j * rng.normal(size=(1 << k, 1 << k))
    q, r = np.linalg.qr(a)
    return q * (np.diag(r) / np.abs(np.diag(r)))
