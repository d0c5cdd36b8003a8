"""Random circuits agree across chunkings and with the dense reference (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import operator, pauli_matrix, random_unitary

import dasq


def _gadget(theta, label):
    P = pauli_matrix(label)
    return np.cos(theta / 2) * np.eye(len(P)) - 1j * np.sin(theta / 2) * P


@st.composite
def circuits(draw):
    n = draw(st.integers(1, 8))
    depth = draw(st.integers(1, 14))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    mats = []  # (matrix, targets, controls, states) for the reference
    for _ in range(depth):
        kind = rng.choice(["u1", "u2", "pauli", "gadget", "swap", "diag", "phase"])
        k = {"u1": 1, "u2": 2, "pauli": 3, "gadget": 2, "swap": 2, "diag": 2, "phase": 2}[kind]
        k = min(k, n)
        if kind == "swap" and n < 2:
            kind, k = "u1", 1
        qs = [int(q) for q in rng.permutation(n)]
        targets = tuple(qs[:k])
        nc = int(rng.integers(0, min(2, n - k) + 1))
        controls = tuple(qs[k : k + nc])
        states = tuple(int(s) for s in rng.integers(0, 2, nc))
        if kind in ("u1", "u2"):
            m = random_unitary(k, rng)
            c.unitary(m, targets, controls, states)
        elif kind == "pauli":
            label = "".join(rng.choice(list("XYZ"), k))
            c.pauli(label, targets, controls, states)
            m = pauli_matrix(label)
        elif kind == "gadget":
            label = "".join(rng.choice(list("XYZ"), k))
            theta = float(rng.uniform(-3, 3))
            c.pauli_gadget(theta, label, targets, controls, states)
            m = _gadget(theta, label)
        elif kind == "swap":
            c.swap(*targets, controls=controls, control_states=states)
            m = np.eye(4)[[0, 2, 1, 3]]
        elif kind == "phase":
            theta = float(rng.uniform(-3, 3))
            c.phase_gadget(theta, targets, controls, states)
            m = _gadget(theta, "Z" * k)
        else:
            d = np.exp(1j * rng.uniform(0, 6.3, 1 << k))
            c.diagonal(d, targets, controls, states)
            m = np.diag(d)
        mats.append((m, targets, controls, states))
    return n, c, mats


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(circuits(), st.data())
def test_random_circuit_matches_reference_for_random_chunkings(case, data):
    n, circuit, mats = case
    want = np.zeros(1 << n, dtype=complex)
    want[0] = 1
    for m, t, c, s in mats:
        want = operator(m, t, c, s, n) @ want
    chunkings = data.draw(st.lists(st.integers(0, n), min_size=1, max_size=3, unique=True))
    for L in chunkings:
        for device in DEVICES:
            got = dasq.simulate(circuit, chunk_qubits=L, device=device).to_numpy()
            np.testing.assert_allclose(got, want, atol=1e-10, err_msg=f"L={L} device={device}")


@pytest.mark.parametrize("device", DEVICES)
def test_every_chunking_g_0_to_7_agrees_on_a_seeded_8_qubit_circuit(device):
    rng = np.random.default_rng(11)
    c = dasq.Circuit(8)
    for _ in range(15):
        a, b, d = (int(q) for q in rng.permutation(8)[:3])
        c.unitary(random_unitary(1, rng), a).cx(a, b)
        c.pauli_gadget(float(rng.uniform(-2, 2)), "XY", (b, d)).barrier().swap(a, d).unitary(
            random_unitary(2, rng), (d, a), controls=(b,)
        )
    results = [dasq.simulate(c, chunk_qubits=L, device=device).to_numpy() for L in range(1, 9)]
    for L, r in enumerate(results[1:], start=1):
        np.testing.assert_allclose(r, results[0], atol=1e-10, err_msg=f"L={L}")
    assert abs(np.linalg.norm(results[0]) - 1) < 1e-12


@pytest.mark.parametrize("device", DEVICES)
def test_a_constant_per_block_after_a_wide_operation_is_applied(device):
    """A diagonal on global qubits alone is a constant per block, which the fuser adds
    to the group before it; when that group is one operation too wide to fuse, the
    runner applied only its first operation (found by the random-circuit property on
    the GPU twin, whose fused groups are narrow; the CPU lost it the same way)."""
    rng = np.random.default_rng(3)
    u = random_unitary(6, rng)
    phases = np.exp(1j * np.array([0.3, 1.1, 2.0, 2.9]))
    c = dasq.Circuit(9).h(7).h(8).unitary(u, (0, 1, 2, 3, 4, 5), controls=(7,)).diagonal(phases, (7, 8))
    want = np.zeros(1 << 9, dtype=complex)
    want[0] = 1
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    for m, t, ctl, s in [(h, (7,), (), ()), (h, (8,), (), ()), (u, (0, 1, 2, 3, 4, 5), (7,), (1,)),
                         (np.diag(phases), (7, 8), (), ())]:  # fmt: skip
        want = operator(m, t, ctl, s, 9) @ want
    got = dasq.simulate(c, chunk_qubits=6, device=device)
    groups = [g for step in got.plan.steps for g in getattr(step, "groups", ())]
    assert any(not g.fused and len(g.ops) == 2 for g in groups)  # the case: a wide group and a constant
    np.testing.assert_allclose(got.to_numpy(), want, atol=1e-10)
