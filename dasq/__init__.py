"""dasq: full-state quantum circuit simulation on chunked Dask arrays."""

from dasq.api import info, plan, resume, run, simulate, warm_up
from dasq.batch import expectation, gradient
from dasq.circuit.circuit import Circuit
from dasq.circuit.noise import NoiseModel, QuantumError, ReadoutError
from dasq.circuit.parameters import Parameter
from dasq.errors import DasqError, StoreError, ValidationError
from dasq.plan.steps import PhysicalPlan
from dasq.plot import plot_plan, plot_probabilities
from dasq.state.density import DensityMatrix
from dasq.state.observables import PauliSum
from dasq.state.shots import Result
from dasq.state.statevector import StateVector
from dasq.state.trajectories import Estimate, Trajectories

__version__ = "0.1.0"

__all__ = [
    "Circuit",
    "DasqError",
    "DensityMatrix",
    "Estimate",
    "NoiseModel",
    "Parameter",
    "PauliSum",
    "PhysicalPlan",
    "QuantumError",
    "ReadoutError",
    "Result",
    "StateVector",
    "StoreError",
    "Trajectories",
    "ValidationError",
    "__version__",
    "expectation",
    "gradient",
    "info",
    "plan",
    "plot_plan",
    "plot_probabilities",
    "resume",
    "run",
    "simulate",
    "warm_up",
]
