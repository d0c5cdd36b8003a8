"""PennyLane's ``diff_method="adjoint"`` on ``dasq.qubit``: device-provided Jacobians
and vector-Jacobian products from dasq's adjoint gradient, checked against
default.qubit's own adjoint method (shapes and values) on gates of every kind."""

from __future__ import annotations

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
pnp = qml.numpy

WIRES = 5


def circuit(weights, angle):
    qml.BasisState(np.array([1, 0, 0, 1, 0]), wires=range(WIRES))
    qml.StronglyEntanglingLayers(weights, wires=range(WIRES))  # Rot: three symbolic rotations in dasq
    qml.CRX(angle, wires=[0, 3])
    qml.IsingZZ(0.5 * angle, wires=[1, 2])
    qml.PhaseShift(angle, wires=4)
    qml.ctrl(qml.RY(angle, wires=2), control=[0, 4], control_values=[1, 0])
    qml.U3(angle, 0.3, -angle, wires=1)
    qml.MultiRZ(angle, wires=[0, 2, 4])
    qml.PauliRot(angle, "XYZ", wires=[1, 3, 4])
    qml.Hadamard(wires=0)


def qnodes(measure):
    def body(weights, angle):
        circuit(weights, angle)
        return measure()

    made = {}
    for name in ("dasq.qubit", "default.qubit"):
        made[name] = qml.QNode(body, qml.device(name, wires=WIRES), diff_method="adjoint")
    return made["dasq.qubit"], made["default.qubit"]


@pytest.fixture
def inputs():
    rng = np.random.default_rng(9)
    weights = pnp.array(rng.uniform(-np.pi, np.pi, size=(2, WIRES, 3)), requires_grad=True)
    return weights, pnp.array(0.83, requires_grad=True)


def test_adjoint_jacobians_are_default_qubits(inputs):
    def measure():
        return qml.expval(qml.PauliZ(0) @ qml.PauliX(3)), qml.expval(0.5 * qml.PauliY(1) + qml.PauliZ(4))

    dasq_node, reference = qnodes(measure)
    got = dasq_node(*inputs)
    want = reference(*inputs)
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-12)
    jac_got = qml.jacobian(lambda w, a: qml.math.stack(dasq_node(w, a)))(*inputs)
    jac_want = qml.jacobian(lambda w, a: qml.math.stack(reference(w, a)))(*inputs)
    for g, w in zip(jac_got, jac_want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, atol=1e-10)


def test_gradients_of_a_cost_go_through_the_devices_vector_jacobian_products(inputs):
    dasq_node, reference = qnodes(lambda: qml.expval(qml.PauliZ(0) @ qml.PauliZ(WIRES - 1)))
    device = dasq_node.device
    with qml.Tracker(device) as tracker:
        grads = qml.grad(lambda w, a: 3 * dasq_node(w, a) ** 2)(*inputs)
    assert tracker.totals.get("derivatives", 0) >= 1  # the device computed them, not parameter shift
    want = qml.grad(lambda w, a: 3 * reference(w, a) ** 2)(*inputs)
    np.testing.assert_allclose(grads[0], want[0], atol=1e-10)
    assert grads[1] == pytest.approx(want[1], abs=1e-10)


def test_one_trainable_angle_gives_default_qubits_scalar_derivative():
    def body(angle):
        qml.RX(angle, wires=0)
        qml.CNOT(wires=[0, 1])
        return qml.expval(qml.PauliZ(1))

    dasq_node = qml.QNode(body, qml.device("dasq.qubit", wires=2), diff_method="adjoint")
    angle = pnp.array(0.4, requires_grad=True)
    assert qml.grad(dasq_node)(angle) == pytest.approx(-np.sin(0.4), abs=1e-12)


def test_the_adjoint_method_refuses_shots_and_samples():
    def body(angle):
        qml.RX(angle, wires=0)
        return qml.expval(qml.PauliZ(0))

    shots = qml.set_shots(qml.QNode(body, qml.device("dasq.qubit", wires=1), diff_method="adjoint"), 100)
    with pytest.raises(Exception, match=r"(?i)does not support adjoint|finite shots"):
        qml.grad(shots)(pnp.array(0.3, requires_grad=True))

    def sampled(angle):
        qml.RX(angle, wires=0)
        return qml.probs(wires=0)

    node = qml.QNode(sampled, qml.device("dasq.qubit", wires=1), diff_method="adjoint")
    with pytest.raises(Exception, match=r"(?i)does not support adjoint|not supported"):
        qml.jacobian(node)(pnp.array(0.3, requires_grad=True))


def test_a_parameter_shift_batch_runs_as_one_dasq_expectation(inputs, monkeypatch):
    """The tapes of a parameter-shift gradient differ only in their angles: one
    ``dasq.expectation`` call runs them all."""
    import dasq.frontends.pennylane.device as device_module

    calls = []
    real = device_module.expectation
    monkeypatch.setattr(device_module, "expectation", lambda *a, **k: calls.append(k) or real(*a, **k))

    def body(weights, angle):
        for layer in weights:
            for w in range(WIRES):
                qml.RX(layer[w, 0], wires=w)
                qml.RZ(layer[w, 1], wires=w)
            for w in range(WIRES):
                qml.CNOT(wires=[w, (w + 1) % WIRES])
        qml.CRX(angle, wires=[0, 3])
        qml.ctrl(qml.RY(angle, wires=2), control=[0, 4], control_values=[1, 0])
        return qml.expval(qml.PauliZ(0) @ qml.PauliX(3)), qml.expval(0.5 * qml.PauliY(1) + qml.PauliZ(4))

    weights, angle = inputs
    ours = qml.QNode(body, qml.device("dasq.qubit", wires=WIRES), diff_method="parameter-shift")
    theirs = qml.QNode(body, qml.device("default.qubit", wires=WIRES), diff_method="parameter-shift")
    got = qml.jacobian(lambda w, a: qml.math.stack(ours(w, a)))(weights, angle)
    want = qml.jacobian(lambda w, a: qml.math.stack(theirs(w, a)))(weights, angle)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-10)
    sizes = [np.shape(k["parameters"])[0] for k in calls if k.get("parameters") is not None]
    assert sizes and max(sizes) >= 2 * (2 * WIRES * 2)  # the shifted tapes, one call
