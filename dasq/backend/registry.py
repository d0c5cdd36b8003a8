"""The backends by name: a run chooses one, once."""

from __future__ import annotations

from dasq.backend.base import Backend
from dasq.backend.cpu import CPU
from dasq.backend.gpu import GPU, GPU_TWIN
from dasq.errors import ValidationError

BACKENDS: dict[str, Backend] = {b.name: b for b in (CPU, GPU, GPU_TWIN)}


def get_backend(name: str = "cpu") -> Backend:
    """The backend called ``name``: "cpu" (numpy + numba), "gpu" (cupy + CUDA kernels)
    or "gpu-twin" (the gpu backend's code on numpy: slow, for tests without a GPU)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValidationError(f"unknown backend {name!r}; available: {sorted(BACKENDS)}") from None
