"""Qiskit on dasq: ``BackendV2``, the V2 primitives and Aer's save instructions
(public as ``dasq.qiskit``)."""
