"""Kernels over a batch of small states: an array (B, 2^n), one row per parameter set.

Why: a sweep runs the same circuit on many parameter sets. Applying each gate to
every row in one call pays Python's per-gate cost once per batch instead of once
per set; the tables differ per row (``tables[b]``) or are shared (one row). These
kernels are what ``dasq.engine.sweep`` runs; they receive arrays and plain numbers.

Each kernel exists twice, compiled from one function: serially, for small work
(a parallel launch costs tens of microseconds, more than a 12-qubit gate), and
with numba's threads over rows and index ranges, for large work (``pick``). Loops
run over contiguous runs of amplitudes so that numba vectorises them. numba is
imported, and a kernel compiled for the dtypes met (and cached on disk), when a
kernel is first called: importing dasq loads no numba.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

PARALLEL_MIN_AMPLITUDES = 1 << 16  # below this many amplitudes in a call, run serially
_OPTIONS = {"cache": True, "nogil": True, "fastmath": True}
prange = range  # numba's prange once the kernels are compiled (_compile)
_HELPERS = ("_spread", "_offsets")
_lock = threading.Lock()


def _compile() -> None:
    """numba imported, the helpers and prange made numba's in this module's globals
    (which the kernels read when numba compiles them)."""
    with _lock:
        if globals()["prange"] is not range:
            return
        import numba

        for name in _HELPERS:
            globals()[name] = numba.njit(**_OPTIONS)(globals()[name])
        globals()["prange"] = numba.prange


class _Twice:
    """A kernel's serial and threaded forms, compiled on first call."""

    def __init__(self, function: Callable) -> None:
        self.function = function
        self.forms: list[Any] | None = None

    def __getitem__(self, parallel: bool | int) -> Callable:
        if self.forms is None:
            _compile()
            import numba

            serial = numba.njit(**_OPTIONS)(self.function)
            self.forms = [serial, numba.njit(parallel=True, **_OPTIONS)(self.function)]
        return self.forms[int(parallel)]


def _twice(function: Callable) -> _Twice:
    return _Twice(function)


_local = threading.local()


@contextlib.contextmanager
def serial() -> Iterator[None]:
    """Inside, in this thread, every kernel runs its serial form: a batch's pieces
    already run side by side on threads or workers."""
    before = getattr(_local, "serial", False)
    _local.serial = True
    try:
        yield
    finally:
        _local.serial = before


def pick(kernels: _Twice, amplitudes: int) -> Callable:
    """The serial or the threaded form, by the work of one call."""
    return kernels[amplitudes >= PARALLEL_MIN_AMPLITUDES and not getattr(_local, "serial", False)]


def _spread(r: np.int64, ascending: np.ndarray) -> np.int64:
    """The r-th index whose bits at ``ascending`` (sorted qubits) are zero."""
    for t in range(ascending.size):
        q = ascending[t]
        r = ((r >> q) << (q + 1)) | (r & ((np.int64(1) << q) - 1))
    return r


def _offsets(qubits: np.ndarray) -> np.ndarray:
    """offsets[j]: the index bits of local combination j (bit t of j -> qubits[t])."""
    k = qubits.size
    out = np.zeros(1 << k, dtype=np.int64)
    for j in range(1 << k):
        o = 0
        for t in range(k):
            if (j >> t) & 1:
                o |= np.int64(1) << qubits[t]
        out[j] = o
    return out


SPAN = 1 << 12  # amplitudes per work item of the one-qubit kernels


def _one_qubit(states: np.ndarray, q: np.int64, tables: np.ndarray) -> None:
    """states[b] <- tables[b or 0] (2 x 2) on qubit q."""
    rows, size = states.shape
    step = np.int64(1) << q
    span = max(2 * step, min(size, SPAN))
    spans = size // span
    for w in prange(rows * spans):
        b = w // spans
        t = 0 if tables.shape[0] == 1 else b
        m00, m01, m10, m11 = tables[t, 0, 0], tables[t, 0, 1], tables[t, 1, 0], tables[t, 1, 1]
        start = (w % spans) * span
        if q == 0:
            for i in range(start, start + span, 2):
                a0 = states[b, i]
                a1 = states[b, i + 1]
                states[b, i] = m00 * a0 + m01 * a1
                states[b, i + 1] = m10 * a0 + m11 * a1
            continue
        for base in range(start, start + span, 2 * step):
            for i in range(base, base + step):
                a0 = states[b, i]
                a1 = states[b, i + step]
                states[b, i] = m00 * a0 + m01 * a1
                states[b, i + step] = m10 * a0 + m11 * a1


def _overlap_one(left: np.ndarray, right: np.ndarray, q: np.int64) -> np.ndarray:
    """``_overlap`` on one qubit: S[b] = sum over pairs of conj(left pair) x right pair."""
    rows, size = left.shape
    step = np.int64(1) << q
    span = max(2 * step, min(size, SPAN))
    spans = size // span
    partial = np.zeros((rows * spans, 4), dtype=np.complex128)
    for w in prange(rows * spans):
        b = w // spans
        start = (w % spans) * span
        s00 = s01 = s10 = s11 = 0j
        for base in range(start, start + span, 2 * step):
            for i in range(base, base + step):
                l0 = np.conj(left[b, i])
                l1 = np.conj(left[b, i + step])
                r0 = right[b, i]
                r1 = right[b, i + step]
                s00 += l0 * r0
                s01 += l0 * r1
                s10 += l1 * r0
                s11 += l1 * r1
        partial[w, 0] = s00
        partial[w, 1] = s01
        partial[w, 2] = s10
        partial[w, 3] = s11
    return partial.reshape(rows, spans, 2, 2).sum(axis=1)


GROUP_AMPLITUDES = 256  # base indices per parallel work item (and per scratch buffer)


def _dense(states: np.ndarray, qubits: np.ndarray, tables: np.ndarray) -> None:
    """states[b] <- tables[b or 0] on ``qubits`` (bit t of a table index -> qubits[t])."""
    rows, size = states.shape
    k = qubits.size
    d = 1 << k
    offsets = _offsets(qubits)
    ascending = np.sort(qubits)
    # contiguous indices below the lowest qubit, at most GROUP_AMPLITUDES: a gate on a
    # high qubit gets many work items and a small scratch, never one the state's size
    run = min(np.int64(1) << ascending[0], size >> k, GROUP_AMPLITUDES)
    runs = (size >> k) // run
    group = max(1, min(runs, GROUP_AMPLITUDES // run))
    groups = runs // group
    for w in prange(rows * groups):
        b = w // groups
        m = tables[0] if tables.shape[0] == 1 else tables[b]
        row = states[b]
        held = np.empty((d, run), dtype=states.dtype)
        first = (w % groups) * group
        for r in range(first, first + group):
            start = _spread(r * run, ascending)
            for j in range(d):
                held[j, :] = row[start + offsets[j] : start + offsets[j] + run]
            for j in range(d):
                for i in range(run):
                    acc = m[j, 0] * held[0, i]
                    for c in range(1, d):
                        acc += m[j, c] * held[c, i]
                    row[start + offsets[j] + i] = acc


def _monomial(states: np.ndarray, qubits: np.ndarray, source: np.ndarray, phases: np.ndarray) -> None:
    """states[b] <- P on ``qubits``, P a permutation with phases (CNOT, SWAP, X, CZ):
    new[j] = phases[j] * old[source[j]]."""
    rows, size = states.shape
    k = qubits.size
    d = 1 << k
    offsets = _offsets(qubits)
    ascending = np.sort(qubits)
    bases = size >> k
    group = min(bases, GROUP_AMPLITUDES)
    groups = bases // group
    for w in prange(rows * groups):
        row = states[w // groups]
        held = np.empty(d, dtype=states.dtype)
        first = (w % groups) * group
        for r in range(first, first + group):
            i = _spread(r, ascending)
            for j in range(d):
                held[j] = row[i + offsets[j]]
            for j in range(d):
                row[i + offsets[j]] = phases[j] * held[source[j]]


def _gather(states: np.ndarray, source: np.ndarray, phases: np.ndarray) -> None:
    """states[b, i] <- phases[i] * states[b, source[i]] (a permutation of the whole row)."""
    rows, size = states.shape
    for b in prange(rows):
        row = states[b]
        held = row.copy()
        for i in range(size):
            row[i] = phases[i] * held[source[i]]


def _diagonal(states: np.ndarray, qubits: np.ndarray, tables: np.ndarray) -> None:
    """states[b, i] *= tables[b or 0, j(i)], j(i) the bits of i at ``qubits``."""
    rows, size = states.shape
    k = qubits.size
    if k == 1:
        q = qubits[0]
        step = np.int64(1) << q
        span = max(2 * step, min(size, SPAN))
        spans = size // span
        for w in prange(rows * spans):
            b = w // spans
            t = 0 if tables.shape[0] == 1 else b
            v0, v1 = tables[t, 0], tables[t, 1]
            start = (w % spans) * span
            for base in range(start, start + span, 2 * step):
                for i in range(base, base + step):
                    states[b, i] *= v0
                    states[b, i + step] *= v1
        return
    for b in prange(rows):
        v = tables[0] if tables.shape[0] == 1 else tables[b]
        row = states[b]
        for i in range(size):
            j = 0
            for t in range(k):
                j |= ((i >> qubits[t]) & 1) << t
            row[i] *= v[j]


def _bilinear_dense(
    left: np.ndarray, right: np.ndarray, qubits: np.ndarray, tables: np.ndarray
) -> np.ndarray:
    """<left[b]| A_b |right[b]>, A_b = tables[b or 0] on ``qubits``: nothing written."""
    rows, size = left.shape
    k = qubits.size
    d = 1 << k
    offsets = _offsets(qubits)
    ascending = np.sort(qubits)
    run = np.int64(1) << ascending[0]
    runs = (size >> k) // run
    partial = np.zeros(rows * runs, dtype=np.complex128)
    for w in prange(rows * runs):
        b = w // runs
        m = tables[0] if tables.shape[0] == 1 else tables[b]
        lrow = left[b]
        rrow = right[b]
        start = _spread((w % runs) * run, ascending)
        acc = 0j
        for j in range(d):
            for c in range(d):
                mjc = m[j, c]
                if mjc == 0:
                    continue
                lo = start + offsets[j]
                ro = start + offsets[c]
                s = 0j
                for i in range(run):
                    s += np.conj(lrow[lo + i]) * rrow[ro + i]
                acc += mjc * s
        partial[w] = acc
    return partial.reshape(rows, runs).sum(axis=1)


def _bilinear_diagonal(
    left: np.ndarray, right: np.ndarray, qubits: np.ndarray, tables: np.ndarray
) -> np.ndarray:
    """<left[b]| D_b |right[b]> for the diagonal D_b = tables[b or 0] on ``qubits``."""
    rows, size = left.shape
    k = qubits.size
    chunk = min(size, 1 << 12)
    per_row = size // chunk
    partial = np.zeros(rows * per_row, dtype=np.complex128)
    for w in prange(rows * per_row):
        b = w // per_row
        v = tables[0] if tables.shape[0] == 1 else tables[b]
        lrow = left[b]
        rrow = right[b]
        start = (w % per_row) * chunk
        acc = 0j
        for i in range(start, start + chunk):
            j = 0
            for t in range(k):
                j |= ((i >> qubits[t]) & 1) << t
            acc += np.conj(lrow[i]) * v[j] * rrow[i]
        partial[w] = acc
    return partial.reshape(rows, per_row).sum(axis=1)


def _overlap(left: np.ndarray, right: np.ndarray, qubits: np.ndarray) -> np.ndarray:
    """S[b, j, c] = sum over the other bits of conj(left[b, .. j ..]) right[b, .. c ..]:
    the two states' overlap reduced to ``qubits`` (bit t of j and c -> qubits[t]), from
    which <left| A |right> = sum_jc A[j, c] S[j, c] for any A on those qubits."""
    rows, size = left.shape
    k = qubits.size
    d = 1 << k
    offsets = _offsets(qubits)
    ascending = np.sort(qubits)
    run = min(np.int64(1) << ascending[0], size >> k, GROUP_AMPLITUDES)
    runs = (size >> k) // run
    group = max(1, min(runs, GROUP_AMPLITUDES // run))
    groups = runs // group
    partial = np.zeros((rows * groups, d, d), dtype=np.complex128)
    for w in prange(rows * groups):
        b = w // groups
        lrow = left[b]
        rrow = right[b]
        first = (w % groups) * group
        acc = np.zeros((d, d), dtype=np.complex128)
        for r in range(first, first + group):
            start = _spread(r * run, ascending)
            for j in range(d):
                lo = start + offsets[j]
                for c in range(d):
                    ro = start + offsets[c]
                    s = 0j
                    for i in range(run):
                        s += np.conj(lrow[lo + i]) * rrow[ro + i]
                    acc[j, c] += s
        partial[w] = acc
    return partial.reshape(rows, groups, d, d).sum(axis=1)


def _add_pauli(out: np.ndarray, states: np.ndarray, x: np.int64, z: np.int64, weight: complex) -> None:
    """out[b, i ^ x] += weight (-1)^|i & z| states[b, i]: one Pauli term of O|psi>."""
    rows, size = states.shape
    for b in prange(rows):
        for i in range(size):
            v = i & z
            parity = 0
            while v:
                v &= v - 1
                parity ^= 1
            term = weight * states[b, i]
            out[b, i ^ x] += -term if parity else term


def _pauli_expectations(states: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """out[b, t] = <states[b]| X^x Z^z |states[b]> for (x, z) = masks[t] (Z first;
    the caller multiplies in each term's i^(number of Y) and coefficient)."""
    rows, size = states.shape
    terms = masks.shape[0]
    out = np.zeros((rows, terms), dtype=np.complex128)
    for b in prange(rows):
        row = states[b]
        for t in range(terms):
            x = masks[t, 0]
            z = masks[t, 1]
            acc = 0j
            for i in range(size):
                a = np.conj(row[i ^ x]) * row[i]
                v = i & z
                parity = 0
                while v:
                    v &= v - 1
                    parity ^= 1
                acc += -a if parity else a
            out[b, t] = acc
    return out


one_qubit = _twice(_one_qubit)
dense = _twice(_dense)
monomial = _twice(_monomial)
diagonal = _twice(_diagonal)
gather = _twice(_gather)
bilinear_dense = _twice(_bilinear_dense)
bilinear_diagonal = _twice(_bilinear_diagonal)
pauli_expectations = _twice(_pauli_expectations)
overlap = _twice(_overlap)
add_pauli = _twice(_add_pauli)
overlap_one = _twice(_overlap_one)

__all__ = [
    "add_pauli",
    "bilinear_dense",
    "bilinear_diagonal",
    "dense",
    "diagonal",
    "gather",
    "monomial",
    "one_qubit",
    "overlap",
    "overlap_one",
    "pauli_expectations",
    "pick",
    "serial",
]
