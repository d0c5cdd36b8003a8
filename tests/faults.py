"""Fault injection shared by the store tests."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from dasq.storage import store as store_module


def fill_disk_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> Callable[[], None]:
    """Every block write after the first ``writes`` fails with ENOSPC; returns a
    function that frees the disk again."""
    real_write = store_module.write_amplitudes
    calls = [0]

    def full(*args):
        calls[0] += 1
        if calls[0] > writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(*args)

    monkeypatch.setattr(store_module, "write_amplitudes", full)
    return lambda: monkeypatch.setattr(store_module, "write_amplitudes", real_write)
