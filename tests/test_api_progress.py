"""``simulate(..., client=client, progress=True)``. A run of programs (the default
on a cluster) draws dasq's bar over the plan's steps (tqdm: text in a terminal, a
widget in Jupyter), moved from the calling thread as the workers finish each step
(tests/test_cluster_progress.py times it). A task graph shows distributed's bar: in a
Jupyter kernel its widget is displayed (distributed returns it, and a returned value
is shown only when a cell ends with it); elsewhere its text bar is printed."""

from __future__ import annotations

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("ipywidgets")
pytest.importorskip("IPython")

import IPython.display  # noqa: E402
from distributed.diagnostics.progressbar import MultiProgressWidget  # noqa: E402

import dasq  # noqa: E402


@pytest.fixture(scope="module")
def client(shared_client):
    """Any cluster: the shared one (tests/conftest.py)."""
    return shared_client


def _circuit() -> dasq.Circuit:
    c = dasq.Circuit(8)
    for q in range(8):
        c.h(q)
    return c.cx(0, 7).rz(0.3, 7)


def test_a_kernel_displays_distributeds_widget_for_a_task_graph(client, monkeypatch):
    shown = []
    monkeypatch.setattr(distributed.utils, "is_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    state = dasq.simulate(_circuit(), client=client, progress=True, chunk_qubits=6, relayout_method="packed")
    assert len(shown) == 1 and isinstance(shown[0], MultiProgressWidget)
    np.testing.assert_allclose(state.probabilities([0]), [0.5, 0.5], atol=1e-12)


def test_a_terminal_prints_distributeds_text_bar_for_a_task_graph(client, monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(distributed.utils, "is_kernel", lambda: False)
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    dasq.simulate(_circuit(), client=client, progress=True, chunk_qubits=6, relayout_method="packed")
    assert not shown and "100% Completed" in capsys.readouterr().out


@pytest.mark.parametrize("kernel", [True, False])
def test_a_run_of_programs_draws_the_steps_bar(client, monkeypatch, capsys, kernel):
    """Wherever it runs: the steps bar (tqdm.auto picks a widget in Jupyter), never
    distributed's widget, which a blocked cell would only draw once it returned."""
    shown = []
    monkeypatch.setattr(distributed.utils, "is_kernel", lambda: kernel)
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    state = dasq.simulate(_circuit(), client=client, progress=True, chunk_qubits=6)
    assert state.blocks.name.startswith("dasq-direct-")
    total = len(state.plan.steps)
    drawn = capsys.readouterr()
    assert not shown and "Completed" not in drawn.out
    assert "dasq steps" in drawn.err and f"{total}/{total}" in drawn.err
    np.testing.assert_allclose(state.probabilities([0]), [0.5, 0.5], atol=1e-12)
