"""A variational circuit as PennyLane users write it, run on dasq.

Only the device name is dasq's: name default.qubit or lightning.qubit instead and
the script runs unchanged (tests/test_pennylane.py checks that default.qubit prints
the same numbers). The QNode's gradient comes from PennyLane's parameter shift,
which runs the shifted circuits on the device.

    pip install ".[pennylane]"    # PennyLane, beside dasq
    python examples/pennylane_qnode.py
"""

import pennylane as qml
from pennylane import numpy as np

n_wires = 4
dev = qml.device("dasq.qubit", wires=n_wires)

hamiltonian = qml.Hamiltonian(
    [1.0, 1.0, 1.0, 0.5, 0.5],
    [qml.Z(0) @ qml.Z(1), qml.Z(1) @ qml.Z(2), qml.Z(2) @ qml.Z(3), qml.X(0), qml.X(3)],
)


def ansatz(weights):
    """A hardware-efficient ansatz: RY/RZ layers and a CNOT ladder."""
    for layer in weights:
        for wire in range(n_wires):
            qml.RY(layer[wire, 0], wires=wire)
            qml.RZ(layer[wire, 1], wires=wire)
        for wire in range(n_wires - 1):
            qml.CNOT(wires=[wire, wire + 1])


@qml.qnode(dev)
def energy(weights):
    ansatz(weights)
    return qml.expval(hamiltonian)


@qml.qnode(dev)
def probabilities(weights):
    """The same circuit's measurement probabilities on the first two wires."""
    ansatz(weights)
    return qml.probs(wires=[0, 1])


weights = np.array(np.random.default_rng(7).uniform(0, np.pi, (2, n_wires, 2)), requires_grad=True)

print(f"device: {dev.name}")
print(f"initial energy: {energy(weights):.10f}")
gradient = qml.grad(energy)(weights)
print("gradient[0]:", " ".join(f"{g:.10f}" for g in gradient[0].ravel()))

opt = qml.GradientDescentOptimizer(stepsize=0.2)
for step in range(1, 4):
    weights = opt.step(energy, weights)
    print(f"after step {step}: energy {energy(weights):.10f}")
print("final probs:", " ".join(f"{p:.10f}" for p in probabilities(weights)))
