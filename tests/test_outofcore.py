"""Out-of-core runs (store=, memory_limit=): same amplitudes as in memory, bounded
memory, crash-safe resume, integrity, refusal of mismatched stores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import dask
import numpy as np
import pytest
from faults import fill_disk_after
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from reference import operator
from test_random_circuits import circuits

import dasq
from dasq.cli import main
from dasq.plan import lowering
from dasq.storage import store as st
from dasq.storage.contained import Contained
from dasq.storage.manifest import Manifest

ITEM = {"complex128": 16, "complex64": 8}


def random_circuit(n: int, layers: int, seed: int) -> dasq.Circuit:
    """Layers of random one-qubit unitaries and CX bricks, plus long-range phases:
    wide enough that small blocks need several stages and relayouts."""
    rng = np.random.default_rng(seed)
    c = dasq.Circuit(n)
    for layer in range(layers):
        for q in range(n):
            c.u(*rng.uniform(0, 6.3, 3), q)
        for q in range(layer % 2, n - 1, 2):
            c.cx(q, q + 1)
        a, b = (int(v) for v in rng.choice(n, 2, replace=False))
        c.cp(float(rng.uniform(0, 6.3)), a, b)
        a, b = (int(v) for v in rng.choice(n, 2, replace=False))
        c.swap(a, b)
    return c


def ooc(L: int, dtype: str = "complex128") -> dict:
    """Blocks of 2^L amplitudes and memory for two workers."""
    return {"memory_limit": 2 * 4 * ITEM[dtype] << L, "chunk_qubits": L}


@pytest.fixture(autouse=True)
def _small_storage_chunks():
    """Chunks as small as the relayouts allow, so small states gather many chunks."""
    with dask.config.set({"dasq.min-storage-chunk-qubits": 0}):
        yield


def reference_state(circuit: dasq.Circuit) -> np.ndarray:
    return dasq.simulate(circuit, dtype="complex128").to_numpy()


# --------------------------------------------------------------- correctness
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(circuits(), hst.data())
def test_random_circuits_match_the_dense_reference_out_of_core(case, data):
    n, circuit, mats = case
    want = np.zeros(1 << n, dtype=complex)
    want[0] = 1
    for m, t, c, s in mats:
        want = operator(m, t, c, s, n) @ want
    min_local = max((len(lowering.needs_local(op)) for op in circuit), default=0)
    L = data.draw(hst.integers(max(min_local, 1) if n else 0, n))
    with tempfile.TemporaryDirectory() as tmp:
        state = dasq.simulate(circuit, store=Path(tmp) / "s.zarr", **ooc(L))
        np.testing.assert_allclose(state.to_numpy(), want, atol=1e-10)


# each codec and each precision once (each pass writes hundreds of tiny chunk files)
@pytest.mark.parametrize(
    ("compression", "dtype"), [(None, "complex64"), ("zstd", "complex128"), ("blosc", "complex64")]
)
def test_out_of_core_equals_in_memory(tmp_path, dtype, compression):
    c = random_circuit(10, 5, seed=3)
    want = dasq.simulate(c, dtype=dtype).to_numpy()
    state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(6, dtype), dtype=dtype, compression=compression)
    assert state.chunk_qubits <= 6 and state.plan.summary()["relayouts"] >= 2
    tol = 1e-12 if dtype == "complex128" else 1e-5
    np.testing.assert_allclose(state.to_numpy(), want, atol=tol)
    # every read-out streams from the store
    assert state.probabilities([0, 3]) == pytest.approx(dasq.simulate(c).probabilities([0, 3]), abs=10 * tol)
    assert state.expectation("Z" * 10) == pytest.approx(dasq.simulate(c).expectation("Z" * 10), abs=10 * tol)
    assert dasq.info(tmp_path / "s.zarr")["codec"]["compression"] == compression


def test_basis_initial_state_and_global_phase(tmp_path):
    c = random_circuit(9, 3, seed=5)
    c.global_phase = 0.7
    want = dasq.simulate(c, initial=37).to_numpy()
    got = dasq.simulate(c, initial=37, store=tmp_path / "s.zarr", **ooc(5)).to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_the_relayout_is_folded_into_reads_one_read_and_one_write_per_stage(tmp_path):
    c = random_circuit(11, 6, seed=1)
    state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(6))
    m = Manifest.read(tmp_path / "s.zarr")
    stages = state.plan.stages
    assert len(stages) == m.stages_total >= 3
    # storage chunks are small enough that every relayout gathers whole chunks
    assert m.storage_qubits == m.chunk_qubits - max(len(r.pairs) for r in state.plan.relayouts)
    # no separate relayout passes: one record (one pass) per stage
    assert len(state.report.records) == len(stages)


def test_passes_after_a_basis_state_skip_the_pieces_of_zero_blocks(tmp_path, monkeypatch):
    """A basis state is zero in all blocks but one and a program keeps zeros zero: the
    first pass runs one block, and the pass after it reads only the pieces that come
    from that block (a block gathered only from zero blocks is written, not run)."""
    from dasq.engine import stream

    reads: dict[int, int] = {}
    read = stream.st.read_into

    def counted(path, name, starts, out, rows, verifies, store_id, crcs, stage):
        reads[stage] = reads.get(stage, 0) + len(starts)
        return read(path, name, starts, out, rows, verifies, store_id, crcs, stage)

    monkeypatch.setattr(stream.st, "read_into", counted)
    c = random_circuit(9, 3, seed=8)
    state = dasq.simulate(c, initial=345, store=tmp_path / "s.zarr", **ooc(5))
    relayouts = state.plan.relayouts
    assert len(relayouts) >= 2 and len(relayouts[0].pairs) == 9 - 5
    # pass 1: each of the 2^k blocks that gather a piece from the basis state's block
    # reads that piece alone; all 2^4 blocks hold amplitudes after it (k = 4), so
    # pass 2 reads every piece
    assert reads[1] == 1 << 4
    assert reads[2] == 1 << (4 + len(relayouts[1].pairs))
    want = dasq.simulate(c, initial=345).to_numpy()
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_empty_circuit_stores_the_basis_state(tmp_path):
    state = dasq.simulate(dasq.Circuit(5), initial=6, store=tmp_path / "s.zarr", **ooc(3))
    want = np.zeros(32)
    want[6] = 1
    np.testing.assert_allclose(state.to_numpy(), want)


def test_to_zarr_and_from_zarr_round_trip(tmp_path):
    c = random_circuit(8, 4, seed=2)
    state = dasq.simulate(c, chunk_qubits=5)
    state.to_zarr(tmp_path / "saved.zarr")
    back = dasq.StateVector.from_zarr(tmp_path / "saved.zarr")
    np.testing.assert_allclose(back.to_numpy(), state.to_numpy(), atol=1e-15)
    assert dasq.info(tmp_path / "saved.zarr")["complete"]
    with pytest.raises(dasq.StoreError, match="exists"):
        state.to_zarr(tmp_path / "saved.zarr")


def test_a_density_matrix_round_trips_through_a_store_and_is_opened_as_one(tmp_path):
    """DensityMatrix.to_zarr saves rho's Choi vector with the manifest saying so: it
    opens as a density matrix (from_zarr, resume, info), and each kind of store refuses
    the other kind's opener with the one that reads it."""
    c = random_circuit(4, 3, seed=7)
    c.depolarize(0.1, 1).pauli_channel(0.1, 0.05, 0.2, 2)
    rho = dasq.simulate(c, density=True, chunk_qubits=5)
    rho.to_zarr(tmp_path / "rho.zarr")
    back = dasq.DensityMatrix.from_zarr(tmp_path / "rho.zarr")
    assert isinstance(back, dasq.DensityMatrix) and back.num_qubits == 4
    np.testing.assert_allclose(back.to_numpy(), rho.to_numpy(), atol=1e-15)
    assert back.purity() == pytest.approx(rho.purity(), abs=1e-14) and back.purity() < 1 - 1e-3
    resumed = dasq.resume(tmp_path / "rho.zarr")
    assert isinstance(resumed, dasq.DensityMatrix)
    np.testing.assert_allclose(resumed.to_numpy(), rho.to_numpy(), atol=1e-15)
    assert dasq.info(tmp_path / "rho.zarr")["density_qubits"] == 4
    with pytest.raises(dasq.StoreError, match=r"density matrix of 4 qubits: open it with dasq\.Density"):
        dasq.StateVector.from_zarr(tmp_path / "rho.zarr")
    with pytest.raises(dasq.StoreError, match="exists"):
        rho.to_zarr(tmp_path / "rho.zarr")
    dasq.simulate(random_circuit(6, 2, seed=1)).to_zarr(tmp_path / "psi.zarr")
    with pytest.raises(dasq.StoreError, match=r"a state vector of 6 qubits: open it with dasq\.StateVector"):
        dasq.DensityMatrix.from_zarr(tmp_path / "psi.zarr")


def test_a_stored_density_run_opens_as_a_density_matrix(tmp_path):
    c = random_circuit(4, 3, seed=8)
    c.depolarize(0.3, 0)
    stored = dasq.simulate(c, density=True, store=tmp_path / "run.zarr", **ooc(5))
    back = dasq.DensityMatrix.from_zarr(tmp_path / "run.zarr")
    np.testing.assert_allclose(back.to_numpy(), dasq.simulate(c, density=True).to_numpy(), atol=1e-12)
    np.testing.assert_allclose(back.to_numpy(), stored.to_numpy(), atol=1e-15)


# --------------------------------------------------------------- lossy storage
def test_lossy_bit_rounding_reports_the_fidelity_it_cost(tmp_path):
    c = random_circuit(10, 5, seed=4)
    exact = dasq.simulate(c)
    state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(6), keep_bits=8)
    true_fidelity = abs(np.vdot(exact.to_numpy(), state.to_numpy())) ** 2 / state.norm() ** 2
    assert 0.99 < state.storage_fidelity < 1 - 1e-9
    assert state.storage_fidelity == pytest.approx(true_fidelity, abs=5 * (1 - true_fidelity))
    assert dasq.info(tmp_path / "s.zarr")["storage_fidelity"] == state.storage_fidelity


# --------------------------------------------------------------- memory
RSS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import dasq
    from tests_helpers import circuit_for_rss

    def rss(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) * 1024

    # warm up: the kernels (compiled or loaded from numba's cache; a small run's
    # blocks run numpy's array code instead), then a small copy of the run: imports,
    # thread pools
    limit, n = int(sys.argv[2]), int(sys.argv[3])
    codec = json.loads(sys.argv[4])
    dasq.warm_up(dtypes=["complex128"])
    warm = sys.argv[1] + "/warm.zarr"
    dasq.simulate(circuit_for_rss(14), store=warm, memory_limit=limit >> (n - 14), **codec)
    base = rss("VmRSS")
    state = dasq.simulate(circuit_for_rss(n), store=sys.argv[1] + "/big.zarr", memory_limit=limit, **codec)
    print(json.dumps({"base": base, "peak": rss("VmHWM"), "stages": len(state.plan.stages),
                      "L": state.chunk_qubits, "norm": state.norm()}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize("codec", [{}, {"compression": "zstd", "keep_bits": 20}], ids=["raw", "zstd-rounded"])
def test_peak_memory_stays_under_the_budget_for_a_state_8x_larger(tmp_path, codec):
    """Coded chunks (decoded, rounded and compressed in the task's thread) too."""
    n, limit = 24, 32 << 20  # 256 MiB of complex128 amplitudes, 32 MiB of working memory
    assert (16 << n) == 8 * limit
    (tmp_path / "tests_helpers.py").write_text(
        "import dasq\n"
        "def circuit_for_rss(n):\n"
        "    c = dasq.Circuit(n)\n"
        "    for q in range(n): c.h(q)\n"
        "    for q in range(n - 1): c.cx(q, q + 1)\n"
        "    for q in range(n): c.cp(0.1 * q, q, n - 1 - q)\n"
        "    return c\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(tmp_path), str(limit), str(n), json.dumps(codec)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["stages"] >= 2 and facts["norm"] == pytest.approx(1)
    working = facts["peak"] - facts["base"]
    assert working < limit, f"working memory {working / 2**20:.1f} MiB over the {limit / 2**20} MiB budget"


# --------------------------------------------------------------- crash safety
KILL_CIRCUIT = {"n": 10, "layers": 6, "seed": 7}
KILL_L = 6  # 16 blocks per stage (the "simulate" run of tests/resume.py)


def test_disk_full_mid_run_keeps_the_last_stage_and_resume_finishes(tmp_path, monkeypatch):
    store = tmp_path / "s.zarr"
    c = random_circuit(**KILL_CIRCUIT)
    free_disk = fill_disk_after(monkeypatch, 20)
    with pytest.raises(dasq.StoreError, match=r"stage 2 could not be written.*disk is full.*intact.*resume"):
        dasq.simulate(c, store=store, **ooc(KILL_L))
    assert Manifest.read(store).stages_done == 1
    free_disk()
    np.testing.assert_allclose(dasq.resume(store).to_numpy(), reference_state(c), atol=1e-12)


# --------------------------------------------------------------- integrity and refusals
def test_a_flipped_byte_in_a_chunk_is_detected_and_named(tmp_path):
    store = tmp_path / "s.zarr"
    state = dasq.simulate(random_circuit(10, 4, seed=1), store=store, **ooc(6))
    m = Manifest.read(store)
    chunk = store / m.current / "c" / "3"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    with pytest.raises(dasq.StoreError, match=r"corrupted chunk .*/c/3.*crc32c"):
        state.to_numpy()
    with pytest.raises(dasq.StoreError, match=r"corrupted chunk .*/c/3"):
        dasq.StateVector.from_zarr(store).norm()


def test_resume_refuses_a_different_circuit_or_a_non_store(tmp_path):
    store = tmp_path / "s.zarr"
    c = random_circuit(9, 3, seed=1)
    dasq.simulate(c, store=store, **ooc(5))
    other = random_circuit(9, 3, seed=2)
    with pytest.raises(dasq.StoreError, match="different circuit"):
        dasq.simulate(other, store=store, **ooc(5))
    with pytest.raises(dasq.StoreError, match="different circuit"):
        dasq.resume(store, circuit=other)
    with pytest.raises(dasq.StoreError, match="dtype complex128"):
        dasq.simulate(c, store=store, dtype="complex64")
    # the same circuit again simply opens the finished run
    np.testing.assert_allclose(dasq.simulate(c, store=store).to_numpy(), reference_state(c), atol=1e-12)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file").write_text("x")
    with pytest.raises(dasq.StoreError, match="not a dasq store"):
        dasq.resume(tmp_path / "junk")
    with pytest.raises(dasq.StoreError, match="exists and is not a dasq store"):
        dasq.simulate(c, store=tmp_path / "junk")
    with pytest.raises(dasq.StoreError, match="no such directory"):
        dasq.resume(tmp_path / "missing.zarr")
    (tmp_path / "bad.zarr").mkdir()
    (tmp_path / "bad.zarr" / "dasq-manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(dasq.StoreError, match="not a dasq manifest"):
        dasq.resume(tmp_path / "bad.zarr")


def test_refuses_when_disk_space_is_short(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=1000))
    with pytest.raises(dasq.StoreError, match=r"not enough disk .*GiB"):
        dasq.simulate(random_circuit(10, 2, seed=0), store=tmp_path / "s.zarr", **ooc(6))
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize(
    "limit, dtype", [("64KiB", "complex128"), ("16KiB", "complex64"), ("256KiB", "complex128")]
)
def test_the_disk_a_run_is_said_to_need_holds_its_arrays(tmp_path, monkeypatch, limit, dtype):
    """``disk_needed`` (what the free-space check and `dasq info` use) is at least what a
    run's two arrays take on disk as its last stage leaves them, small chunk files'
    whole blocks counted, and no more than their files' sizes (zero blocks are holes)."""
    monkeypatch.setattr(st, "drop_unread_chunks", lambda *args: None)  # the run's peak, kept
    circuit = dasq.Circuit(14).h(0)
    for q in range(13):
        circuit.cx(q, q + 1)
    dasq.simulate(circuit, store=tmp_path / "s", memory_limit=limit, dtype=dtype)
    facts = dasq.info(tmp_path / "s")
    found = [
        os.stat(os.path.join(root, name))
        for array in st.ARRAYS
        for root, _, names in os.walk(tmp_path / "s" / array)
        for name in names
    ]
    taken = sum(f.st_blocks * 512 for f in found)
    sized = sum(-(-f.st_size // st.ALLOCATION_BYTES) * st.ALLOCATION_BYTES for f in found)
    assert facts["stages_done"] == 2  # both arrays written whole
    assert taken <= sized
    assert (
        taken
        <= facts["disk_needed"]
        <= sized + 2 * st.ALLOCATION_BYTES * (1 << (14 - facts["storage_chunk_qubits"]))
    )


def _chunk_files(store: Path) -> dict[str, int]:
    return {a: sum(len(names) for _, _, names in os.walk(store / a / "c")) for a in st.ARRAYS}


def test_a_finished_store_keeps_one_copy_of_the_state(tmp_path, monkeypatch):
    """Once the last stage is done, the array it read loses its chunks (its metadata
    stays): the store holds the state once, reads and verifies as before, and a store
    finished with both copies (by an older dasq) sheds the stale one when reopened."""
    circuit = random_circuit(10, 4, seed=3)
    expected = reference_state(circuit)
    dasq.simulate(circuit, store=tmp_path / "s", **ooc(6))
    facts = dasq.info(tmp_path / "s", verify=True)
    current = Manifest.read(tmp_path / "s").current
    files = _chunk_files(tmp_path / "s")
    assert files[current] == 1 << (10 - facts["storage_chunk_qubits"])
    assert sum(files.values()) == files[current]  # the other array: no chunk left
    assert facts["size_on_disk"] < 0.6 * facts["disk_needed"]
    np.testing.assert_allclose(dasq.resume(tmp_path / "s").to_numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(dasq.StateVector.from_zarr(tmp_path / "s").to_numpy(), expected, atol=1e-12)

    with monkeypatch.context() as m:  # as an older dasq left it: both arrays whole
        m.setattr(st, "drop_unread_chunks", lambda *args: None)
        dasq.simulate(circuit, store=tmp_path / "old", **ooc(6))
    assert all(_chunk_files(tmp_path / "old").values())
    np.testing.assert_allclose(
        dasq.simulate(circuit, store=tmp_path / "old", **ooc(6)).to_numpy(), expected, atol=1e-12
    )
    assert sorted(_chunk_files(tmp_path / "old").values())[0] == 0


def test_chunks_that_cannot_be_removed_only_warn(tmp_path, monkeypatch):
    """The removal is housekeeping: where it fails (a read-only directory of a shared
    store), the finished store still opens, with a warning that says what is left."""
    circuit = random_circuit(10, 4, seed=3)
    with monkeypatch.context() as m:
        m.setattr(st, "drop_unread_chunks", lambda *args: None)
        dasq.simulate(circuit, store=tmp_path / "s", **ooc(6))

    def refused(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted", "9")

    monkeypatch.setattr(Contained, "remove", refused)
    with pytest.warns(RuntimeWarning, match=r"chunks of array '.', .* could not be removed \(Operation not"):
        state = dasq.resume(tmp_path / "s")
    np.testing.assert_allclose(state.to_numpy(), reference_state(circuit), atol=1e-12)


def test_unwritable_paths_give_one_clear_error(tmp_path):
    with pytest.raises(dasq.StoreError, match="does not exist"):
        dasq.simulate(dasq.Circuit(3).h(0), store=tmp_path / "no" / "such" / "s.zarr")
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        with pytest.raises(dasq.StoreError, match="not writable"):
            dasq.simulate(dasq.Circuit(3).h(0), store=ro / "s.zarr")


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"memory_limit": "lots"}, ValueError, "4GiB"),
        ({"memory_limit": -5}, ValueError, "positive"),
        ({"memory_limit": 64}, ValueError, "too small"),
        ({"compression": "lz77"}, ValueError, "compression must be one of"),
        ({"keep_bits": 60}, ValueError, "between 1 and 52"),
        ({"initial": np.ones(8) / 8**0.5}, ValueError, "basis state"),
        ({"method": "per-operation"}, ValueError, "planner"),
    ],
)
def test_bad_out_of_core_arguments(tmp_path, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        dasq.simulate(dasq.Circuit(3).h(0).cx(0, 2), store=tmp_path / "s.zarr", **kwargs)


def test_mid_circuit_measurement_is_refused_out_of_core(tmp_path):
    with pytest.raises(ValueError, match="mid-circuit"):
        dasq.simulate(dasq.Circuit(3).h(0).measure(0).h(0), store=tmp_path / "s.zarr")


def test_memory_limit_without_store_refuses_a_state_that_cannot_fit():
    with pytest.raises(ValueError, match="store="):
        dasq.simulate(dasq.Circuit(20).h(0), memory_limit="1MiB")
    assert dasq.simulate(dasq.Circuit(4).h(0), memory_limit="1MiB").norm() == pytest.approx(1)
    with pytest.raises(ValueError, match="pass store="):
        dasq.simulate(dasq.Circuit(4).h(0), compression="zstd")


def test_progress_bar_shows_stages(tmp_path, capsys):
    dasq.simulate(random_circuit(10, 4, seed=1), store=tmp_path / "s.zarr", **ooc(6), progress=True)
    err = capsys.readouterr().err
    assert "stage 1/" in err and "blocks" in err and "B/s" in err


# --------------------------------------------------------------- command line
REGISTERS_QASM = """OPENQASM 2.0;
include "qelib1.inc";
qreg q[9];
creg a[2];
creg b[3];
h q[0];
cx q[0],q[8];
ry(0.7) q[4];
x q[6];
measure q[0] -> a[1];
measure q[6] -> b[0];
measure q[4] -> b[2];
measure q[8] -> b[1];
"""


def _printed(argv: list[str], capsys) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["counts"]


@pytest.mark.parametrize("density", [False, True])
def test_resume_prints_the_run_s_counts_keyed_by_its_registers(tmp_path, capsys, density):
    """A stored run records its terminal measurements and registers beside its circuit:
    ``dasq resume`` draws the counts ``dasq run`` draws for the same seed, keyed by the
    registers (``a b``), not by every qubit."""
    qasm = tmp_path / "c.qasm"
    qasm.write_text(REGISTERS_QASM)
    store, given = tmp_path / "c.zarr", ["--shots", "300", "--seed", "11"] + ["--density"] * density
    blocks = ["--chunk-qubits", "14" if density else "6"]  # several blocks, several stages
    run = _printed(["run", str(qasm), "--store", str(store), *blocks, *given], capsys)
    for key in run:  # "b a": q6 (1) in b[0], q8 in b[1] equal to q0 in a[1], nothing in a[0]
        b, a = key.split()
        assert len(b) == 3 and len(a) == 2 and b[2] == "1" and a[1] == "0" and b[1] == a[0], key
    assert {key.split()[1] for key in run} == {"00", "10"} and sum(run.values()) == 300
    assert _printed(["resume", str(store), *given[:4]], capsys) == run
    assert _printed(["run", str(qasm), *given], capsys) == run  # in memory: the same draws
    assert dasq.api.recorded_readout(store).registers == dasq.Circuit.from_qasm(REGISTERS_QASM).registers


@pytest.mark.parametrize("measured", [False, True])
def test_run_and_simulate_of_one_circuit_share_its_store_either_way(tmp_path, measured):
    """A store names the computation, not the classical registers (``run`` adds a
    ``meas`` register to a circuit that measures nothing): ``simulate`` opens what
    ``run`` stored and ``run`` resumes what ``simulate`` stored."""
    c = dasq.Circuit(5, global_phase=0.3).h(0).cx(0, 3).ry(0.4, 2)
    if measured:
        c.measure_all()
    want = dasq.run(c, 200, seed=4).counts
    for first in ("simulate", "run"):
        store = tmp_path / f"{first}.zarr"
        if first == "simulate":
            dasq.simulate(c, store=store, chunk_qubits=3)
            assert dasq.run(c, 200, seed=4, store=store).counts == want
        else:
            assert dasq.run(c, 200, seed=4, store=store, chunk_qubits=3).counts == want
            np.testing.assert_allclose(
                dasq.simulate(c, store=store).to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-14
            )


def test_a_store_named_by_the_circuit_with_its_registers_still_resumes(tmp_path):
    """Before dasq stored a run's readout, ``simulate`` named a stored circuit by its
    fingerprint with its registers: such a store still resumes."""
    from dasq.outofcore import simulate_to_store

    c = dasq.Circuit(5).h(0).cx(0, 4).measure_all()
    body = c.remove_final_measurements()
    store = tmp_path / "earlier.zarr"
    options = dict(memory_limit=None, dtype="complex128", basis=0, client=None, progress=False)
    coding = dict(fusion_size=None, compression=None, keep_bits=None)
    simulate_to_store(body, store=store, chunk_qubits=3, **options, **coding)
    registerless = dasq.Circuit(5).with_operations(body).fingerprint()
    assert Manifest.read(store).circuit_hash == body.fingerprint() != registerless
    np.testing.assert_allclose(
        dasq.simulate(c, store=store).to_numpy(), dasq.simulate(c).to_numpy(), atol=1e-14
    )
    with pytest.raises(dasq.StoreError, match="holds a run of a different circuit"):
        dasq.simulate(c.copy().x(1), store=store)


def test_stored_counts_check_their_shots_and_seed(tmp_path):
    dasq.simulate(dasq.Circuit(4).h(0).measure_all(), store=tmp_path / "s.zarr", chunk_qubits=2)
    state = dasq.resume(tmp_path / "s.zarr")
    with pytest.raises(dasq.ValidationError, match="seed must be None or an int >= 0, got -1"):
        dasq.api.stored_counts(state, tmp_path / "s.zarr", 10, seed=-1)
    with pytest.raises(dasq.ValidationError, match="shots must be a non-negative int"):
        dasq.api.stored_counts(state, tmp_path / "s.zarr", -3)


def test_a_store_without_a_readout_record_counts_every_qubit_and_a_forged_one_is_refused(tmp_path, capsys):
    c = dasq.Circuit(6).h(0).cx(0, 5)
    dasq.simulate(c, store=tmp_path / "plain.zarr", chunk_qubits=4)  # measures nothing
    assert Manifest.read(tmp_path / "plain.zarr").readout_hash is None
    assert set(_printed(["resume", str(tmp_path / "plain.zarr"), "--shots", "50"], capsys)) == {
        "000000",
        "100001",
    }
    measured = c.copy().measure_all()
    dasq.simulate(measured, store=tmp_path / "m.zarr", chunk_qubits=4)
    record = tmp_path / "m.zarr" / st.READOUT_RECORD
    data = json.loads(record.read_text())
    data["operations"][0]["targets"] = [1]  # qubit 1's outcome read as qubit 0's
    record.write_text(json.dumps(data))
    with pytest.raises(dasq.StoreError, match=r"does not hold the readout that dasq-manifest\.json names"):
        dasq.api.stored_counts(dasq.resume(tmp_path / "m.zarr"), tmp_path / "m.zarr", 10)


def test_cli_run_info_resume(tmp_path, capsys):
    qasm = tmp_path / "ghz.qasm"
    qasm.write_text(
        'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[10];\ncreg c[10];\nh q[0];\n'
        + "".join(f"cx q[{i}],q[{i + 1}];\n" for i in range(9))
        + "measure q -> c;\n"
    )
    store = tmp_path / "ghz.zarr"
    assert (
        main(["run", str(qasm), "--store", str(store), "--memory-limit", "32KiB", "--shots", "200", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out["counts"]) == {"0" * 10, "1" * 10} and out["store"] == str(store.absolute())
    assert main(["info", str(store)]) == 0
    text = capsys.readouterr().out
    assert "qubits       10, complex128 amplitudes (16 B each" in text
    assert "(complete)" in text and "crc32c" in text
    assert main(["info", str(store), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["stages_done"] == facts["stages_total"] and facts["size_on_disk"] > 0
    assert main(["resume", str(store), "--shots", "100", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.split()
    assert set(lines[::2]) <= {"0" * 10, "1" * 10}
    assert main(["info", str(tmp_path / "nope.zarr")]) == 2
    assert "not a dasq store" in capsys.readouterr().err
    assert main(["run", str(qasm), "--store", str(store), "--memory-limit", "lots"]) == 2
    assert "--memory-limit must be a number of bytes" in capsys.readouterr().err


def test_a_store_recreated_at_the_same_path_is_not_read_with_stale_metadata(tmp_path):
    store = tmp_path / "s.zarr"
    dasq.simulate(random_circuit(8, 2, seed=1), store=store, **ooc(5)).norm()
    shutil.rmtree(store)
    c = random_circuit(9, 3, seed=2)
    got = dasq.simulate(c, store=store, **ooc(6)).to_numpy()
    np.testing.assert_allclose(got, reference_state(c), atol=1e-12)


# --------------------------------------------------------------- chunk files read by byte range
@pytest.fixture
def _one_file_per_block():
    """The default layout of an uncompressed store: one chunk file per block, so a
    relayout's pieces are read by byte range from inside chunks."""
    with dask.config.set({"dasq.min-storage-chunk-qubits": None}):
        yield


@pytest.mark.usefixtures("_one_file_per_block")
def test_pieces_read_from_inside_chunk_files_give_the_in_memory_state(tmp_path):
    c = random_circuit(11, 6, seed=3)
    state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(6))
    m = Manifest.read(tmp_path / "s.zarr")
    assert m.storage_qubits == m.chunk_qubits and any(r.pairs for r in state.plan.relayouts)
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)
    import zarr  # the chunks written without zarr are a zarr v3 array's, read by zarr as they are

    from dasq.storage import store as st

    floats = zarr.open_array(str(tmp_path / "s.zarr"), path=m.current, mode="r")[:]
    direct = st.read_amplitudes(str(tmp_path / "s.zarr"), m.current, 0, 1 << 11, "complex128", m.store_id)
    np.testing.assert_array_equal(floats.view(np.complex128), direct)


@pytest.mark.usefixtures("_one_file_per_block")
def test_a_flipped_byte_in_a_chunk_read_in_pieces_fails_the_pass(tmp_path, monkeypatch):
    """A relayout reads a chunk in pieces, by several blocks: one of them checks the
    whole chunk, so a damaged byte anywhere fails the pass before the manifest moves."""
    store = tmp_path / "s.zarr"
    c = random_circuit(**KILL_CIRCUIT)
    free_disk = fill_disk_after(monkeypatch, 16)  # stage 1 (16 blocks) completes, stage 2 fails
    with pytest.raises(dasq.StoreError, match="disk is full"):
        dasq.simulate(c, store=store, **ooc(KILL_L))
    free_disk()
    m = Manifest.read(store)
    assert m.stages_done == 1 and m.storage_qubits == m.chunk_qubits
    chunk = store / m.current / "c" / "5"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 3 + 1] ^= 0x10  # inside a piece that another block reads
    chunk.write_bytes(bytes(data))
    with pytest.raises(dasq.StoreError, match=r"corrupted chunk .*/c/5.*crc32c"):
        dasq.resume(store)
    assert Manifest.read(store).stages_done == 1


def test_stages_are_made_durable_without_a_host_wide_sync(tmp_path, monkeypatch):
    def refused() -> None:
        raise AssertionError("os.sync flushes every file system of the host")

    monkeypatch.setattr(os, "sync", refused)
    c = random_circuit(9, 3, seed=4)
    state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(5))
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)


# --------------------------------------------------------------- per-block cost
def test_a_pass_runs_its_blocks_in_a_few_tasks_each_walking_consecutive_blocks(tmp_path):
    """A Dask task per block cost more than a small block's work: each task runs a run
    of consecutive blocks, and together they run every block once."""
    from dask.callbacks import Callback

    from dasq.engine import stream

    tasks: dict[str, int] = {}
    blocks: dict[str, int] = {}

    def posttask(key, result, dsk, state, worker_id):
        if isinstance(key, tuple) and str(key[0]).startswith("dasq-stream-"):
            tasks[key[0]] = tasks.get(key[0], 0) + 1
            blocks[key[0]] = blocks.get(key[0], 0) + result.count

    c = random_circuit(12, 3, seed=4)
    with Callback(posttask=posttask):
        state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(4))
    m = Manifest.read(tmp_path / "s.zarr")
    run = stream.blocks_per_task(1 << 8, m.workers)
    assert run > 1 and len(tasks) == m.stages_total
    assert set(blocks.values()) == {1 << 8} and set(tasks.values()) == {(1 << 8) // run}
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)


def test_relayouts_read_right_when_a_thread_may_keep_few_chunk_files_open(tmp_path, monkeypatch):
    """A relayout reads from every chunk in turn; past MAX_OPEN open files a piece's
    file is opened for it and closed after it, and the state is the same."""
    from dasq.storage import direct

    monkeypatch.setattr(direct, "MAX_OPEN", 2)
    c = random_circuit(10, 4, seed=5)
    state = dasq.simulate(c, store=tmp_path / "s.zarr", **ooc(5))
    assert max(len(r.pairs) for r in state.plan.relayouts) >= 2
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)


def test_a_chunk_is_overwritten_in_place_only_when_it_is_a_regular_file_of_its_size(tmp_path):
    from dasq.storage.contained import overwrite_in

    (tmp_path / "same").write_bytes(b"x" * 8)
    (tmp_path / "other").write_bytes(b"x" * 4)
    (tmp_path / "link").symlink_to(tmp_path / "same")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert overwrite_in(fd, "same", (b"abcd", b"efgh")) == 8
        assert overwrite_in(fd, "other", (b"abcd", b"efgh")) is None
        assert overwrite_in(fd, "missing", (b"abcd",)) is None
        assert overwrite_in(fd, "link", (b"ABCD", b"EFGH")) is None
    finally:
        os.close(fd)
    assert (tmp_path / "same").read_bytes() == b"abcdefgh"
    assert (tmp_path / "other").read_bytes() == b"xxxx"


def test_a_new_chunk_is_created_where_it_is_only_when_nothing_is_there(tmp_path, monkeypatch):
    """A stage's new target chunk is written in place (no temporary file renamed over
    it); anything already there is left to the careful path, and a write that fails
    leaves no file behind."""
    from dasq.storage import contained

    (tmp_path / "there").write_bytes(b"x" * 4)
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert contained.create_in(fd, "new", (b"abcd", b"efgh")) == 8
        assert contained.create_in(fd, "there", (b"abcd",)) is None
        assert contained.create_in(fd, "link", (b"abcd",)) is None  # a dangling link is not followed

        def full(fd: int, data: memoryview) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(contained, "_write_all", full)
        with pytest.raises(OSError, match="No space"):
            contained.create_in(fd, "failed", (b"abcd",))
    finally:
        os.close(fd)
    assert (tmp_path / "new").read_bytes() == b"abcdefgh"
    assert (tmp_path / "there").read_bytes() == b"xxxx"
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "failed").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "new", "there"]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_double_buffered_tasks_give_the_in_memory_state(tmp_path, monkeypatch, compression):
    """With every task double-buffered (the next block read and the last written while
    one computes), a run from a basis state through relayouts is the in-memory one."""
    from dasq import _config

    monkeypatch.setattr(_config, "OVERLAP_FROM_QUBITS", 0)
    c = random_circuit(11, 4, seed=9)
    state = dasq.simulate(c, initial=77, store=tmp_path / "s.zarr", compression=compression, **ooc(5))
    assert len(state.plan.relayouts) >= 2
    want = dasq.simulate(c, initial=77).to_numpy()
    np.testing.assert_allclose(state.to_numpy(), want, atol=1e-12)


def test_a_failed_write_in_a_double_buffered_task_fails_only_its_pass(tmp_path, monkeypatch):
    """A write that fails in a task's helper thread fails the pass as one in the task's
    own thread does: the last pass stays the store's, and resume finishes."""
    from dasq import _config

    monkeypatch.setattr(_config, "OVERLAP_FROM_QUBITS", 0)
    store = tmp_path / "s.zarr"
    c = random_circuit(**KILL_CIRCUIT)
    free_disk = fill_disk_after(monkeypatch, 20)
    with pytest.raises(dasq.StoreError, match=r"stage 2 could not be written.*intact.*resume"):
        dasq.simulate(c, store=store, **ooc(KILL_L))
    assert Manifest.read(store).stages_done == 1
    free_disk()
    np.testing.assert_allclose(dasq.resume(store).to_numpy(), reference_state(c), atol=1e-12)


def test_small_blocks_run_on_fewer_threads_each_block_larger_within_the_budget():
    """Blocks under 2^THREADED_FROM_QUBITS amplitudes hold the GIL for their Python: a
    small budget gives fewer workers with larger blocks, never more memory than it has;
    blocks large enough for threads keep the workers."""
    from dasq import _config
    from dasq.engine.stream import block_copies, choose_blocks

    def need(L: int, workers: int) -> int:
        return workers * block_copies(L, True) * ITEM["complex128"] << L

    state = ITEM["complex128"] << 20
    for fraction, cores in ((64, 2), (16, 2), (4, 16)):
        limit = state // fraction
        L, workers = choose_blocks(20, "complex128", limit, None, cores, 2, direct=True)
        assert need(L, workers) <= limit < need(L + 1, workers)  # the largest blocks that fit
        assert L >= _config.THREADED_FROM_QUBITS or workers == 1
        assert workers < cores
    L, workers = choose_blocks(22, "complex128", (ITEM["complex128"] << 22) // 16, None, 2, 2, direct=True)
    assert (L, workers) == (15, 2)


@pytest.mark.usefixtures("_one_file_per_block")
def test_a_chunk_left_half_written_in_a_new_array_is_replaced_when_the_pass_runs_again(tmp_path, monkeypatch):
    """A chunk of the pass a kill cut short, left under its name at the wrong size, is
    replaced whole when resume runs the pass again (the manifest never named it)."""
    from dasq.storage import store as st

    store = tmp_path / "s.zarr"
    c = random_circuit(**KILL_CIRCUIT)
    free_disk = fill_disk_after(monkeypatch, 16)  # stage 1 (16 blocks) completes, stage 2 fails
    with pytest.raises(dasq.StoreError, match="disk is full"):
        dasq.simulate(c, store=store, **ooc(KILL_L))
    free_disk()
    m = Manifest.read(store)
    assert m.stages_done == 1 and m.current == "a"
    half = store / "b" / "c" / "3"
    half.parent.mkdir(parents=True, exist_ok=True)
    half.write_bytes(b"\x01" * 100)  # a chunk cut short
    state = dasq.resume(store)
    np.testing.assert_allclose(state.to_numpy(), reference_state(c), atol=1e-12)
    assert half.stat().st_size == (ITEM["complex128"] << KILL_L) + 4
    assert st.verify_store(store)["state"] == "intact"


def test_bit_rounding_without_compression_says_it_saves_no_disk(tmp_path, caplog):
    with caplog.at_level("INFO", logger="dasq"):
        dasq.simulate(random_circuit(8, 2, seed=1), store=tmp_path / "r.zarr", keep_bits=10, **ooc(6))
    assert "saves disk only with compression" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="dasq"):
        c = random_circuit(8, 2, seed=1)
        dasq.simulate(c, store=tmp_path / "z.zarr", keep_bits=10, compression="zstd", **ooc(6))
    assert "saves disk only" not in caplog.text
