"""The progress bars a run draws (tqdm: text in a terminal, a widget in Jupyter).

A bar of counted units (a plan's steps, a dynamic circuit's operations, trajectories)
is moved by calls ``bar(done, of)``; a stored pass's bar counts the bytes its
tasks read and write. tqdm is imported only when a bar is drawn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Advance = Callable[[int, int], Any]  # (units done, units in all)


class CountingBar:
    """A bar of ``total`` units moved by calls ``bar(done, of)``, drawn from the first
    call (so a run that never calls it, a cluster's task graph that distributed's bar
    follows, draws none). The call with ``done >= of`` closes it finished; ``close()``
    closes it where it stands (a run that failed)."""

    def __init__(self, total: int, desc: str, unit: str) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self._bar: Any = None

    def __call__(self, done: int, of: int) -> None:
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, unit=self.unit)
        if done >= of:  # close() draws the finished bar: drawn here too, it would print twice
            self._bar.n = done
            self._bar.close()
        else:
            self._bar.update(done - self._bar.n)  # drawn as tqdm's intervals allow

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def bytes_bar(label: str, nblocks: int, nbytes: int) -> Any:
    """A stored pass's bar: the bytes its ``nblocks`` blocks' tasks read and write."""
    from tqdm.auto import tqdm

    return tqdm(
        total=nbytes, desc=label, unit="B", unit_scale=True, unit_divisor=1024, postfix=f"{nblocks} blocks"
    )


def advance_bytes(bar: Any, nbytes: float) -> None:
    """Advance a pass's bar by ``nbytes``: the update that finishes it is not drawn,
    since the bar's close() draws the finished bar (drawn by both, it printed twice)."""
    if bar.total is not None and bar.n + nbytes >= bar.total:
        bar.n += nbytes
    else:
        bar.update(nbytes)
