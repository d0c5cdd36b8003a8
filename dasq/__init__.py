"""dasq: full-state quantum circuit simulation on chunked Dask arrays."""

from dasq.api import simulate
from dasq.circuit.circuit import Circuit
from dasq.state.observables import PauliSum
from dasq.state.statevector import StateVector

__version__ = "0.1.0"

__all__ = ["Circuit", "PauliSum", "StateVector", "__version__", "simulate"]
