"""dasq inside Qiskit: the V2 primitives (``SamplerV2``, ``EstimatorV2``) and a
``BackendV2`` (``DasqBackend``), so Qiskit code switches to dasq by changing the
line that builds its sampler, estimator or simulator. Needs the ``qiskit`` extra."""

from dasq.frontends.qiskit.backend import DasqBackend, DasqJob
from dasq.frontends.qiskit.primitives import EstimatorV2, SamplerV2

__all__ = ["DasqBackend", "DasqJob", "EstimatorV2", "SamplerV2"]
