"""The backends by name: a run chooses one, once."""

from __future__ import annotations

from dasq.backend.base import Backend
from dasq.backend.cpu import CPU
from dasq.errors import ValidationError

BACKENDS: dict[str, Backend] = {CPU.name: CPU}


def get_backend(name: str = "cpu") -> Backend:
    """The backend called ``name`` ("cpu": numpy + numba)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValidationError(f"unknown backend {name!r}; available: {sorted(BACKENDS)}") from None
