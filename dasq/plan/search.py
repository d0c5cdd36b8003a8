"""Searched staging: fewer stages where each stage is a pass over a stored state.

The greedy planner (stages.py) weighs three candidate local sets per stage: quick
enough for every in-memory plan, yet one to three stages over the optimum on random
circuits (issue 62). A stored run reads and writes the whole state once per stage, so
its plan is worth a second of search:

- *climbed*: each stage's local set improved one swap at a time (a wire in for a wire
  out) while it runs more operations; forward from the first operation, and backward
  from the last (a staging of the reversed circuit, read backwards, is a staging; the
  QFT stages better from its end);
- *solved* (asked for: dask config ``dasq.plan-search-nodes`` > 0, or a stored run's
  ``seconds``, SearchSettings): the 0/1 program of bounds.py for each stage count
  below the best found, within that many branch-and-bound nodes or seconds. Its
  answer may change with HiGHS's version or the clock, so a stored run records the
  staging it follows and its resume replays it (``replayed_stages``).

A candidate is only a sequence of local sets: the operations are replayed through it,
each in the first stage that holds its needs after its predecessors ran, so the
planner's rules hold by construction. The fewest stages win, then the fewest wires
moved; free local slots are then given to wires already local. Without a solver's
seconds nothing depends on time, so the same circuit gives the same plan on every
machine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from dasq import _config
from dasq.plan.bounds import cone_levels, staging_locals
from dasq.plan.stages import Footprints, StageChoice, staged_footprints

SEARCH_KEY = "dasq.plan-search"  # search the stages of every plan (stored runs always do)
NODES_KEY = "dasq.plan-search-nodes"  # solver nodes per stage count tried; 0: no solver


@dataclass(frozen=True)
class SearchSettings:
    """How a plan's stages are chosen: the greedy planner (``search`` False) or the
    searches below, with the solver given ``nodes`` branch-and-bound nodes and
    ``seconds`` (0: not asked); or replayed from a recorded ``staging`` (the local
    wires of each stage a stored run follows)."""

    search: bool
    nodes: int = 0
    seconds: float = 0.0
    staging: tuple[frozenset[int], ...] | None = None


def search_settings(search: bool | None, seconds: float = 0.0) -> SearchSettings:
    """``search`` None reads dask config; the solver's nodes are dask config's."""
    if search is None:
        search = bool(_config.setting(SEARCH_KEY))
    nodes = int(_config.setting(NODES_KEY) or 0) if search else 0
    return SearchSettings(search, nodes, seconds if search else 0.0)


@dataclass(frozen=True)
class _Masks:
    """Footprints as bit masks over wires: the replay's inner loop is integer ops."""

    wires: tuple[int, ...]
    needs: tuple[int, ...]
    everyone: int

    @classmethod
    def of(cls, footprints: Footprints, everyone: frozenset[int]) -> _Masks:
        wires = tuple(_mask(f.wires) for f in footprints)
        needs = tuple(_mask(f.needs_local) for f in footprints)
        every = _mask(everyone)
        for w in wires:
            every |= w
        return cls(wires, needs, every)

    def reversed(self) -> _Masks:
        return _Masks(self.wires[::-1], self.needs[::-1], self.everyone)


def _mask(wires: frozenset[int]) -> int:
    return sum(1 << w for w in wires)


def _bits(mask: int) -> list[int]:
    return [w for w in range(mask.bit_length()) if mask >> w & 1]


@dataclass(frozen=True)
class _Pending:
    """The operations not run yet, as the replay reads them: their indices and masks,
    and the union of their wires (once every one is blocked, nothing after runs)."""

    index: tuple[int, ...]
    wires: tuple[int, ...]
    needs: tuple[int, ...]
    union: int

    @classmethod
    def of(cls, m: _Masks, done: list[bool]) -> _Pending:
        index = tuple(i for i, ran in enumerate(done) if not ran)
        wires = tuple(m.wires[i] for i in index)
        union = 0
        for w in wires:
            union |= w
        if not all(wires):  # an operation on no wire is never blocked: no early stop
            union = -1
        return cls(index, wires, tuple(m.needs[i] for i in index), union)


def _runnable(p: _Pending, local: int) -> list[int]:
    """The operations a stage with ``local`` runs: in order, unless a wire is blocked."""
    blocked = 0
    out = []
    for i, w, need in zip(p.index, p.wires, p.needs):
        if not w & blocked and not need & ~local:
            out.append(i)
        else:
            blocked |= w
            if blocked & p.union == p.union:
                break
    return out


def _count_runnable(p: _Pending, local: int) -> int:
    """``len(_runnable(p, local))``, without the list: what a trial of the climb weighs."""
    blocked = 0
    count = 0
    union = p.union
    for w, need in zip(p.wires, p.needs):
        if not w & blocked and not need & ~local:
            count += 1
        else:
            blocked |= w
            if blocked & union == union:
                break
    return count


def _executed(m: _Masks, done: list[bool], local: int) -> list[int]:
    return _runnable(_Pending.of(m, done), local)


def searched_stages(
    footprints: Footprints,
    everyone: frozenset[int],
    L: int,
    initial_local: frozenset[int] | None,
    nodes: int = 0,
    seconds: float = 0.0,
) -> list[StageChoice]:
    """The fewest stages the searches above find (never more than ``staged_footprints``),
    local sets of L wires drawn from ``everyone``; ``nodes``, ``seconds``: the solver's
    budget (both 0: no solver)."""
    greedy = staged_footprints(footprints, everyone, L, initial_local)
    m = _Masks.of(footprints, everyone)
    if len(greedy) <= 1 or m.everyone.bit_count() <= L:
        return greedy
    start = _mask(initial_local) if initial_local is not None else None
    tried = [
        [_mask(c.local) for c in greedy],
        _climbed(m, L, start),
        _climbed(m.reversed(), L, None)[::-1],
    ]
    staged = [s for s in (_replayed(m, locals_) for locals_ in tried) if s is not None]
    best = min(staged, key=lambda s: (len(s), _moved(s, start)))
    if nodes > 0 or seconds > 0:
        best = _solved(footprints, m, L, nodes, seconds, len(best)) or best
    return [StageChoice(frozenset(_bits(local)), tuple(ops)) for local, ops in _settled(m, best, start, L)]


def replayed_stages(
    footprints: Footprints, everyone: frozenset[int], staging: Sequence[frozenset[int]]
) -> tuple[list[StageChoice], int]:
    """The stages of a recorded staging (its local sets in order, as ``searched_stages``
    chose them), each running what it can, until every operation ran; and how many
    of the recorded sets that took. A staging that leaves operations over (a damaged
    record) raises ValueError."""
    m = _Masks.of(footprints, everyone)
    done = [False] * len(m.wires)
    out: list[StageChoice] = []
    used = 0
    for local in staging:
        if all(done):
            break
        used += 1
        ops = _executed(m, done, _mask(local))
        for i in ops:
            done[i] = True
        if ops:
            out.append(StageChoice(frozenset(local), tuple(ops)))
    if not all(done):
        raise ValueError("the recorded staging does not run every operation")
    return out, used


Staging = list[tuple[int, list[int]]]  # (local mask, operations run) per stage


def _replayed(m: _Masks, locals_: Sequence[int]) -> Staging | None:
    """Each stage of ``locals_`` runs all it can; stages that run nothing are dropped.
    None: operations are left over."""
    done = [False] * len(m.wires)
    out: Staging = []
    for local in locals_:
        ops = _executed(m, done, local)
        for i in ops:
            done[i] = True
        if ops:
            out.append((local, ops))
    return out if all(done) else None


def _moved(staging: Staging, start: int | None) -> int:
    """Wires that enter the local set over the staging (the first layout is free
    when ``start`` is None)."""
    moved = 0
    previous = start
    for local, _ in staging:
        if previous is not None:
            moved += (local & ~previous).bit_count()
        previous = local
    return moved


def _climbed(m: _Masks, L: int, start: int | None) -> list[int]:
    """Stage after stage, the local set that runs the most operations (then moves
    the fewest wires) among those one swap cannot improve, climbing from the wires
    needed soonest and from the current local set."""
    done = [False] * len(m.wires)
    current = start
    out: list[int] = []
    while not all(done):
        best: tuple[tuple[int, int], int, list[int]] | None = None
        for first in _starts(m, done, L, current):
            local, ops = _climb(m, done, first, current)
            score = (len(ops), -_entering(local, current))
            if best is None or score > best[0]:
                best = (score, local, ops)
        assert best is not None and best[2], "the first pending operation always fits"
        _, current, ops = best
        for i in ops:
            done[i] = True
        out.append(current)
    return out


def _entering(local: int, current: int | None) -> int:
    return 0 if current is None else (local & ~current).bit_count()


def _starts(m: _Masks, done: list[bool], L: int, current: int | None) -> list[int]:
    """The L wires needed soonest (filled from the current set, then the lowest), and
    the current set."""
    soonest = _filled(_soonest(m, done, L), (current or 0, m.everyone), L)
    return [soonest] if current is None or current == soonest else [soonest, current]


def _soonest(m: _Masks, done: list[bool], L: int) -> int:
    chosen = 0
    for i, need in enumerate(m.needs):
        if not done[i] and need & ~chosen:
            if (chosen | need).bit_count() > L:
                break
            chosen |= need
    return chosen


def _filled(chosen: int, pools: Sequence[int], L: int) -> int:
    """``chosen`` completed to L wires from the pools in turn, lowest wires first."""
    for pool in pools:
        for w in _bits(pool & ~chosen):
            if chosen.bit_count() >= L:
                return chosen
            chosen |= 1 << w
    return chosen


def _climb(m: _Masks, done: list[bool], local: int, current: int | None) -> tuple[int, list[int]]:
    """Swap a local wire for a needed one while that runs more operations (or as many,
    moving fewer wires); first improvement, in wire order."""
    pending = _Pending.of(m, done)
    needed = 0
    for need in pending.needs:
        needed |= need
    score = (_count_runnable(pending, local), -_entering(local, current))
    improved = True
    while improved:
        improved = False
        for out_wire in _bits(local):
            for in_wire in _bits(needed & ~local):
                trial = local ^ (1 << out_wire) ^ (1 << in_wire)
                trial_score = (_count_runnable(pending, trial), -_entering(trial, current))
                if trial_score > score:
                    local, score, improved = trial, trial_score, True
                    break
            if improved:
                break
    return local, _runnable(pending, local)


def _solved(
    footprints: Footprints, m: _Masks, L: int, nodes: int, seconds: float, found: int
) -> Staging | None:
    """The solver's staging with the fewest stages below ``found`` it reaches. With
    only nodes, each count from the bound up (the first it reaches wins); with
    ``seconds`` (shared by the counts it tries), one stage fewer first, then one fewer
    again while it finds them: a count near the bound can take its whole budget."""
    low = max(cone_levels(footprints, L), default=0) + 1
    if not seconds:
        for K in range(low, found):
            staged = _solved_at(footprints, m, L, K, nodes, 0.0)
            if staged is not None:
                return staged
        return None
    deadline = time.monotonic() + seconds
    best = None
    for K in range(found - 1, low - 1, -1):
        left = deadline - time.monotonic()
        staged = _solved_at(footprints, m, L, K, nodes, left) if left > 0 else None
        if staged is None:
            break
        best = staged
    return best


def _solved_at(
    footprints: Footprints, m: _Masks, L: int, K: int, nodes: int, seconds: float
) -> Staging | None:
    """A staging in at most K stages from the solver's local sets, or None."""
    locals_ = staging_locals(footprints, L, K, nodes, seconds)
    if locals_ is None:
        return None
    filled = []
    previous = None
    for needed in locals_:
        previous = _filled(_mask(needed), (previous or 0, m.everyone), L)
        filled.append(previous)
    staged = _replayed(m, filled)
    return staged if staged is not None and len(staged) <= K else None


def _settled(m: _Masks, staging: Staging, start: int | None, L: int) -> Staging:
    """The staging replayed with each stage's free slots (wires none of its operations
    needs) given to wires already local, so fewer move; a stage keeps what it ran and
    may run more, so the count never grows."""
    done = [False] * len(m.wires)
    previous = start
    out: Staging = []
    for local, _ in staging:
        used = 0
        for i in _executed(m, done, local):
            used |= m.needs[i]
        settled = _filled(used, (previous or 0, local, m.everyone), L)
        ops = _executed(m, done, settled)
        for i in ops:
            done[i] = True
        if ops:
            out.append((settled, ops))
            previous = settled
    assert all(done), "a settled staging runs at least what the staging ran"
    return out
