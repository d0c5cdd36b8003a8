"""What a notebook shows: the HTML reprs carry the fields a user looks for."""

from __future__ import annotations

import re

import pytest

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


def test_circuit_html_has_size_counts_and_a_drawing():
    circuit = _circuit().measure_all()
    text = circuit._repr_html_()
    assert "<b>dasq.Circuit</b>: 6 qubits, 6 classical bits, 12 operations, depth" in text
    assert "<tr><td>cx</td><td>3</td></tr>" in text and "<tr><td>measure</td><td>6</td></tr>" in text
    try:
        import qiskit  # noqa: F401
    except ImportError:
        assert "ry(" in text  # the operation list
    else:
        assert "<pre" in text and "┤ H ├" in text  # Qiskit's drawing
        assert "┤ H ├" in circuit.draw()
    big = dasq.Circuit(50).h(0)
    assert "<pre" not in big._repr_html_() and big.draw() == str(big)  # too wide to draw: listed


def test_report_html_on_threads_has_no_cluster_columns():
    state = dasq.simulate(_circuit(), chunk_qubits=3)
    text = state.report._repr_html_()
    assert "<th>moved (amplitudes)</th>" in text and "between workers" not in text
    assert not state.report.on_cluster


def test_plots_draw_the_distribution_and_the_plan():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    state = dasq.simulate(_circuit(), chunk_qubits=3)
    ax = dasq.plot_probabilities(state, [0, 5])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["00", "01", "10", "11"]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx(list(state.probabilities([0, 5])))
    top = dasq.plot_probabilities(state, top=3)
    assert len(top.patches) == 3
    fig = dasq.plot_plan(state.plan)
    where, moves = fig.axes[:2]
    positions = dasq.plot.plan_positions(state.plan)
    assert positions.shape == (len(state.plan.steps) + 1, 6)
    local = where.images[0].get_array()
    assert (
        local.shape == (6, len(state.plan.steps) + 1) and local.sum(axis=0).tolist() == [3] * local.shape[1]
    )
    assert len(moves.patches) == len(state.plan.steps) + 1
    assert max(p.get_height() for p in moves.patches) == max(
        s.traffic(6, 3).amplitudes_moved for s in state.plan.steps
    )
    with pytest.raises(dasq.ValidationError, match="too many bars"):
        dasq.plot_probabilities(dasq.simulate(dasq.Circuit(7).h(0)))


def test_a_plan_counts_in_words_that_agree_with_the_count():
    one = str(dasq.plan(dasq.Circuit(5).h(0))).splitlines()[0]
    assert "1 operation on 5 qubits" in one and "1 step, 1 stage, 0 relayouts, 0 amplitudes moved" in one
    many = dasq.plan(_circuit(), chunk_qubits=3)
    head = str(many).splitlines()[0]
    assert f"{len(many.steps)} steps, {len(many.stages)} stages" in head
