"""What a notebook shows: the HTML reprs carry the fields a user looks for."""

from __future__ import annotations

import re

import dasq


def _circuit() -> dasq.Circuit:
    return dasq.Circuit(6).h(0).cx(0, 5).cx(5, 2).ry(0.3, 4).cx(4, 1)


def test_state_html_names_qubits_dtype_blocks_layout_place_and_plan():
    state = dasq.simulate(_circuit(), chunk_qubits=3, dtype="complex64")
    text = state._repr_html_()
    assert "<b>dasq.StateVector</b>: 6 qubits, complex64, 8 blocks of 2<sup>3</sup> amplitudes" in text
    assert f"layout (position of each qubit): {list(state.layout)}" in text
    assert "in memory" in text
    assert f"{len(state.plan.stages)} stages, {len(state.plan.relayouts)} relayouts" in text
    assert f"{state.report.amplitudes_moved} amplitudes moved" in text


def test_plan_html_is_a_table_with_one_row_per_step():
    plan = dasq.plan(_circuit(), chunk_qubits=2)
    text = plan._repr_html_()
    assert len(re.findall(r"<tr><td>\d+</td>", text)) == len(plan.steps) > 1
    assert f"{plan.amplitudes_moved} amplitudes moved" in text
    assert "<th>moved</th>" in text and "relayout" in text


def test_density_matrix_and_stored_state_html(tmp_path):
    dm = dasq.simulate(_circuit().depolarize(0.1, 2), density=True, chunk_qubits=8)
    text = dm._repr_html_()
    assert "<b>dasq.DensityMatrix</b> of 6 qubits, held as its Choi vector: 12 qubits" in text
    stored = dasq.simulate(_circuit(), store=tmp_path / "s.zarr", chunk_qubits=4)
    assert f"stored in {stored.store}" in stored._repr_html_()
