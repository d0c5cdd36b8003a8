"""A distributed client that cannot run work (closed, or cut off from its scheduler) is
refused at the call with one ValidationError that says so and what to pass instead,
not an AttributeError from deep inside distributed, and before a store is created."""

from __future__ import annotations

import pytest

import dasq

distributed = pytest.importorskip("distributed")
from distributed import Client  # noqa: E402

# The check belongs in dasq/circuit/validation.py's check_client, which every entry point
# calls (simulate, run, resume, warm_up, the batches, StateVector.from_zarr): until it
# refuses a client whose status is not "running", these fail as the issue describes.
CLOSED = r"client is closed \(status 'closed'\): pass an open distributed\.Client.*client=None"


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    """Any cluster: the shared one (tests/conftest.py)."""
    return shared_cluster


@pytest.fixture(scope="module")
def closed_client(cluster):
    client = Client(cluster, set_as_default=False)
    client.close()
    return client


def _bell() -> dasq.Circuit:
    return dasq.Circuit(2).h(0).cx(0, 1)


def test_simulate_and_run_refuse_a_closed_client(closed_client):
    with pytest.raises(dasq.ValidationError, match=CLOSED):
        dasq.simulate(_bell(), client=closed_client)
    with pytest.raises(dasq.ValidationError, match=CLOSED):
        dasq.simulate(_bell(), client=closed_client, chunk_qubits=1, density=True)
    with pytest.raises(dasq.ValidationError, match=CLOSED):
        dasq.run(_bell().measure_all(), 10, client=closed_client)


def test_a_stored_run_refuses_a_closed_client_before_creating_its_store(closed_client, tmp_path):
    store = tmp_path / "s.zarr"
    with pytest.raises(dasq.ValidationError, match=CLOSED):
        dasq.simulate(_bell(), client=closed_client, store=store)
    assert not store.exists()


def test_a_client_cut_off_from_its_scheduler_is_refused_too(cluster):
    with Client(cluster, set_as_default=False) as client:
        client.status = "connecting"  # what a client that lost its scheduler says while it retries
        try:
            with pytest.raises(dasq.ValidationError, match=r"not connected to its scheduler \(status 'conn"):
                dasq.simulate(_bell(), client=client)
        finally:
            client.status = "running"
        assert dasq.simulate(_bell(), client=client).probabilities().sum() == pytest.approx(1)
