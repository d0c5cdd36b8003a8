"""The progress bars a run draws (tqdm: text in a terminal, a widget in Jupyter).

A bar of counted units (a plan's steps, a dynamic circuit's operations, trajectories)
is moved by a callback ``advance(done, of)``; a stored pass's bar counts the bytes its
tasks read and write. tqdm is imported only when a bar is drawn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Advance = Callable[[int, int], Any]


def counting_bar(total: int, desc: str, unit: str) -> Advance:
    """``advance(done, of)`` for a bar of ``total`` units, drawn from its first call: a
    cluster's task graph, which distributed's bar follows instead, never draws it. The
    call with ``done >= of`` closes the bar."""
    from tqdm.auto import tqdm

    bar: Any = None

    def advance(done: int, of: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit=unit)
        if done >= of:  # close() draws the finished bar: drawn here too, it would print twice
            bar.n = done
            bar.close()
        else:
            bar.update(done - bar.n)  # drawn as tqdm's intervals allow

    return advance


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
