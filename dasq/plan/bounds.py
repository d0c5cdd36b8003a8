"""How few stages any staging could have: a lower bound beside the planner's count.

A stored run costs its passes times the state's bytes, so a plan reports its stage
count beside a bound no staging can beat; the gap says what a better planner could
still win (issue 62; Atlas bounds its stages with an ILP the same way).

The model is the planner's own (stages.py): a stage has L local wires; an operation
runs in a stage whose local wires hold its ``needs_local`` wires, no earlier than every
earlier operation it shares a wire with. Stages are counted between collapses, which
end a run of stages. The best of three bounds is kept:

- *cones* (any size, linear time): operation i gets a level k_i and a set U_i such that
  every staging runs i in stage k_i or later, and in stage k_i only with U_i local.
  Over i's last predecessor on each wire, k = max k_j and U = needs(i) | the U_j with
  k_j = k: a predecessor at its own level k forces its set into i's stage if i runs
  at k. When |U| > L, i cannot run at k, so k_i = k + 1 and U_i = needs(i).
- *covering*: every wire an operation needs is local in some stage, L at a time.
- *milp* (asked for: dask config ``dasq.plan-bound-seconds``, default 0, or
  ``seconds=``; a plan must stay quick to make and the same on every machine, so a
  plan made with the default carries the two cheap bounds): "K stages suffice" as a 0/1 program over
  a[i, k] (operation i has run by stage k) and y[q, k] (wire q is local in stage k);
  each K the solver proves infeasible raises the bound to K + 1, and a feasible K at
  the bound makes it exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dasq import _config
from dasq.circuit.kinds import Operation
from dasq.plan.stages import Footprints, footprints_of

BOUND_SECONDS_KEY = "dasq.plan-bound-seconds"  # the solver's budget per plan; 0: the cheap bounds only


@dataclass(frozen=True)
class StageBound:
    """At least ``stages`` stages; ``method``: "cones", "milp" (some stage counts proven
    too few) or "exact" (the optimum: a staging with this many stages exists)."""

    stages: int
    method: str

    def __str__(self) -> str:
        return f"lower bound {self.stages} stage{'' if self.stages == 1 else 's'} ({self.method})"


def stage_bound(
    wire_ops: Sequence[Operation], L: int, planned: int | None = None, seconds: float | None = None
) -> StageBound:
    """A lower bound on the stages of ``wire_ops`` (operations on wires, SWAPs absorbed)
    in blocks of 2^L. ``planned``: the planner's count, where the search may stop;
    ``seconds``: the solver's budget (None: dask config ``dasq.plan-bound-seconds``, 0)."""
    if seconds is None:
        seconds = float(_config.setting(BOUND_SECONDS_KEY) or 0.0)
    segments = _segments(wire_ops, L)
    cones = [cone_levels(fps, L) for fps in segments]
    low = sum(max(max(levels) + 1, _covering(fps, L)) for fps, levels in zip(segments, cones))
    if planned is not None and low >= planned:
        return StageBound(low, "exact")
    if len(segments) != 1 or seconds <= 0:
        return StageBound(low, "cones")
    return _searched(segments[0], cones[0], L, low, planned, time.perf_counter() + seconds)


def _segments(wire_ops: Sequence[Operation], L: int) -> list[Footprints]:
    """The footprints of each run of operations between collapses (as the planner cuts)."""
    out: list[Footprints] = []
    segment: list[Operation] = []
    for op in [*wire_ops, None]:
        if op is None or op.is_collapse:
            if segment:
                out.append(footprints_of(segment, L))
            segment = []
        else:
            segment.append(op)
    return out


def _covering(fps: Footprints, L: int) -> int:
    """Every wire some operation needs is local in some stage: L at a time."""
    needed = frozenset().union(*(f.needs_local for f in fps))
    return -(-len(needed) // L) if needed else 0  # L 0 (every qubit global): only what needs none


def cone_levels(footprints: Footprints, L: int) -> list[int]:
    """k_i of the cones bound for every operation (0-based stage indices)."""
    last: dict[int, tuple[int, int]] = {}  # wire -> (k, U as a bit mask) of its last operation
    levels = []
    for f in footprints:
        preds = {last[w] for w in f.wires if w in last}
        need = sum(1 << q for q in f.needs_local)
        k = max((p[0] for p in preds), default=0)
        forced = need
        for pk, pu in preds:
            if pk == k:
                forced |= pu
        if forced.bit_count() > L:
            k, forced = k + 1, need
        for w in f.wires:
            last[w] = (k, forced)
        levels.append(k)
    return levels


def _searched(
    fps: Footprints, levels: list[int], L: int, low: int, planned: int | None, deadline: float
) -> StageBound:
    """Raise ``low`` while the solver proves ``low`` stages too few, within the deadline."""
    nodes, preds = _precedence(fps)
    late = cone_levels(fps[::-1], L)[::-1]  # stages that must follow each operation
    method = "cones"
    while planned is None or low < planned:
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        fits = _fits(fps, nodes, preds, levels, late, L, low, left)
        if fits is None:
            break
        if fits:
            return StageBound(low, "exact")
        low, method = low + 1, "milp"
    return StageBound(low, "exact" if low == planned else method)


def _precedence(fps: Footprints) -> tuple[list[int], list[set[int]]]:
    """The operations with needs, and each one's nearest such predecessors: an
    operation with no needs only passes order on (it can run with its latest
    predecessor), so it is contracted away."""
    frontier: dict[int, frozenset[int]] = {}  # wire -> nodes that last touched it
    nodes: list[int] = []
    preds: list[set[int]] = []
    for i, f in enumerate(fps):
        front: frozenset[int] = frozenset().union(*(frontier.get(w, frozenset()) for w in f.wires))
        if f.needs_local:
            preds.append(set(front))
            front = frozenset((len(nodes),))
            nodes.append(i)
        for w in f.wires:
            frontier[w] = front
    return nodes, preds


def _fits(
    fps: Footprints,
    nodes: list[int],
    preds: list[set[int]],
    early: list[int],
    late: list[int],
    L: int,
    K: int,
    seconds: float,
) -> bool | None:
    """Whether K stages suffice (None: unknown in time, or too large to ask)."""
    if not nodes:
        return True  # nothing needs a local wire: one stage runs it all
    found = _solved(fps, nodes, preds, early, late, L, K, {"time_limit": max(seconds, 0.001)})
    return True if isinstance(found, list) else found


def staging_locals(
    fps: Footprints, L: int, K: int, node_limit: int = 0, seconds: float = 0.0
) -> list[frozenset[int]] | None:
    """The wires a K-stage staging needs local in each stage, as the solver found
    them within ``node_limit`` branch-and-bound nodes (no clock: the same answer on
    every machine with the same HiGHS) and, where given, ``seconds``; None: none found."""
    nodes, preds = _precedence(fps)
    if not nodes:
        return [frozenset()] * K
    early = cone_levels(fps, L)
    late = cone_levels(fps[::-1], L)[::-1]
    options: dict[str, float] = {"node_limit": node_limit} if node_limit else {}
    if seconds:
        options["time_limit"] = seconds
    found = _solved(fps, nodes, preds, early, late, L, K, options)
    return found if isinstance(found, list) else None


def _solved(
    fps: Footprints,
    nodes: list[int],
    preds: list[set[int]],
    early: list[int],
    late: list[int],
    L: int,
    K: int,
    options: dict[str, float],
) -> bool | list[frozenset[int]] | None:
    """The 0/1 program "K stages suffice": each stage's local needed wires when the
    solver finds a staging, False when it proves none exists, None otherwise."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    first = [early[i] for i in nodes]  # operation j runs in stage first[j]..last[j]
    final = [K - 1 - late[i] for i in nodes]
    if any(a > b for a, b in zip(first, final)):
        return False
    wires = sorted(frozenset().union(*(fps[i].needs_local for i in nodes)))
    column = {w: c for c, w in enumerate(wires)}
    size = len(nodes) * K + len(wires) * K
    if size > _config.MILP_MAX_VARIABLES:
        return None
    lower = np.zeros(size)
    upper = np.ones(size)
    for j in range(len(nodes)):  # a[j, k] at j * K + k: 0 before first[j], 1 from last[j]
        upper[j * K : j * K + first[j]] = 0
        lower[j * K + final[j] : (j + 1) * K] = 1
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    high: list[float] = []

    def row(entries: list[tuple[int, float]], bound: float) -> None:
        for c, v in entries:
            rows.append(len(high))
            cols.append(c)
            vals.append(v)
        high.append(bound)

    y0 = len(nodes) * K
    for j, i in enumerate(nodes):
        for k in range(first[j] + 1, final[j] + 1):
            row([(j * K + k - 1, 1), (j * K + k, -1)], 0)  # a[j, k-1] <= a[j, k]
        for k in range(first[j], K):
            for p in preds[j]:
                row([(j * K + k, 1), (p * K + k, -1)], 0)  # runs no earlier than p
        for k in range(first[j], final[j] + 1):
            for q in fps[i].needs_local:  # runs in stage k only with q local there
                entries = [(j * K + k, 1), (y0 + column[q] * K + k, -1)]
                if k:
                    entries.append((j * K + k - 1, -1))
                row(entries, 0)
    for k in range(K):
        row([(y0 + c * K + k, 1) for c in range(len(wires))], L)
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(high), size)).tocsr()
    result = milp(
        np.zeros(size),
        constraints=LinearConstraint(matrix, -np.inf, np.array(high)),
        integrality=np.ones(size),
        bounds=Bounds(lower, upper),
        options=options,
    )
    if result.x is not None and result.status in (0, 1):
        local = result.x[y0:].reshape(len(wires), K) > 0.5
        return [frozenset(w for c, w in enumerate(wires) if local[c, k]) for k in range(K)]
    return False if result.status == 2 else None
