"""dasq beside other frameworks. ``convert`` reads and writes circuits of other formats
(OpenQASM 2/3, Qiskit, Cirq) and imports only the circuit package; ``qiskit`` and
``pennylane`` run those frameworks' programs on dasq's api (``dasq.qiskit`` and
``dasq.pennylane`` are their public names). This package imports nothing itself, so a
converter loads without the adapters."""
