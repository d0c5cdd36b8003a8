"""Cirq's and qsim's own simulator tests, run unchanged against ``dasq.cirq.Simulator``.

Cirq's ``cirq/sim/sparse_simulator_test.py`` comes installed with cirq-core: its
tests run here with ``cirq.Simulator`` standing for ``dasq.cirq.Simulator``
(``tests/dropin_cirq.py`` rebuilds each test function over its module's globals with
``cirq`` swapped; nothing of Cirq's is copied). They run in CI.

qsim's ``qsimcirq_tests/qsimcirq_test.py`` is not shipped in the qsimcirq wheel. Run
it against dasq, with ``qsimcirq.QSimSimulator`` standing for dasq's simulator, by
pointing DASQ_QSIM_TESTS at a copy of the file::

    git -C QSIM_CHECKOUT show HEAD:qsimcirq_tests/qsimcirq_test.py > /tmp/qsimcirq_test.py
    DASQ_QSIM_TESTS=/tmp/qsimcirq_test.py python -m pytest tests/test_cirq_suites.py -k qsim

Without the variable those tests are not collected. qsim's constructor takes
``qsim_options`` and ``circuit_memoization_size``; :class:`QSimStandIn` passes
``seed`` and ``noise`` on, maps ``ev_noisy_repetitions`` (qsim's "r") to dasq's
``trajectories``, and keeps the rest, which tune qsim's own kernels, unread.

The tests a drop-in may decline are listed below, each with its reason; pytest
reports them as skipped with that reason. No noise, classical-control,
initial-state or empty-circuit behaviour is declined (qsim's test that it refuses
confusion maps is listed: dasq applies them, as cirq.Simulator does).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

cirq = pytest.importorskip("cirq")

_cirq_suite = pytest.importorskip("cirq.sim.sparse_simulator_test")
from dropin_cirq import Swapped, adapted, load_path  # noqa: E402

import dasq.cirq  # noqa: E402

_CORE_ITERATOR = "mocks cirq.Simulator's private _core_iterator to count its calls"
_QUDITS = "qudits (dimension > 2); dasq simulates qubits"
CIRQ_DECLINED = {
    "test_run_measure_at_end_no_repetitions": _CORE_ITERATOR,
    "test_run_repetitions_measure_at_end": _CORE_ITERATOR,
    "test_run_invert_mask_measure_not_terminal": _CORE_ITERATOR,
    "test_run_partial_invert_mask_measure_not_terminal": _CORE_ITERATOR,
    "test_run_measurement_not_terminal_no_repetitions": _CORE_ITERATOR,
    "test_run_repetitions_measurement_not_terminal": _CORE_ITERATOR,
    "test_run_reset": _QUDITS,
    "test_simulate_qudits": _QUDITS,
    "test_simulate_qudit_mixtures": _QUDITS,
    "test_qudit_invert_mask": _QUDITS,
    "test_state_vector_copy": "checks that Cirq's step results share one buffer that later moments overwrite",
    "test_separated_states_str_does_not_merge": "prints Cirq's product state factor by factor",
}


class QSimStandIn(dasq.cirq.Simulator):
    """qsimcirq.QSimSimulator's constructor on dasq's simulator (see the module docstring)."""

    def __init__(
        self,
        qsim_options: Any = None,
        seed: Any = None,
        noise: Any = None,
        circuit_memoization_size: int = 0,
    ) -> None:
        options = dict(qsim_options) if isinstance(qsim_options, dict) else {}
        if qsim_options is not None and not isinstance(qsim_options, dict):
            options = qsim_options.as_dict()
        super().__init__(seed=seed, noise=noise, trajectories=int(options.get("r", 1)))
        self.qsim_options = options


_QSIM_OWN = "tests qsim's translator or option objects, not the simulator"
_QSIM_GPU = "qsim's GPU builds, chosen by its use_gpu/gpu_mode options (dasq picks a GPU with device=)"
_QSIM_LIMIT = "expects qsim's own limit on gate width; dasq simulates the wider gate"
QSIM_DECLINED = {
    "test_translate_cirq_to_qtrajectory": _QSIM_OWN,
    "test_translate_matrix_gate_too_big": _QSIM_OWN,
    "test_add_op_to_opstring_controlled_gate_error": _QSIM_OWN,
    "test_qsim_circuit_eq": _QSIM_OWN,
    "test_cirq_qsim_old_options": _QSIM_OWN,
    "test_qsim_simulator_reserved_keys": _QSIM_OWN,
    "test_cirq_qsimh_simulate": "qsim's hybrid Schrödinger-Feynman simulator (QSimhSimulator), not swapped",
    "test_cirq_too_big_gate": _QSIM_LIMIT,
    "test_simulate_matrix_gate_too_big": _QSIM_LIMIT,
    "test_control_limits": _QSIM_LIMIT,
    "test_control_values": _QUDITS,
    "test_confusion_matrix_exception": "expects qsim's refusal of confusion maps; dasq applies them as "
    "cirq.Simulator does (tests/test_cirq_dropin.py checks them against Cirq)",
}  # and every test of qsim's GPU builds, named when the file is loaded

globals().update(
    {
        f"test_cirq__{name[5:]}": test
        for name, test in adapted(
            _cirq_suite, {"cirq": Swapped(cirq, {"Simulator": dasq.cirq.Simulator})}, CIRQ_DECLINED
        ).items()
    }
)

if os.environ.get("DASQ_QSIM_TESTS"):
    qsimcirq = pytest.importorskip("qsimcirq")
    _qsim_suite = load_path(os.environ["DASQ_QSIM_TESTS"], "qsimcirq_test")
    QSIM_DECLINED.update(
        {
            name: _QSIM_GPU
            for name in vars(_qsim_suite)
            if name.startswith("test_") and ("gpu" in name or "custatevec" in name)
        }
    )
    globals().update(
        {
            f"test_qsim__{name[5:]}": test
            for name, test in adapted(
                _qsim_suite, {"qsimcirq": Swapped(qsimcirq, {"QSimSimulator": QSimStandIn})}, QSIM_DECLINED
            ).items()
        }
    )
