"""The notebooks of examples/ run top to bottom (nbclient) and show what they promise:
the HTML reprs of circuits, states, plans and reports carry their key fields."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WIDGET = "application/vnd.jupyter.widget-view+json"


def _execute(name: str, tmp_path: Path) -> list[dict]:
    """Run the notebook in ``tmp_path``; the outputs of each code cell, in order."""
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    return [cell.outputs for cell in notebook.cells if cell.cell_type == "code"]


def _html(outputs: list) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def _text(outputs: list) -> str:
    return "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in outputs)


def _has_image(outputs: list) -> bool:
    return any("image/png" in o.get("data", {}) for o in outputs)


def test_every_notebook_is_tested():
    assert {p.name for p in EXAMPLES.glob("*.ipynb")} == {
        "quickstart.ipynb",
        "noisy.ipynb",
        "out_of_core.ipynb",
    }


def test_quickstart_notebook(tmp_path):
    cells = _execute("quickstart.ipynb", tmp_path)
    setup, circuit, state, plan, report, plan_picture, histogram, counts, close = cells
    assert "dashboard: http" in _text(setup)
    assert any(WIDGET in o.get("data", {}) for o in state)  # simulate(progress=True)'s progress widget
    assert "still alive" not in _text(close)  # the workers exited by themselves
    assert "<b>dasq.Circuit</b>: 14 qubits" in _html(circuit) and "<tr><td>cx</td><td>13</td></tr>" in _html(
        circuit
    )
    text = _html(state)
    assert "<b>dasq.StateVector</b>: 14 qubits, complex128" in text
    assert "on a cluster (2 workers, <a href='http" in text and "/status'>dashboard</a>" in text
    assert "<b>dasq.PhysicalPlan</b>" in _html(plan)
    assert "<th>between workers (amplitudes)</th><th>received (bytes)</th>" in _html(report)
    assert _has_image(plan_picture) and _has_image(histogram)
    assert "'00000000000000'" in _text(counts) and "'11111111111111'" in _text(counts)


def test_noisy_notebook(tmp_path):
    cells = _execute("noisy.ipynb", tmp_path)
    model, rho, numbers, counts, histogram, reduced = cells
    assert "depolarize(2q) after cx" in _text(model)
    assert "<b>dasq.DensityMatrix</b> of 6 qubits" in _html(rho)
    purity = float(_text(numbers).split("purity")[1].split()[0])
    assert 0.5 < purity < 1.0  # noise made the state mixed
    assert "'000000'" in _text(counts) and "'111111'" in _text(counts)
    assert _has_image(histogram)
    assert "<b>dasq.DensityMatrix</b> of 4 qubits" in _html(reduced)


def test_out_of_core_notebook(tmp_path):
    cells = _execute("out_of_core.ipynb", tmp_path)
    _setup, plan, state, facts, again, _cleanup = cells
    assert "<b>dasq.PhysicalPlan</b>" in _html(plan)
    assert "stored in" in _html(state) and "18 qubits" in _html(state)
    assert "'complete': True" in _text(facts)
    assert "[0.25 0.25 0.25 0.25]" in _text(again)
