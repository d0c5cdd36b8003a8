"""Postselection on ``dasq.qubit`` (``qml.measure(w, postselect=b)``), checked against
PennyLane's default.qubit running the same QNodes with deferred measurements: analytic
values, impossible outcomes, the shots kept with ``postselect_mode`` "hw-like" and
"fill-shots", shot vectors, broadcasting and parameter-shift gradients."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

qml = pytest.importorskip("pennylane")
pnp = pytest.importorskip("pennylane.numpy")

WIRES = 6  # deferral adds a wire per measured wire used again


def _devices(shots=None, seed=7):
    return qml.device("dasq.qubit", wires=WIRES, seed=seed), qml.device(
        "default.qubit", wires=WIRES, seed=seed
    )


def _one(x):
    qml.RX(x, 0)
    qml.CNOT([0, 1])
    m = qml.measure(0, postselect=1)
    qml.RY(0.4, 1)
    return qml.expval(qml.Z(1)), qml.probs(wires=[0, 1]), qml.expval(m), qml.var(qml.X(1))


def _zero_and_reset(x):
    qml.Hadamard(0)
    qml.RY(x, 1)
    qml.CRX(0.8, [0, 1])
    m0 = qml.measure(1, postselect=0, reset=True)
    qml.cond(m0 == 0, qml.RX)(0.5, 1)
    qml.RZ(0.3, 2)
    qml.Hadamard(2)
    return qml.expval(qml.Z(1) @ qml.X(0)), qml.probs(wires=[1, 2])


def _two_then_condition(x):
    qml.RX(x, 0)
    qml.RY(2 * x, 1)
    m0 = qml.measure(0, postselect=1)
    qml.CNOT([1, 2])
    m1 = qml.measure(1, postselect=0)
    qml.cond(m0 & ~m1, qml.Hadamard)(2)
    return qml.expval(qml.Y(2) + 0.5 * qml.Z(2)), qml.expval(m0 + m1), qml.probs(op=m1)


CIRCUITS = [_one, _zero_and_reset, _two_then_condition]


@pytest.mark.parametrize("qfunc", CIRCUITS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", [0.7, 2.1])
def test_analytic_postselection_matches_default_qubit(qfunc, x):
    dasq_dev, reference = _devices()
    got = qml.QNode(qfunc, dasq_dev)(x)
    want = qml.QNode(qfunc, reference, mcm_method="deferred")(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-10)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")  # default.qubit's 0/0
def test_an_impossible_outcome_gives_nan_as_default_qubit():
    dasq_dev, reference = _devices()
    got = qml.QNode(_one, dasq_dev)(0.0)  # qubit 0 is |0>: postselecting 1 has probability 0
    want = qml.QNode(_one, reference, mcm_method="deferred")(0.0)
    for g, w in zip(got, want, strict=True):
        assert np.all(np.isnan(g)) and np.all(np.isnan(w))


def _kept(x):
    qml.RX(x, 0)
    qml.measure(0, postselect=1)
    return qml.sample(wires=[0, 1])


def test_hw_like_shots_keep_a_binomial_share_and_fill_shots_keeps_all():
    x, shots = 1.2, 4000
    p = float(np.sin(x / 2) ** 2)  # P(qubit 0 reads 1)
    dasq_dev, reference = _devices()
    for mode in (None, "hw-like"):
        node = qml.set_shots(qml.QNode(_kept, dasq_dev, postselect_mode=mode), shots)
        kept = node(x)
        sigma = np.sqrt(shots * p * (1 - p))
        assert abs(len(kept) - shots * p) < 5 * sigma and np.all(kept[:, 0] == 1)
    fill = qml.set_shots(qml.QNode(_kept, dasq_dev, postselect_mode="fill-shots"), shots)(x)
    assert fill.shape == (shots, 2) and np.all(fill[:, 0] == 1)
    want = qml.set_shots(qml.QNode(_kept, reference, mcm_method="deferred", postselect_mode="fill-shots"), 10)
    assert want(x).shape == (10, 2)  # default.qubit's meaning of fill-shots
    for device in (dasq_dev, reference):
        node = qml.QNode(_kept, device, mcm_method="deferred", postselect_mode="fill-shots")
        with pytest.raises(RuntimeError, match="probability"):
            qml.set_shots(node, 10)(0.0)
    empty = qml.set_shots(qml.QNode(_kept, dasq_dev), 50)(0.0)  # every shot discarded
    assert empty.shape == (0, 2)


def test_sampled_postselection_agrees_with_default_qubit_within_its_error():
    dasq_dev, reference = _devices(seed=3)
    x, shots = 0.9, 20_000
    got = qml.set_shots(qml.QNode(_two_then_condition, dasq_dev), shots)(x)
    want = qml.QNode(_two_then_condition, reference, mcm_method="deferred")(x)
    kept = shots * np.sin(x / 2) ** 2 * np.cos(x) ** 2  # P(m0 = 1, m1 = 0) of the shots
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=6 / np.sqrt(kept))


def test_shot_vectors_draw_each_entry():
    dasq_dev, _ = _devices()
    node = qml.set_shots(qml.QNode(_kept, dasq_dev, postselect_mode="fill-shots"), [100, (50, 2)])
    assert [r.shape for r in node(1.0)] == [(100, 2), (50, 2), (50, 2)]


def test_broadcast_parameters_are_postselected_one_by_one():
    dasq_dev, reference = _devices()
    xs = np.array([0.3, 1.1, 2.5])
    got = qml.QNode(_one, dasq_dev)(xs)
    want = [qml.QNode(_one, reference, mcm_method="deferred")(x) for x in xs]
    for i, part in enumerate(got):
        np.testing.assert_allclose(part, [w[i] for w in want], atol=1e-10)


def test_parameter_shift_gradients_match_default_qubit():
    def f(x):
        qml.RX(x[0], 0)
        qml.RY(x[1], 1)
        qml.CNOT([0, 1])
        qml.measure(1, postselect=1)
        return qml.expval(qml.Z(0))

    x = pnp.array([0.6, 1.3], requires_grad=True)
    dasq_dev, reference = _devices()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PennyLane's notes on shifting through a projector
        got = qml.grad(qml.QNode(f, dasq_dev, diff_method="parameter-shift"))(x)
        want = qml.grad(qml.QNode(f, reference, mcm_method="deferred", diff_method="parameter-shift"))(x)
    np.testing.assert_allclose(got, want, atol=1e-8)
