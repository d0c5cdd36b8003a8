"""dasq: full-state quantum circuit simulation on chunked Dask arrays."""

from dasq.api import info, plan, resume, run, simulate
from dasq.circuit.circuit import Circuit
from dasq.circuit.parameters import Parameter
from dasq.errors import DasqError, StoreError, ValidationError
from dasq.plan.steps import PhysicalPlan
from dasq.state.observables import PauliSum
from dasq.state.shots import Result
from dasq.state.statevector import StateVector

__version__ = "0.1.0"

__all__ = [
    "Circuit",
    "DasqError",
    "Parameter",
    "PauliSum",
    "PhysicalPlan",
    "Result",
    "StateVector",
    "StoreError",
    "ValidationError",
    "__version__",
    "info",
    "plan",
    "resume",
    "run",
    "simulate",
]
