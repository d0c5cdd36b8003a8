"""dasq: full-state quantum circuit simulation on chunked Dask arrays."""

from dasq.api import simulate
from dasq.circuit.circuit import Circuit
from dasq.state.observables import PauliSum
from dasq.state.statevector import StateVector
from dasq.storage.manifest import StoreError
from dasq.storage.run import info, resume

__version__ = "0.1.0"

__all__ = ["Circuit", "PauliSum", "StateVector", "StoreError", "__version__", "info", "resume", "simulate"]
