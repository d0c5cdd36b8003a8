"""dasq inside Cirq: ``Simulator`` and ``DensityMatrixSimulator`` drop-in for Cirq's (and
qsim's) simulators, with dasq's settings as keywords (dasq/frontends/cirq). Needs the
``cirq`` extra."""

from dasq.frontends.cirq.simulators import DensityMatrixSimulator, Simulator

__all__ = ["DensityMatrixSimulator", "Simulator"]
