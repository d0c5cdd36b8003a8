"""The ``dasq.qubit`` PennyLane device against ``default.qubit``: the same QNodes (random
circuits of many gate kinds on non-trivial wire labels, state preparation, mid-circuit
measurements, broadcasting), analytic and with shots, their gradients, the entry point,
dasq's own settings, the errors for what the device refuses, and the example script."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")

from pennylane import numpy as pnp  # noqa: E402
from pennylane.exceptions import DeviceError, QuantumFunctionError, WireError  # noqa: E402

from dasq.errors import ValidationError  # noqa: E402
from dasq.pennylane import DasqDevice  # noqa: E402

WIRES = ["a", 3, "q1", -1, "z"]


def _unitary(rng: np.random.Generator, k: int) -> np.ndarray:
    z = rng.normal(size=(2**k, 2**k)) + 1j * rng.normal(size=(2**k, 2**k))
    q, r = np.linalg.qr(z)
    return q * (np.diag(r) / np.abs(np.diag(r)))


def _hermitian(rng: np.random.Generator, k: int) -> np.ndarray:
    z = rng.normal(size=(2**k, 2**k)) + 1j * rng.normal(size=(2**k, 2**k))
    return z + z.conj().T


def _random_ops(seed: int, wires: list, depth: int = 40) -> list:
    """Operations of every kind the device maps, applies densely or decomposes."""
    rng = np.random.default_rng(seed)

    def pick(k: int) -> list:
        return [wires[i] for i in rng.choice(len(wires), k, replace=False)]

    def a() -> float:
        return float(rng.uniform(-np.pi, np.pi))

    makers = [
        lambda: qml.Hadamard(pick(1)),
        lambda: qml.S(pick(1)),
        lambda: qml.T(pick(1)),
        lambda: qml.SX(pick(1)),
        lambda: qml.Y(pick(1)),
        lambda: qml.RX(a(), pick(1)),
        lambda: qml.RY(a(), pick(1)),
        lambda: qml.RZ(a(), pick(1)),
        lambda: qml.PhaseShift(a(), pick(1)),
        lambda: qml.U3(a(), a(), a(), pick(1)),
        lambda: qml.Rot(a(), a(), a(), pick(1)),
        lambda: qml.adjoint(qml.S(pick(1))),
        lambda: qml.adjoint(qml.T(pick(1))),
        lambda: qml.adjoint(qml.SX(pick(1))),
        lambda: qml.CNOT(pick(2)),
        lambda: qml.CZ(pick(2)),
        lambda: qml.CY(pick(2)),
        lambda: qml.CH(pick(2)),
        lambda: qml.CRX(a(), pick(2)),
        lambda: qml.CRot(a(), a(), a(), pick(2)),
        lambda: qml.ControlledPhaseShift(a(), pick(2)),
        lambda: qml.SWAP(pick(2)),
        lambda: qml.ISWAP(pick(2)),
        lambda: qml.IsingXX(a(), pick(2)),
        lambda: qml.IsingYY(a(), pick(2)),
        lambda: qml.IsingZZ(a(), pick(2)),
        lambda: qml.PauliRot(a(), "XIY", pick(3)),
        lambda: qml.MultiRZ(a(), pick(3)),
        lambda: qml.Toffoli(pick(3)),
        lambda: qml.CSWAP(pick(3)),
        lambda: qml.MultiControlledX(wires=pick(4), control_values=[1, 0, 1]),
        lambda: qml.ctrl(qml.IsingXY(a(), (w := pick(3))[:2]), control=w[2], control_values=0),
        lambda: qml.ctrl(qml.RY(a(), (w := pick(3))[0]), control=w[1:], control_values=[0, 1]),
        lambda: qml.QubitUnitary(_unitary(rng, 3), pick(3)),
        lambda: qml.DiagonalQubitUnitary(np.exp(1j * rng.uniform(0, 6, 4)), pick(2)),
        lambda: qml.ControlledQubitUnitary(_unitary(rng, 1), wires=pick(2)),
        lambda: qml.QFT(wires=pick(4)),  # wider than a dense matrix: PennyLane decomposes it
        lambda: qml.GlobalPhase(a()),
        lambda: qml.ctrl(qml.GlobalPhase(a()), control=pick(1)),
    ]
    ops = [m() for m in makers]  # every kind at least once, then random ones
    ops += [makers[i]() for i in rng.integers(0, len(makers), depth)]
    order = rng.permutation(len(ops))
    return [ops[i] for i in order]


def _analytic_measurements(rng: np.random.Generator) -> list:
    return [
        qml.state(),
        qml.probs(wires=[-1, "a", "z"]),
        qml.probs(),
        qml.expval(qml.X("a") @ qml.Y(-1) @ qml.Z("q1")),
        qml.expval(qml.Hamiltonian([0.5, -1.2, 0.3], [qml.Z(3) @ qml.Z("z"), qml.X("q1"), qml.Y("a")])),
        qml.var(qml.Z(3) + 0.5 * qml.X("q1")),
        qml.var(qml.Y("z")),
        qml.expval(qml.Hermitian(_hermitian(rng, 2), wires=["z", 3])),
        qml.expval(qml.Hermitian(_hermitian(rng, 1), wires="a") @ qml.X(-1)),
        qml.var(qml.Hermitian(_hermitian(rng, 2), wires=[-1, "q1"])),
        qml.expval(qml.Hadamard("z")),
        qml.var(qml.Projector([1, 0], wires=[3, "a"])),
        qml.density_matrix(wires=["q1", "a"]),
        qml.probs(op=qml.X("a")),
        qml.purity(wires=["z"]),
    ]


def _both(qfunc, wires=WIRES, **options):
    """The QNode on dasq.qubit and on default.qubit."""
    return (
        qml.QNode(qfunc, qml.device("dasq.qubit", wires=wires, **options)),
        qml.QNode(qfunc, qml.device("default.qubit", wires=wires)),
    )


def _close(ours, theirs, atol: float = 1e-10) -> None:
    assert len(ours) == len(theirs)
    for x, y in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def test_the_device_loads_through_the_entry_point():
    (point,) = [e for e in entry_points(group="pennylane.plugins") if e.name == "dasq.qubit"]
    assert point.value == "dasq.pennylane:DasqDevice"
    dev = qml.device("dasq.qubit", wires=["x", 7])
    assert isinstance(dev, DasqDevice) and dev.name == "dasq.qubit"
    assert list(dev.wires) == ["x", 7] and not dev.shots


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_circuits_agree_with_default_qubit(seed):
    rng = np.random.default_rng(100 + seed)
    prep = rng.normal(size=4) + 1j * rng.normal(size=4)
    ops = _random_ops(seed, WIRES)
    measurements = _analytic_measurements(rng)

    def circuit():
        if seed == 1:
            qml.BasisState(np.array([1, 0, 1]), wires=["z", "a", -1])
        else:
            qml.StatePrep(prep / np.linalg.norm(prep), wires=[-1, "a"])
        for op in ops:
            qml.apply(op)
        return [qml.apply(m) for m in measurements]

    ours, theirs = (f() for f in _both(circuit))
    _close(ours, theirs)
    assert abs(np.linalg.norm(ours[0]) - 1) < 1e-12  # and the state is not trivially |0>
    assert np.max(np.abs(ours[0])) < 0.99


def test_device_without_wires_orders_wires_as_default_qubit():
    def circuit():
        qml.RX(0.3, 1)
        qml.Hadamard("x")
        qml.CNOT(["x", 0])
        qml.RY(0.2, 5)
        return qml.state(), qml.probs(wires=[5, 1])

    ours = qml.QNode(circuit, qml.device("dasq.qubit"))()
    theirs = qml.QNode(circuit, qml.device("default.qubit"))()
    _close(ours, theirs)


def test_mid_circuit_measurements_are_deferred():
    def circuit(x):
        qml.RX(x, 0)
        qml.CNOT([0, 1])
        qml.RY(0.8, 2)
        m = qml.measure(2)
        qml.cond(m, qml.X)(0)
        m1 = qml.measure(0, reset=True)
        qml.cond(m1 & m, qml.Hadamard)(1)
        return qml.expval(qml.Z(1)), qml.probs(wires=[0, 1]), qml.expval(m), qml.var(m1)

    _close(*(f(0.7) for f in _both(circuit, wires=6)))


def test_parameter_broadcasting_is_expanded():
    def circuit(x):
        qml.RX(x, "a")
        qml.CRY(0.4, ["a", "z"])
        return qml.expval(qml.Z("z")), qml.probs(wires=["a"])

    x = np.array([0.1, 0.5, 2.0])
    ours, theirs = (f(x) for f in _both(circuit))
    assert np.shape(ours[1]) == (3, 2)
    _close(ours, theirs)


def _sampled_prep():
    qml.RX(0.9, "a")
    qml.CNOT(["a", 3])
    qml.RY(0.5, "q1")
    qml.IsingXY(0.7, ["q1", "z"])


HAM = qml.Z("a") + 0.5 * qml.X(3) - qml.Y("q1")


def _sampled_circuit():
    _sampled_prep()
    return [
        qml.expval(qml.X(3) @ qml.Z("a")),
        qml.var(qml.Y("q1")),
        qml.probs(wires=["q1", "a"]),
        qml.expval(HAM),
        qml.sample(wires=["a", 3]),
        qml.counts(wires=["a"]),
        qml.sample(qml.X("z")),
    ]


def _exact_circuit():
    _sampled_prep()
    return [
        qml.expval(qml.X(3) @ qml.Z("a")),
        qml.var(qml.Y("q1")),
        qml.probs(wires=["q1", "a"]),
        qml.expval(HAM),
        qml.var(qml.X(3) @ qml.Z("a")),
        qml.var(HAM),
    ]


def test_shots_agree_within_statistical_bounds():
    shots = 20_000
    sampled = qml.set_shots(
        qml.QNode(_sampled_circuit, qml.device("dasq.qubit", wires=WIRES, seed=11)), shots
    )
    ex_xz, var_y, probs, ham, samples, counts, signs = sampled()
    exact = qml.QNode(_exact_circuit, qml.device("default.qubit", wires=WIRES))()
    e_xz, e_var_y, e_probs, e_ham, v_xz, v_ham = exact
    assert abs(ex_xz - e_xz) < 5 * np.sqrt(v_xz / shots)
    assert abs(ham - e_ham) < 5 * np.sqrt(v_ham / shots)
    assert np.all(np.abs(probs - e_probs) <= 5 * np.sqrt(e_probs * (1 - e_probs) / shots) + 1e-12)
    assert abs(var_y - e_var_y) < 0.05
    assert samples.shape == (shots, 2) and set(np.unique(samples)) <= {0, 1}
    assert np.array_equal(samples[:, 0], samples[:, 1])  # CNOT: wires a and 3 agree in every shot
    assert abs(samples[:, 0].mean() - e_probs[1] - e_probs[3]) < 5 * np.sqrt(0.25 / shots)
    assert sum(counts.values()) == shots and set(counts) <= {"0", "1"}
    assert counts["1"] == int(samples[:, 0].sum())  # measurements in one basis share their shots
    assert set(np.unique(signs)) <= {-1.0, 1.0} and signs.shape == (shots,)
    _close(qml.QNode(_exact_circuit, qml.device("dasq.qubit", wires=WIRES))(), exact)


def test_a_seed_fixes_the_samples():
    def run(seed):
        dev = qml.device("dasq.qubit", wires=WIRES, seed=seed)
        return qml.set_shots(qml.QNode(_sampled_circuit, dev), 500)()[4]

    assert np.array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_shot_vectors():
    dev = qml.device("dasq.qubit", wires=WIRES, seed=3)
    out = qml.set_shots(qml.QNode(_sampled_circuit, dev), [100, (200, 2)])()
    assert len(out) == 3 and all(len(entry) == 7 for entry in out)
    assert [entry[4].shape for entry in out] == [(100, 2), (200, 2), (200, 2)]
    assert [sum(entry[5].values()) for entry in out] == [100, 200, 200]


def test_measurements_in_one_run_share_one_simulation():
    dev = qml.device("dasq.qubit", wires=2, seed=1)

    @qml.set_shots(100)
    @qml.qnode(dev)
    def circuit():
        qml.Hadamard(0)
        return qml.expval(qml.X(0)), qml.expval(qml.Z(0))  # two bases: split into two tapes

    with qml.Tracker(dev) as tracker:
        ex, ez = circuit()
    assert tracker.totals["executions"] == 2 and tracker.totals["simulations"] == 1
    assert ex == 1.0 and abs(ez) < 0.5


def _variational(w):
    qml.RX(w[0], "a")
    qml.RY(w[1], 3)
    qml.CNOT(["a", 3])
    qml.CRZ(w[2], [3, "q1"])
    qml.Rot(w[3], w[4], w[5], "q1")
    qml.IsingYY(w[0] * w[1], ["a", "q1"])
    qml.PauliRot(w[2], "XY", [3, "a"])
    return qml.expval(qml.Z("a") @ qml.X("q1") + 0.3 * qml.Y(3))


WEIGHTS = [0.1, 0.4, -0.3, 0.8, 1.1, 0.2]


@pytest.mark.parametrize("diff_method", ["parameter-shift", "best"])
def test_gradients_agree_with_default_qubit(diff_method):
    w = pnp.array(WEIGHTS, requires_grad=True)
    dev = qml.device("dasq.qubit", wires=WIRES[:3])
    node = qml.QNode(_variational, dev, diff_method=diff_method)
    expected = qml.grad(qml.QNode(_variational, qml.device("default.qubit", wires=WIRES[:3])))(w)
    gradient = qml.grad(node)(w)
    np.testing.assert_allclose(gradient, expected, atol=1e-10)
    assert np.max(np.abs(expected)) > 0.1
    if diff_method == "best":
        assert qml.workflow.get_best_diff_method(node)(w) == "parameter-shift"


def test_jacobian_of_probabilities():
    def circuit(w):
        qml.RX(w[0], 0)
        qml.RY(w[1], 1)
        qml.CNOT([0, 1])
        return qml.probs(wires=[1, 0])

    w = pnp.array([0.3, -0.7], requires_grad=True)
    ours, theirs = (qml.jacobian(f)(w) for f in _both(circuit, wires=2))
    assert ours.shape == (4, 2)
    np.testing.assert_allclose(ours, theirs, atol=1e-10)


def test_gradient_with_shots_is_close():
    w = pnp.array(WEIGHTS, requires_grad=True)
    dev = qml.device("dasq.qubit", wires=WIRES[:3], seed=2)
    node = qml.set_shots(qml.QNode(_variational, dev, diff_method="parameter-shift"), 20_000)
    expected = qml.grad(qml.QNode(_variational, qml.device("default.qubit", wires=WIRES[:3])))(w)
    assert np.max(np.abs(qml.grad(node)(w) - expected)) < 0.05


@pytest.mark.parametrize("interface", ["torch", "jax"])
def test_gradients_in_other_interfaces(interface):
    lib = pytest.importorskip(interface)
    dev = qml.device("dasq.qubit", wires=WIRES[:3])
    node = qml.QNode(_variational, dev, diff_method="parameter-shift", interface=interface)
    expected = qml.grad(qml.QNode(_variational, qml.device("default.qubit", wires=WIRES[:3])))(
        pnp.array(WEIGHTS, requires_grad=True)
    )
    if interface == "torch":
        w = lib.tensor(WEIGHTS, dtype=lib.float64, requires_grad=True)
        node(w).backward()
        gradient = w.grad.numpy()
    else:
        gradient = np.asarray(lib.grad(node)(lib.numpy.array(WEIGHTS)))
    np.testing.assert_allclose(gradient, expected, atol=1e-8)


def _small():
    qml.Hadamard("a")
    qml.CRX(0.8, ["a", "z"])
    qml.RY(0.3, 3)
    return qml.expval(qml.Z("z") @ qml.X(3)), qml.probs(wires=["z", "a"]), qml.state()


def test_dasq_settings_pass_through(tmp_path):
    expected = qml.QNode(_small, qml.device("default.qubit", wires=WIRES))()
    for options in ({"chunk_qubits": 2}, {"chunk_qubits": 1, "method": "per-operation"}, {"store": tmp_path}):
        _close(qml.QNode(_small, qml.device("dasq.qubit", wires=WIRES, **options))(), expected)
    single = qml.QNode(_small, qml.device("dasq.qubit", wires=WIRES, dtype="complex64"))()
    assert single[2].dtype == np.complex64
    _close(single, expected, atol=1e-6)
    assert len(list(tmp_path.glob("*.zarr"))) == 1  # the stored run of the one circuit
    stored = qml.device("dasq.qubit", wires=WIRES, dtype="complex64", store=tmp_path)
    _close(qml.QNode(_small, stored)(), expected, atol=1e-6)
    assert len(list(tmp_path.glob("*-complex64-0.zarr"))) == 1  # another precision: a store of its own


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qml.device("dasq.qubit", wires=2, chunk_qbits=3), TypeError, "unknown option"),
        (lambda: qml.device("dasq.qubit", wires=2, initial=3), TypeError, "unknown option"),
        (lambda: qml.device("dasq.qubit", wires=2, dtype="float32"), ValidationError, "dtype"),
        (lambda: qml.device("dasq.qubit", wires=2, seed="sometimes"), TypeError, "seed"),
    ],
)
def test_bad_options_are_refused(make, error, match):
    with pytest.raises(error, match=match):
        make()


def _state():
    qml.Hadamard(0)
    return qml.state()


def _shadow():
    qml.Hadamard(0)
    return qml.classical_shadow(wires=[0])


def _off_device():
    qml.Hadamard(9)
    return qml.expval(qml.Z(9))


def _wide_hermitian():
    return qml.expval(qml.Hermitian(np.eye(2**7), wires=range(7)))


def _mcm():
    qml.measure(0)
    return qml.expval(qml.Z(1))


def _nothing():
    qml.GlobalPhase(0.2)
    return qml.state()


@pytest.mark.parametrize(
    "qfunc, kwargs, shots, error, match",
    [
        (_state, {}, 10, DeviceError, "not accepted with finite shots on dasq.qubit"),
        (_shadow, {}, 10, DeviceError, "not accepted with finite shots on dasq.qubit"),
        (_off_device, {}, None, WireError, "wires not found on the device"),
        (_wide_hermitian, {}, None, DeviceError, "not supported on dasq.qubit"),
        (_mcm, {"mcm_method": "one-shot"}, 10, DeviceError, "deferring them"),
        (_mcm, {"mcm_method": "tree-traversal"}, None, DeviceError, "deferring them"),
        (_state, {"diff_method": "adjoint"}, None, QuantumFunctionError, "does not support adjoint"),
        (_state, {"diff_method": "backprop"}, None, QuantumFunctionError, "does not support backprop"),
    ],
)
def test_unsupported_requests_fail_clearly(qfunc, kwargs, shots, error, match):
    with pytest.raises(error, match=match):  # at the QNode's construction or its call
        qml.set_shots(qml.QNode(qfunc, qml.device("dasq.qubit", wires=8), **kwargs), shots)()


def test_a_circuit_on_no_wires_is_refused():
    with pytest.raises(DeviceError, match="at least one wire"):
        qml.QNode(_nothing, qml.device("dasq.qubit"))()
