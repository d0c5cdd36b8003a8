"""dasq: full-state quantum circuit simulation on chunked Dask arrays.

``expectation`` and ``gradient`` (dasq.batch) are imported when first used (PEP 562):
they import dask.array, which ``import dasq`` and a small run leave out.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dasq.api import info, plan, resume, run, simulate, warm_up
from dasq.circuit.circuit import Circuit
from dasq.circuit.noise import NoiseModel, QuantumError, ReadoutError
from dasq.circuit.parameters import Parameter
from dasq.errors import DasqError, StateLostError, StoreError, ValidationError
from dasq.plan.steps import PhysicalPlan
from dasq.plot import plot_plan, plot_probabilities
from dasq.state.density import DensityMatrix
from dasq.state.observables import PauliSum
from dasq.state.shots import Result
from dasq.state.statevector import StateVector
from dasq.state.trajectories import Estimate, Trajectories

if TYPE_CHECKING:
    from dasq.batch import expectation, gradient

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
    "StateLostError",
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


def __getattr__(name: str) -> Any:
    """``expectation``, ``gradient`` and the ``batch`` module, imported on first use."""
    if name not in ("batch", "expectation", "gradient"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    batch = importlib.import_module("dasq.batch")
    return batch if name == "batch" else getattr(batch, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
