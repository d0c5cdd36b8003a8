"""PennyLane's ``dasq.qubit`` device (public as ``dasq.pennylane``): ``device`` (the
Device), ``operations`` (a tape's operations as dasq circuits), ``measurements``
(observables as Pauli sums, read-outs) and ``symbolic`` (trainable angles as dasq
Parameters: batches of tapes and the adjoint method)."""

try:
    import pennylane  # noqa: F401
except ImportError:  # pragma: no cover - pennylane is an optional extra
    raise ImportError("dasq.pennylane needs PennyLane: pip install 'dasq[pennylane]'") from None
