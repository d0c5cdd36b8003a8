"""Where blocks live on a cluster: one contiguous range of blocks per worker.

Block c goes to worker c * W // B (W workers, B blocks). With W a power of two the
top log2(W) global bits name the worker, so a relayout over the other global bits
is a memory copy inside each worker and only relayouts over the top bits cross
the network. The planner keeps the qubits it needs again soonest on the lowest
global bits (plan/planner.py), so most relayouts stay inside workers.

The placement is a loose restriction (``allow_other_workers``): when a worker is
lost its blocks are recomputed on another, never waited for (stranded.py covers
the case distributed misses: every worker lost at once).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dask

from dasq import _config


@dataclass(frozen=True)
class BlockPlacement:
    """Blocks 0..num_blocks-1 spread over ``workers`` (addresses) in contiguous ranges."""

    workers: tuple[str, ...]
    num_blocks: int

    def worker_index(self, block: int) -> int:
        return block * len(self.workers) // self.num_blocks

    @property
    def worker_of(self) -> tuple[int, ...]:
        """Worker index of each block (what the layers count crossings with)."""
        return tuple(self.worker_index(c) for c in range(self.num_blocks))


@dataclass(frozen=True)
class _LayerWorkers:
    """Annotation callable for the keys of one layer: ``(name..., b, ...)`` runs on
    the worker of block b (layers.py puts the block a task reads from or writes as
    the key's second part: the output block, or a piece's source block); other
    keys (shared objects, Dask's own layers) follow their inputs."""

    name: str
    placement: BlockPlacement

    def __call__(self, key: Any) -> list[str]:
        if (
            isinstance(key, tuple)
            and len(key) >= 2
            and isinstance(key[0], str)
            and key[0].startswith(self.name)
            and isinstance(key[1], int)
            and 0 <= key[1] < self.placement.num_blocks
        ):
            return [self.placement.workers[self.placement.worker_index(key[1])]]
        return []


def worker_addresses(client: Any) -> tuple[str, ...]:
    """The addresses of ``client``'s workers, in a fixed order (none without a client)."""
    if client is None:
        return ()
    return tuple(sorted(_config.scheduler_workers(client)))  # none: the scheduler lost


def block_placement(workers: tuple[str, ...], num_blocks: int) -> BlockPlacement | None:
    """The placement of ``num_blocks`` blocks on ``workers`` (None: no workers)."""
    return BlockPlacement(workers, num_blocks) if workers else None


@contextmanager
def placed(placement: BlockPlacement | None, name: str) -> Iterator[None]:
    """Graphs submitted inside put the blocks of array ``name`` where ``placement`` says."""
    if placement is None or placement.num_blocks < 1:
        yield
        return
    with dask.annotate(workers=_LayerWorkers(name, placement), allow_other_workers=True):
        yield


def scheduler_client(client: Any) -> Any:
    """The distributed Client that will run our graphs (given, or Dask's default), or None."""
    if client is not None:
        return client
    if "distributed" not in sys.modules:  # no Client can exist: importing it takes a quarter second
        return None
    from distributed import default_client

    try:
        found = default_client()
    except ValueError:
        return None
    return found if getattr(dask.base.get_scheduler(), "__self__", None) is found else None
