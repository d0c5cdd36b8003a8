"""Every builder method, with 0, 1 and 2 controls and random control states, with
targets placed over local and global bits, for every chunking g = 0..N-1, against
the dense Kronecker reference. Each case runs once, the devices (CPU, the GPU code on
numpy, and a GPU where there is one) taking turns across the cases."""

from __future__ import annotations

import itertools
import zlib

import dask
import numpy as np
import pytest
from conftest import DEVICES
from reference import (
    X,
    Y,
    Z,
    operator,
    pauli_matrix,
    random_state,
    random_unitary,
)

import dasq

N = 5
H = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
SX = 0.5 * np.array([[1 + 1j, 1 - 1j], [1 - 1j, 1 + 1j]])


def rx(t):
    return np.cos(t / 2) * np.eye(2) - 1j * np.sin(t / 2) * X


def ry(t):
    return np.cos(t / 2) * np.eye(2) - 1j * np.sin(t / 2) * Y


def rz(t):
    return np.cos(t / 2) * np.eye(2) - 1j * np.sin(t / 2) * Z


def u(t, p, lam):
    return np.exp(1j * (p + lam) / 2) * rz(p) @ ry(t) @ rz(lam)


def phase(t):
    return np.diag([1, np.exp(1j * t)])


def gadget(theta, label):
    P = pauli_matrix(label)
    return np.cos(theta / 2) * np.eye(len(P)) - 1j * np.sin(theta / 2) * P


SWAP = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
ISWAP = np.array([[1, 0, 0, 0], [0, 0, 1j, 0], [0, 1j, 0, 0], [0, 0, 0, 1]])
rng0 = np.random.default_rng(2024)
U1, U2, U3 = random_unitary(1, rng0), random_unitary(2, rng0), random_unitary(3, rng0)
D2 = np.exp(1j * rng0.uniform(0, 2 * np.pi, 4))
D3 = np.exp(1j * rng0.uniform(0, 2 * np.pi, 8))
TH = 0.7391

# name -> (number of targets, builder(c, targets, controls, states), matrix on targets)
ONE_TARGET = {
    "h": (lambda c, t, cs, st: c.h(t[0], controls=cs, control_states=st), H),
    "x": (lambda c, t, cs, st: c.x(t[0], controls=cs, control_states=st), X),
    "y": (lambda c, t, cs, st: c.y(t[0], controls=cs, control_states=st), Y),
    "z": (lambda c, t, cs, st: c.z(t[0], controls=cs, control_states=st), Z),
    "s": (lambda c, t, cs, st: c.s(t[0], controls=cs, control_states=st), phase(np.pi / 2)),
    "sdg": (lambda c, t, cs, st: c.sdg(t[0], controls=cs, control_states=st), phase(-np.pi / 2)),
    "t": (lambda c, t, cs, st: c.t(t[0], controls=cs, control_states=st), phase(np.pi / 4)),
    "tdg": (lambda c, t, cs, st: c.tdg(t[0], controls=cs, control_states=st), phase(-np.pi / 4)),
    "sx": (lambda c, t, cs, st: c.sx(t[0], controls=cs, control_states=st), SX),
    "rx": (lambda c, t, cs, st: c.rx(TH, t[0], controls=cs, control_states=st), rx(TH)),
    "ry": (lambda c, t, cs, st: c.ry(TH, t[0], controls=cs, control_states=st), ry(TH)),
    "rz": (lambda c, t, cs, st: c.rz(TH, t[0], controls=cs, control_states=st), rz(TH)),
    "p": (lambda c, t, cs, st: c.p(TH, t[0], controls=cs, control_states=st), phase(TH)),
    "u": (lambda c, t, cs, st: c.u(TH, 0.3, -1.1, t[0], controls=cs, control_states=st), u(TH, 0.3, -1.1)),
    "unitary1": (lambda c, t, cs, st: c.unitary(U1, t, cs, st), U1),
    "diagonal1": (lambda c, t, cs, st: c.diagonal(D2[:2], t, cs, st), np.diag(D2[:2])),
    "pauli_y": (lambda c, t, cs, st: c.pauli("Y", t, cs, st), Y),
    "pauli_gadget1": (lambda c, t, cs, st: c.pauli_gadget(TH, "X", t, cs, st), gadget(TH, "X")),
}

MANY_TARGET = {
    "swap": (2, lambda c, t, cs, st: c.swap(t[0], t[1], controls=cs, control_states=st), SWAP),
    "iswap": (2, lambda c, t, cs, st: c.iswap(t[0], t[1], controls=cs, control_states=st), ISWAP),
    "unitary2": (2, lambda c, t, cs, st: c.unitary(U2, t, cs, st), U2),
    "unitary3": (3, lambda c, t, cs, st: c.unitary(U3, t, cs, st), U3),
    "diagonal2": (2, lambda c, t, cs, st: c.diagonal(D2, t, cs, st), np.diag(D2)),
    "diagonal3": (3, lambda c, t, cs, st: c.diagonal(D3, t, cs, st), np.diag(D3)),
    "pauli3": (3, lambda c, t, cs, st: c.pauli("XYZ", t, cs, st), pauli_matrix("XYZ")),
    "pauli_zz": (2, lambda c, t, cs, st: c.pauli("ZZ", t, cs, st), pauli_matrix("ZZ")),
    "phase_gadget3": (3, lambda c, t, cs, st: c.phase_gadget(TH, t, cs, st), gadget(TH, "ZZZ")),
    "pauli_gadget3": (3, lambda c, t, cs, st: c.pauli_gadget(TH, "YXZ", t, cs, st), gadget(TH, "YXZ")),
    "pauli_gadget_xx": (2, lambda c, t, cs, st: c.pauli_gadget(TH, "XX", t, cs, st), gadget(TH, "XX")),
}


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _placements(num_targets: int, rng: np.random.Generator, count: int):
    """Target tuples: every qubit for one target; edges and random ones for more."""
    if num_targets == 1:
        return [(q,) for q in range(N)]
    fixed = [
        tuple(range(num_targets)),
        tuple(range(N - 1, N - 1 - num_targets, -1)),
        (0, N - 1, *range(1, num_targets - 1)),
    ]
    rand = [tuple(rng.permutation(N)[:num_targets]) for _ in range(count)]
    return fixed + rand


def _controls(targets, num_controls, rng):
    free = [q for q in range(N) if q not in targets]
    cs = tuple(int(q) for q in rng.permutation(free)[:num_controls])
    states = tuple(int(s) for s in rng.integers(0, 2, num_controls))
    return cs, states


def _check(build, matrix, targets, controls, states, L, psi, method):
    c = dasq.Circuit(N)
    build(c, targets, controls, states if controls else None)
    got = dasq.simulate(c, initial=psi, chunk_qubits=L, method=method).to_numpy()
    want = operator(matrix, targets, controls, states, N) @ psi
    np.testing.assert_allclose(
        got, want, atol=1e-10, err_msg=f"targets={targets} controls={controls} states={states} L={L}"
    )


METHODS = ["per-operation", "auto"]  # auto: the planner wherever blocks are wide enough


def _cases(names) -> list:
    """Each (name, L, method) once, on DEVICES[(name's index + L + method's index) % number
    of devices]: every device runs each name, each L and each method, across the others."""
    return [
        pytest.param(name, L, method, device, id=f"{name}-L{L}-{method}-{device}")
        for i, name in enumerate(sorted(names))
        for L in range(1, N + 1)
        for j, method in enumerate(METHODS)
        for device in [DEVICES[(i + L + j) % len(DEVICES)]]
    ]


@pytest.fixture
def on(device):
    """The case's device, as dask config ``dasq.device`` (what ``simulate`` uses)."""
    with dask.config.set({"dasq.device": device}):
        yield device


@pytest.mark.usefixtures("on")
@pytest.mark.parametrize("name, L, method, device", _cases(ONE_TARGET))
def test_one_target_operations(name, L, method):
    build, matrix = ONE_TARGET[name]
    rng = np.random.default_rng(_seed(name, L, 0))
    psi = random_state(N, rng)
    for (targets,), nc in itertools.product([(t,) for t in _placements(1, rng, 0)], (0, 1, 2)):
        controls, states = _controls(targets, nc, rng)
        _check(build, matrix, targets, controls, states, L, psi, method)


@pytest.mark.usefixtures("on")
@pytest.mark.parametrize("name, L, method, device", _cases(MANY_TARGET))
def test_many_target_operations(name, L, method):
    k, build, matrix = MANY_TARGET[name]
    rng = np.random.default_rng(_seed(name, L, 1))
    psi = random_state(N, rng)
    for targets in _placements(k, rng, 4):
        for nc in (0, 1, 2):
            controls, states = _controls(targets, nc, rng)
            _check(build, matrix, targets, controls, states, L, psi, method)


NAMED_CONTROLLED = {
    "cx": (lambda c, q, st: c.cx(q[0], q[1], control_states=st), 1, X),
    "cy": (lambda c, q, st: c.cy(q[0], q[1], control_states=st), 1, Y),
    "cz": (lambda c, q, st: c.cz(q[0], q[1], control_states=st), 1, Z),
    "cp": (lambda c, q, st: c.cp(TH, q[0], q[1], control_states=st), 1, phase(TH)),
    "crx": (lambda c, q, st: c.crx(TH, q[0], q[1], control_states=st), 1, rx(TH)),
    "cry": (lambda c, q, st: c.cry(TH, q[0], q[1], control_states=st), 1, ry(TH)),
    "crz": (lambda c, q, st: c.crz(TH, q[0], q[1], control_states=st), 1, rz(TH)),
    "ccx": (lambda c, q, st: c.ccx(q[0], q[1], q[2], control_states=st), 2, X),
    "mcx": (lambda c, q, st: c.mcx(q[:3], q[3], control_states=st), 3, X),
    "cswap": (lambda c, q, st: c.cswap(q[0], q[1], q[2], control_states=st), 1, SWAP),
}


@pytest.mark.usefixtures("on")
@pytest.mark.parametrize("name, L, method, device", _cases(NAMED_CONTROLLED))
def test_named_controlled_gates(name, L, method):
    build, nc, matrix = NAMED_CONTROLLED[name]
    k = 2 if name == "cswap" else 1
    rng = np.random.default_rng(_seed(name, L, 2))
    psi = random_state(N, rng)
    for _ in range(8):
        qubits = tuple(int(q) for q in rng.permutation(N)[: nc + k])
        states = tuple(int(s) for s in rng.integers(0, 2, nc))
        for st in (None, states):
            c = dasq.Circuit(N)
            build(c, qubits, st)
            got = dasq.simulate(c, initial=psi, chunk_qubits=L, method=method).to_numpy()
            want = operator(matrix, qubits[nc:], qubits[:nc], st, N) @ psi
            np.testing.assert_allclose(got, want, atol=1e-10, err_msg=f"{qubits} {st}")


def test_chunk_qubits_zero_one_amplitude_blocks(on_device):
    """g = N: every qubit global, blocks of one amplitude (many-target gates merge blocks),
    on every device: the one case of its kind."""
    rng = np.random.default_rng(3)
    psi = random_state(3, rng)
    c = dasq.Circuit(3).h(0).cx(0, 2).unitary(U2, (2, 0)).swap(1, 2).pauli_gadget(TH, "XY", (0, 1))
    want = psi
    for m in (
        operator(H, (0,), n=3),
        operator(X, (2,), (0,), n=3),
        operator(U2, (2, 0), n=3),
        operator(SWAP, (1, 2), n=3),
        operator(gadget(TH, "XY"), (0, 1), n=3),
    ):
        want = m @ want
    got = dasq.simulate(c, initial=psi, chunk_qubits=0).to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-10)
