"""A tour of dasq on 10 qubits: build, simulate in blocks, read out, inspect the traffic."""

import numpy as np

import dasq

n = 10
c = dasq.Circuit(n)
for q in range(n):
    c.h(q)
for q in range(n - 1):
    c.cp(np.pi / 2 ** (q + 1), q, q + 1)
c.pauli_gadget(0.4, "XYZ", (0, 5, 9)).swap(1, 8).unitary(np.eye(4)[[1, 0, 3, 2]], (9, 2))

state = dasq.simulate(c, chunk_qubits=6, seed=1)  # 16 blocks of 64 amplitudes
print(state)
print("norm:", state.norm())
print("P(qubit 9):", state.probabilities([9]))
print("<Z0 Z9>:", state.expectation("Z" + "I" * (n - 2) + "Z"))
print("top counts:", sorted(state.sample(2000, seed=3).items(), key=lambda kv: -kv[1])[:3])
print(state.report)
