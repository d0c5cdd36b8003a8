"""Qiskit Aer's getting-started programs on dasq: only the simulator line differs.

Run: python examples/qiskit_backend.py (it needs qiskit-aer for its noise model:
pip install ".[qiskit]" qiskit-aer). The same programs with
``simulator = AerSimulator()`` give the same counts up to sampling noise
(tests/test_qiskit_backend.py runs both).
"""

import numpy as np
from qiskit import QuantumCircuit, transpile
from qiskit.circuit import Parameter
from qiskit_aer.noise import NoiseModel, depolarizing_error

from dasq.qiskit import DasqBackend

simulator = DasqBackend()

# 1. A Bell state, sampled, with its statevector saved before the measurements
circ = QuantumCircuit(2)
circ.h(0)
circ.cx(0, 1)
circ.save_statevector()
circ.measure_all()
circ = transpile(circ, simulator)
result = simulator.run(circ, shots=1000, seed_simulator=11).result()
print("bell counts:", dict(sorted(result.get_counts(circ).items())))
print("bell statevector:", np.round(np.asarray(result.get_statevector(circ)), 4).tolist())

# 2. A parameterised circuit, bound at run time for several values
theta = Parameter("theta")
param = QuantumCircuit(2)
param.ry(theta, 0)
param.cx(0, 1)
param.measure_all()
param = transpile(param, simulator)
values = np.linspace(0, np.pi, 3)
result = simulator.run(param, shots=1000, seed_simulator=12, parameter_binds=[{theta: values}]).result()
for value, counts in zip(values, result.get_counts()):
    print(f"theta={value:.4f} counts:", dict(sorted(counts.items())))

# 3. A noisy GHZ run: depolarising errors on every gate
noise_model = NoiseModel()
noise_model.add_all_qubit_quantum_error(depolarizing_error(0.05, 1), ["h"])
noise_model.add_all_qubit_quantum_error(depolarizing_error(0.1, 2), ["cx"])
noisy = DasqBackend(noise_model=noise_model)
ghz = QuantumCircuit(3)
ghz.h(0)
ghz.cx(0, 1)
ghz.cx(1, 2)
ghz.measure_all()
ghz = transpile(ghz, noisy)
result = noisy.run(ghz, shots=2000, seed_simulator=13).result()
print("noisy ghz counts:", dict(sorted(result.get_counts().items())))
