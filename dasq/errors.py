"""dasq's exception family: one base class, so a script can catch everything dasq refuses.

``ValidationError`` is bad input (a value out of range, shapes that do not fit);
wrong *types* raise the built-in ``TypeError``. ``StoreError`` is a stored state
that cannot be used as asked (missing, mismatched, damaged, in use).
Both subclass ``ValueError``, so code written for plain ValueErrors keeps working.
``StateLostError`` is a state on a cluster whose blocks were lost with a worker and
that dasq cannot rebuild (a ``RuntimeError``: nothing the caller passed was wrong).
"""

from __future__ import annotations


class DasqError(Exception):
    """Base class of the errors dasq raises on purpose."""


class ValidationError(DasqError, ValueError):
    """An input value that dasq refuses, with what was wrong and what is allowed."""


class StoreError(DasqError, ValueError):
    """A stored state that cannot be used as asked (missing, mismatched, corrupted)."""


class StateLostError(DasqError, RuntimeError):
    """A state's blocks were lost with a worker, and dasq cannot compute them again."""
