"""Cirq code written for qsimcirq, run on dasq: only the simulator line differs.

In the style of qsimcirq's usage docs: sample circuits with keyed measurements,
read a final state, sweep a parameter and compute expectation values. With
``import qsimcirq`` and ``sim = qsimcirq.QSimSimulator(seed=2024)`` instead of
the marked line, the same program runs on qsim (tests/test_cirq_simulator.py
checks that both print the same results).

    pip install ".[cirq]"    # Cirq, beside dasq
    python examples/cirq_simulator.py
"""

import cirq
import numpy as np
import sympy

import dasq.cirq

sim = dasq.cirq.Simulator(seed=2024)  # the one changed line; was: qsimcirq.QSimSimulator(seed=2024)

a, b, c = cirq.LineQubit.range(3)

# Sampling: a GHZ state measured under one key, 1000 repetitions.
ghz = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.CNOT(b, c), cirq.measure(a, b, c, key="ghz"))
counts = sim.run(ghz, repetitions=1000).histogram(key="ghz")
print("run ghz histogram (sampled):", dict(sorted(counts.items())))

# Deterministic outcomes under two keys; a key's bits follow its measurement's qubits.
flips = cirq.Circuit(cirq.X(a), cirq.CNOT(a, b), cirq.measure(a, key="first"), cirq.measure(c, b, key="rest"))
measured = sim.run(flips, repetitions=3).measurements
print("run first:", measured["first"].tolist(), "rest:", measured["rest"].tolist())

# The final state vector of a circuit without measurements.
circuit = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.ry(0.4).on(c))
print("simulate final state:", cirq.dirac_notation(sim.simulate(circuit).final_state_vector, decimals=3))

# A parameterised circuit, swept over theta.
theta = sympy.Symbol("theta")
rotation = cirq.Circuit(cirq.rx(theta).on(a), cirq.measure(a, key="m"))
for result in sim.run_sweep(rotation, cirq.Linspace("theta", 0, np.pi, 5), repetitions=1000):
    print(f"sweep theta={result.params['theta']:.4f} P(m=1) (sampled): {result.measurements['m'].mean():.3f}")

# Exact expectation values on the final state.
values = sim.simulate_expectation_values(circuit, [cirq.Z(a) * cirq.Z(b), cirq.X(a) * cirq.X(b), cirq.Z(c)])
print("expectation <Za Zb>, <Xa Xb>, <Zc>:", [round(v.real, 4) for v in values])
