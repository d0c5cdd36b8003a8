"""Checks on user input, each failing with one clear ValueError/TypeError.

Unitarity tolerance: a matrix M counts as unitary when every entry of
M^dagger M - I has modulus <= ``UNITARY_ATOL`` (1e-8), the same for diagonal
entries (|d| - 1). Matrices given in single precision are checked at 1e-5.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np

UNITARY_ATOL = 1e-8
UNITARY_ATOL_SINGLE = 1e-5
PAULI_CHARS = frozenset("IXYZ")


def check_num_qubits(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"number of qubits must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"number of qubits must be >= 1, got {n}")
    return int(n)


def check_qubit(q: object, num_qubits: int, what: str = "qubit") -> int:
    if isinstance(q, bool) or not isinstance(q, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {q!r} ({type(q).__name__})")
    if not 0 <= q < num_qubits:
        raise ValueError(f"{what} {q} is out of range: the circuit has qubits 0..{num_qubits - 1}")
    return int(q)


def check_qubits(qs: object, num_qubits: int, what: str) -> tuple[int, ...]:
    if isinstance(qs, numbers.Integral) and not isinstance(qs, bool):
        qs = (qs,)
    if not isinstance(qs, Iterable) or isinstance(qs, (str, bytes)):
        raise TypeError(f"{what} must be an int or a sequence of ints, got {qs!r}")
    out = tuple(check_qubit(q, num_qubits, what[:-1] if what.endswith("s") else what) for q in qs)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated qubit in {what}: {list(out)}")
    return out


def check_operands(
    targets: object,
    controls: object,
    control_states: object,
    num_qubits: int,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Targets, controls and control states, validated together."""
    t = check_qubits(targets, num_qubits, "targets")
    if not t:
        raise ValueError("an operation needs at least one target qubit")
    c = check_qubits(controls if controls is not None else (), num_qubits, "controls")
    both = set(t) & set(c)
    if both:
        raise ValueError(f"qubit(s) {sorted(both)} used as both control and target")
    return t, c, check_control_states(control_states, len(c))


def check_control_states(states: object, num_controls: int) -> tuple[int, ...]:
    if states is None:
        return (1,) * num_controls
    if isinstance(states, str):
        # Qiskit-style bit string: rightmost character belongs to controls[0]
        if len(states) != num_controls or set(states) - {"0", "1"}:
            raise ValueError(
                f"control_states string must have {num_controls} characters of 0/1, got {states!r}"
            )
        return tuple(int(ch) for ch in reversed(states))
    if isinstance(states, numbers.Integral) and not isinstance(states, bool):
        if not 0 <= states < (1 << num_controls):
            raise ValueError(f"control_states integer {states} does not fit {num_controls} control(s)")
        return tuple((int(states) >> j) & 1 for j in range(num_controls))
    if not isinstance(states, Sequence):
        raise TypeError(f"control_states must be a sequence of 0/1, an int or a str, got {states!r}")
    out = tuple(states)
    if len(out) != num_controls:
        raise ValueError(f"control_states has {len(out)} entries for {num_controls} control(s)")
    for s in out:
        if s not in (0, 1) or isinstance(s, float):
            raise ValueError(f"control states must be 0 or 1, got {list(out)}")
    return tuple(int(s) for s in out)


def check_angle(theta: object, what: str = "angle") -> float:
    if isinstance(theta, bool) or not isinstance(theta, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {theta!r}")
    value = float(theta)
    if not np.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return value


def _as_complex_array(data: object, what: str) -> tuple[np.ndarray, float]:
    try:
        arr = np.asarray(data)
    except Exception as exc:  # ragged nested lists and the like
        raise TypeError(f"{what} is not an array: {exc}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{what} must hold numbers, got dtype {arr.dtype}")
    single = arr.dtype in (np.float32, np.complex64, np.float16)
    arr = arr.astype(np.complex128)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contains NaN or infinity")
    return arr, UNITARY_ATOL_SINGLE if single else UNITARY_ATOL


def check_matrix(matrix: object, num_targets: int, *, require_unitary: bool = True) -> np.ndarray:
    """A 2^k x 2^k complex matrix for k targets, unitary unless told otherwise."""
    m, atol = _as_complex_array(matrix, "matrix")
    dim = 1 << num_targets
    if m.shape != (dim, dim):
        raise ValueError(f"matrix for {num_targets} target(s) must have shape ({dim}, {dim}), got {m.shape}")
    if require_unitary:
        err = np.max(np.abs(m.conj().T @ m - np.eye(dim)))
        if err > atol:
            raise ValueError(f"matrix is not unitary: max |M^dagger M - I| = {err:.3g} > tolerance {atol:g}")
    m.setflags(write=False)
    return m


def check_diagonal(values: object, num_targets: int, *, require_unitary: bool = True) -> np.ndarray:
    d, atol = _as_complex_array(values, "diagonal")
    dim = 1 << num_targets
    if d.shape != (dim,):
        raise ValueError(f"diagonal for {num_targets} target(s) must have {dim} entries, got shape {d.shape}")
    if require_unitary:
        err = np.max(np.abs(np.abs(d) - 1.0))
        if err > atol:
            raise ValueError(f"diagonal is not unitary: max ||d| - 1| = {err:.3g} > tolerance {atol:g}")
    d.setflags(write=False)
    return d


def check_pauli_label(label: object, num_targets: int | None = None) -> str:
    if not isinstance(label, str):
        raise TypeError(f"Pauli label must be a str such as 'XZ', got {label!r}")
    lab = label.upper()
    bad = set(lab) - PAULI_CHARS
    if not lab or bad:
        raise ValueError(f"Pauli label {label!r} must be a non-empty string of I, X, Y, Z")
    if num_targets is not None and len(lab) != num_targets:
        raise ValueError(f"Pauli label {label!r} has {len(lab)} characters for {num_targets} target(s)")
    return lab
