"""``simulate(..., client=client, progress=True)``: in a Jupyter kernel the progress
widget distributed builds is displayed (distributed returns it, and a returned value
is shown only when a cell ends with it); elsewhere the text bar is printed."""

from __future__ import annotations

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("ipywidgets")
pytest.importorskip("IPython")

import IPython.display  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from distributed.diagnostics.progressbar import MultiProgressWidget  # noqa: E402

import dasq  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as c,
    ):
        yield c


def _circuit() -> dasq.Circuit:
    c = dasq.Circuit(8)
    for q in range(8):
        c.h(q)
    return c.cx(0, 7).rz(0.3, 7)


@pytest.mark.parametrize("relayout_method", ["direct", "packed"])  # a program per worker, or a task graph
def test_a_kernel_displays_the_widget(client, monkeypatch, relayout_method):
    shown = []
    monkeypatch.setattr(distributed.utils, "is_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    state = dasq.simulate(
        _circuit(), client=client, progress=True, chunk_qubits=6, relayout_method=relayout_method
    )
    assert len(shown) == 1 and isinstance(shown[0], MultiProgressWidget)
    np.testing.assert_allclose(state.probabilities([0]), [0.5, 0.5], atol=1e-12)


def test_a_terminal_prints_the_text_bar(client, monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(distributed.utils, "is_kernel", lambda: False)
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    dasq.simulate(_circuit(), client=client, progress=True, chunk_qubits=6)
    assert not shown and "100% Completed" in capsys.readouterr().out
