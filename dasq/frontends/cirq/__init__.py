"""Cirq's simulators (public as ``dasq.cirq``), ``Simulator`` and ``DensityMatrixSimulator``, on dasq.

A Cirq program swaps ``cirq.Simulator()`` (or ``qsimcirq.QSimSimulator()``) for
``dasq.cirq.Simulator()``, or ``cirq.DensityMatrixSimulator()`` for
``dasq.cirq.DensityMatrixSimulator()``, and keeps ``run``, ``run_sweep``, ``sample``,
``simulate``, ``simulate_moment_steps``, ``simulate_expectation_values`` (and qsim's
``simulate_moment_expectation_values``) and ``compute_amplitudes``, with measurement
keys, parameter sweeps, qubit orders, initial states, noise and classical control.
The keyword options are dasq's own settings, passed to ``dasq.simulate``
(``chunk_qubits``, ``client``, ``store``...), so the state may live in blocks across
a Dask cluster or on disk.

Each parameter set is resolved by Cirq, the ``noise`` model applied by Cirq, and the
result converted (``dasq.frontends.convert.from_cirq``): qubit ``i`` of the order is dasq
qubit ``n-1-i``, so Cirq's big-endian index is dasq's little-endian one.

Randomness is drawn as Cirq's simulators draw it, from a ``numpy.random.RandomState``
seeded the same way, so a seeded dasq simulator gives Cirq's samples. A circuit whose
only random records are measurements that end it is simulated once and its
repetitions drawn together from the final state (one joint draw each, or one per
unentangled factor of Cirq's split state). Any other circuit (mid-circuit
measurements, resets, classical control, mixtures and channels) runs one trajectory
per repetition: each repetition draws one uniform number per random event, in
circuit order, and repetitions whose draws led to the same outcomes share one
simulated branch. A mixture's branch has a fixed probability; a channel's branches
are weighed on the state, the drawn Kraus operator applied and the state
renormalised. (A repetition's uniforms are laid out for every event it could meet,
so where a conditioned block draws, seeded samples follow Cirq's distribution but
not its draws.) ``simulate`` is one such trajectory (Cirq's meaning: the state
after the sampled measurements and noise); expectation values of a noisy circuit
average ``trajectories`` of them. The density-matrix simulator applies channels
exactly and draws only measurements.
"""

try:
    import cirq  # noqa: F401  (checked here: every module of the package needs it)
except ImportError:  # pragma: no cover - cirq is an optional extra
    raise ImportError(
        "this needs Cirq: install dasq with the 'cirq' extra (pip install 'dasq[cirq]')"
    ) from None
