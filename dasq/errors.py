"""dasq's exception family: one base class, so a script can catch everything dasq refuses.

``ValidationError`` is bad input (a value out of range, shapes that do not fit);
wrong *types* raise the built-in ``TypeError``. ``StoreError`` is a stored state
that cannot be used as asked (missing, mismatched, damaged, in use).
Both subclass ``ValueError``, so code written for plain ValueErrors keeps working.
"""

from __future__ import annotations


class DasqError(Exception):
    """Base class of the errors dasq raises on purpose."""


class ValidationError(DasqError, ValueError):
    """An input value that dasq refuses, with what was wrong and what is allowed."""


class StoreError(DasqError, ValueError):
    """A stored state that cannot be used as asked (missing, mismatched, corrupted)."""
