"""Stores hold plain data: a JSON manifest, a JSON circuit record and zarr arrays.
Nothing read from a store is executed: crafted pickles are never opened."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import dask
import numpy as np
import pytest
from faults import fill_disk_after

import dasq
from dasq.cli import main
from dasq.storage import store as store_module
from dasq.storage.manifest import MANIFEST, Manifest


def circuit() -> dasq.Circuit:
    c = dasq.Circuit(8)
    for q in range(8):
        c.h(q)
    for q in range(7):
        c.cp(0.1 * (q + 1), q, 7 - q).cx(q, q + 1)
    return c


STORE_OPTIONS = {"memory_limit": 2 * 8 * 16 << 4, "chunk_qubits": 4}


@pytest.fixture(autouse=True)
def _small_storage_chunks():
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        yield


class Trap:
    """Unpickling this creates ``marker``: proof that code from the store ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def plant_pickle(store: Path, marker: Path) -> None:
    (store / "dasq-run.pkl").write_bytes(pickle.dumps(Trap(marker)))


def test_a_store_of_the_pickle_format_is_refused_without_unpickling(tmp_path, capsys):
    store, marker = tmp_path / "old.zarr", tmp_path / "ran-code"
    c = circuit()
    dasq.simulate(c, store=store, **STORE_OPTIONS)
    manifest = json.loads((store / MANIFEST).read_text())
    manifest["format_version"] = 1  # what dasq 0.1 wrote, with its pickled run file
    (store / MANIFEST).write_text(json.dumps(manifest))
    plant_pickle(store, marker)
    for call in (
        lambda: dasq.info(store),
        lambda: dasq.resume(store),
        lambda: dasq.simulate(c, store=store),
        lambda: dasq.StateVector.from_zarr(store),
    ):
        with pytest.raises(dasq.StoreError, match="never unpickles"):
            call()
    for argv in (["info", str(store)], ["resume", str(store)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "never unpickles" in err and "\n" not in err
    assert not marker.exists()


@pytest.mark.parametrize("complete", [True, False])
def test_a_planted_pickle_is_ignored_by_info_resume_and_open(tmp_path, monkeypatch, complete):
    store, marker = tmp_path / "s.zarr", tmp_path / "ran-code"
    c = circuit()
    want = dasq.simulate(c).to_numpy()
    if not complete:  # the disk fills up in the second stage: a resumable, incomplete store
        free_disk = fill_disk_after(monkeypatch, 20)
        with pytest.raises(dasq.StoreError, match="disk is full"):
            dasq.simulate(c, store=store, **STORE_OPTIONS)
        free_disk()
    else:
        dasq.simulate(c, store=store, **STORE_OPTIONS)
    plant_pickle(store, marker)
    assert dasq.info(store)["complete"] is complete
    np.testing.assert_allclose(dasq.resume(store).to_numpy(), want, atol=1e-12)
    np.testing.assert_allclose(dasq.simulate(c, store=store).to_numpy(), want, atol=1e-12)
    np.testing.assert_allclose(dasq.StateVector.from_zarr(store).to_numpy(), want, atol=1e-12)
    assert not marker.exists()


def test_the_run_record_is_json_and_arrays(tmp_path):
    store = tmp_path / "s.zarr"
    c = circuit()
    dasq.simulate(c, store=store, **STORE_OPTIONS)
    record = json.loads((store / store_module.RUN_RECORD).read_text())
    assert record["format"] == "dasq-circuit" and len(record["operations"]) == len(c)
    assert not list(store.glob("*.pkl"))
    manifest = json.loads((store / MANIFEST).read_text())
    assert manifest["format_version"] == 3 and manifest["plan_digest"]


def test_a_circuit_with_classical_registers_is_stored_and_resumed(tmp_path):
    # the run record holds the computation, the readout record the creg and the
    # measurements left to sampling: resume finds the very circuit the manifest names
    store = tmp_path / "ghz.zarr"
    c = dasq.Circuit.from_qasm(str(Path(__file__).parents[1] / "examples" / "ghz.qasm"))
    assert c.num_clbits == 5
    first = dasq.simulate(c, store=store, **STORE_OPTIONS).to_numpy()
    record = json.loads((store / store_module.RUN_RECORD).read_text())
    readout = json.loads((store / store_module.READOUT_RECORD).read_text())
    assert record["registers"] == [] and readout["registers"] == [["c", 5]]
    assert [op["kind"] for op in readout["operations"]] == ["measure"] * 5
    np.testing.assert_array_equal(dasq.resume(store).to_numpy(), first)
    np.testing.assert_allclose(np.abs(first[[0, 31]]) ** 2, [0.5, 0.5], atol=1e-12)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda s: (s / store_module.RUN_RECORD).write_text("{not json"), "cannot be read"),
        (lambda s: (s / store_module.RUN_RECORD).unlink(), "cannot be read"),
        (lambda s: _edit_record(s, lambda r: r["operations"][0].update(kind="evil")), "damaged"),
        (lambda s: _edit_record(s, lambda r: r["operations"].pop()), "does not hold the circuit"),
        (lambda s: _edit_manifest(s, plan_digest="0" * 64), "planned differently"),  # a consistent manifest
        (lambda s: _edit(s / MANIFEST, lambda m: m.update(format_version=7)), "format version 7"),
    ],
)
def test_a_damaged_run_record_is_refused_clearly(tmp_path, damage, match):
    store = tmp_path / "s.zarr"
    dasq.simulate(circuit(), store=store, **STORE_OPTIONS)
    damage(store)
    with pytest.raises(dasq.StoreError, match=match):
        dasq.resume(store)


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _edit_manifest(store: Path, **changes) -> None:
    """Change manifest fields and re-sign them, as a dasq with another planner would write them."""
    data = json.loads((store / MANIFEST).read_text())
    data.update(changes)
    data["digest"] = Manifest(**{**data, "digest": ""}).fields_digest()
    (store / MANIFEST).write_text(json.dumps(data))


def _edit_record(store: Path, change) -> None:
    _edit(store / store_module.RUN_RECORD, change)
