"""Recorded communication of per-operation lowering against the seed paper's Table I.

N = 7 qubits in blocks of 2^4 (g = 3 global qubits: 4, 5, 6); Sigma = 2^7 amplitudes.
``amplitudes_moved`` counts amplitudes that a task reads from another block;
``amplitudes_renamed`` counts blocks relabelled without a copy, which Table I's
MPI ranks would have to send (their block<->rank binding is fixed).
"""

from __future__ import annotations

import numpy as np
import pytest

import dasq

N, L = 7, 4
SIGMA = 1 << N
LOCAL, GLOBAL = (0, 2, 3), (4, 5, 6)


def _traffic(build):
    """The one operation's record: its steps' traffic counted from the graph, which
    must also equal the traffic the plan predicts without building a graph."""
    c = dasq.Circuit(N)
    build(c)
    psi = np.random.default_rng(0).normal(size=SIGMA) + 0j  # every block holds amplitudes
    state = dasq.simulate(c, initial=psi / np.linalg.norm(psi), chunk_qubits=L, method="per-operation")
    assert {r.origin for r in state.report.records} == {0}
    rec = state.report.for_operation(0)
    assert rec.traffic == state.plan.traffic
    return rec


@pytest.mark.parametrize("t", LOCAL + GLOBAL)
def test_one_target_gate_moves_sigma_or_nothing(t):
    rec = _traffic(lambda c: c.h(t))
    assert rec.traffic.amplitudes_moved == (SIGMA if t >= L else 0)
    assert rec.traffic.amplitudes_renamed == 0
    assert rec.path == ("pair-exchange" if t >= L else "local")


@pytest.mark.parametrize("controls", [(0,), (0, 1), (0, 1, 2), (5,), (0, 6), (5, 6), (0, 1, 6)])
def test_s_control_one_target_moves_sigma_over_2s(controls):
    t = 4
    rec = _traffic(lambda c: c.ry(0.3, t, controls=controls, control_states=[0] * len(controls)))
    assert rec.traffic.amplitudes_moved == SIGMA >> len(controls)
    rec_local = _traffic(lambda c: c.ry(0.3, 3, controls=controls))
    assert rec_local.traffic.amplitudes_moved == 0


def test_global_controls_leave_unselected_blocks_without_a_task():
    rec = _traffic(lambda c: c.h(0, controls=(5, 6)))
    assert rec.tasks == (1 << (N - L)) // 4  # only blocks with bits 5 and 6 set
    rec = _traffic(lambda c: c.x(4, controls=(5, 6)))
    assert rec.tasks == 0 and rec.traffic.amplitudes_renamed == SIGMA // 4


@pytest.mark.parametrize(
    "a,b,moved,renamed",
    [
        (0, 3, 0, 0),  # local-local: in place
        (2, 5, SIGMA // 2, 0),  # global-local: half of every block travels (Alg. 9)
        (4, 6, 0, SIGMA // 2),  # global-global: blocks renamed, nothing copied
    ],
)
def test_swap_moves_at_most_half(a, b, moved, renamed):
    rec = _traffic(lambda c: c.swap(a, b))
    assert rec.traffic.amplitudes_moved == moved
    assert rec.traffic.amplitudes_renamed == renamed
    assert moved + renamed <= SIGMA // 2


@pytest.mark.parametrize(
    "label,targets,table",
    [
        ("XYZ", (0, 2, 3), 0),
        ("ZZZ", (0, 4, 6), 0),
        ("XZY", (0, 4, 6), SIGMA),
        ("XXXX", (4, 5, 6, 0), SIGMA),
    ],
)
def test_pauli_tensor_is_sigma_or_nothing(label, targets, table):
    rec = _traffic(lambda c: c.pauli(label, targets))
    t = rec.traffic
    assert t.amplitudes_moved + t.amplitudes_renamed == table
    assert t.amplitudes_moved == 0  # on Dask the global part is a rename, computed in place


@pytest.mark.parametrize("targets", [(0, 1), (0, 5), (4, 5, 6), (1, 2, 3, 4, 5, 6)])
def test_phase_gadget_never_communicates(targets):
    rec = _traffic(lambda c: c.phase_gadget(0.4, targets))
    assert rec.traffic.amplitudes_moved == 0 and rec.traffic.amplitudes_renamed == 0


@pytest.mark.parametrize(
    "label,targets,moved",
    [("XY", (0, 1), 0), ("ZZ", (5, 6), 0), ("XZ", (5, 6), SIGMA), ("YXZ", (0, 4, 6), SIGMA)],
)
def test_pauli_gadget_is_sigma_or_nothing(label, targets, moved):
    rec = _traffic(lambda c: c.pauli_gadget(0.4, label, targets))
    assert rec.traffic.amplitudes_moved == moved


@pytest.mark.parametrize("targets", [(0, 4), (4, 5), (1, 4, 5, 6)])
def test_diagonals_never_communicate(targets):
    values = np.exp(1j * np.arange(1 << len(targets)))
    rec = _traffic(lambda c: c.diagonal(values, targets))
    assert rec.traffic.amplitudes_moved == 0 and rec.path == "diagonal"


@pytest.mark.parametrize("targets", [(0, 4), (4, 5), (1, 4, 5, 6), (4, 5, 6)])
def test_many_target_gate_is_two_fused_relayouts(targets):
    """Alg. 10 with fused swaps: k global targets cost 2 (1 - 2^-k) Sigma, one exchange each way."""
    k = sum(1 for t in targets if t >= L)
    u = np.linalg.qr(np.random.default_rng(0).normal(size=(1 << len(targets),) * 2))[0]
    rec = _traffic(lambda c: c.unitary(u, targets))
    assert rec.path == "relayout"
    assert rec.traffic.amplitudes_moved == 2 * (SIGMA - (SIGMA >> k))


def test_report_totals_and_json_view():
    c = dasq.Circuit(N).h(5).swap(0, 6).cz(4, 5)
    state = dasq.simulate(c, chunk_qubits=L, method="per-operation")
    r = state.report
    assert r.amplitudes_moved == SIGMA + SIGMA // 2
    assert r.exchanges == 2
    d = r.as_dict()
    assert d["amplitudes_moved"] == r.amplitudes_moved and len(d["steps"]) == 3
    assert [s["path"] for s in d["steps"]] == ["pair-exchange", "swap-exchange", "diagonal"]
    assert "pair-exchange" in str(r)
