"""Many circuits: a parameter sweep, a batch of expectation values and an adjoint
gradient, each from one compiled circuit.

    python examples/sweeps.py

The circuit is a two-layer hardware-efficient ansatz on 8 qubits with 32 angles.
One call evaluates it at 2,000 parameter sets; another gives its gradient in all
32 angles by the adjoint method, checked here against parameter shift.
"""

import time

import numpy as np

import dasq

n, layers = 8, 2
names = iter(f"t{i:02d}" for i in range(2 * n * layers))
circuit = dasq.Circuit(n)
for _ in range(layers):
    for q in range(n):
        circuit.ry(dasq.Parameter(next(names)), q).rz(dasq.Parameter(next(names)), q)
    for q in range(n - 1):
        circuit.cx(q, q + 1)
hamiltonian = [("Z" * 2 + "I" * (n - 2), 1.0), ("I" * (n - 2) + "XX", 0.5), ("I" * (n - 1) + "Y", -0.3)]
P = len(circuit.parameters)

# a batch: 2,000 parameter sets (rows ordered as circuit.parameters)
rng = np.random.default_rng(1)
values = rng.uniform(-np.pi, np.pi, size=(2000, P))
start = time.perf_counter()
energies = dasq.expectation(circuit, hamiltonian, parameters=values)
seconds = time.perf_counter() - start
print(f"{len(energies)} parameter sets in {seconds:.2f} s; lowest energy {energies.min():.6f}")

# a sweep of one angle, the others fixed: a mapping of names to arrays broadcasts
sweep = {name: values[0, i] for i, name in enumerate(circuit.parameters)}
sweep["t00"] = np.linspace(-np.pi, np.pi, 9)
print("sweep of t00:", np.round(dasq.expectation(circuit, hamiltonian, parameters=sweep), 4))

# the gradient at the best set, by the adjoint method, against parameter shift
best = values[np.argmin(energies)]
grads = dasq.gradient(circuit, hamiltonian, parameters=best)
shifts = np.pi / 2 * np.eye(P)
shifted = dasq.expectation(circuit, hamiltonian, parameters=np.concatenate([best + shifts, best - shifts]))
difference = np.max(np.abs(grads - (shifted[:P] - shifted[P:]) / 2))
print(f"adjoint vs parameter shift: max difference {difference:.1e}")
