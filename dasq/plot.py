"""Pictures for notebooks (the optional ``plot`` extra: matplotlib).

``plot_probabilities``: the outcome distribution of a state (or of some of its
qubits) as bars. ``plot_plan``: where every qubit sits at every step of a plan
(inside the blocks or in the block index) above the amplitudes each step moves,
so a relayout's cost and the qubits it exchanges are seen at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasq.errors import ValidationError
from dasq.plan.steps import PhysicalPlan

PLOT_MISSING = 'plotting needs matplotlib: pip install "dasq[plot]"'
MAX_BARS = 64


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(PLOT_MISSING) from None
    return plt


def plot_probabilities(
    state: Any, qubits: Sequence[int] | None = None, *, top: int | None = None, ax: Any = None
) -> Any:
    """Bar chart of the outcome probabilities of ``state`` (a StateVector or
    DensityMatrix) on ``qubits`` (default: all; at most 6 qubits, or ``top`` bars
    of the most likely outcomes). Labels are bitstrings, qubit 0 rightmost as in
    Qiskit. Returns the matplotlib Axes."""
    probs = np.asarray(state.probabilities(qubits))
    width = int(probs.size).bit_length() - 1
    if top is None and probs.size > MAX_BARS:
        raise ValidationError(
            f"{probs.size} outcomes are too many bars; pass qubits= (at most 6) or top= (at most {MAX_BARS})"
        )
    if top is not None and not 1 <= top <= MAX_BARS:
        raise ValidationError(f"top must be between 1 and {MAX_BARS}, got {top}")
    order = np.arange(probs.size) if top is None else np.argsort(probs)[::-1][:top]
    labels = [format(int(i), f"0{width}b") for i in order]
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(max(4.0, 0.35 * len(labels)), 3))
    ax.bar(range(len(labels)), probs[order], color="tab:blue")
    ax.set_xticks(range(len(labels)), labels, rotation=90 if width > 3 else 0, fontfamily="monospace")
    ax.set_ylabel("probability")
    shown = "all qubits" if qubits is None else f"qubits {tuple(qubits)}"
    ax.set_title(f"{state.num_qubits}-qubit state, {shown}")
    return ax


def plan_positions(plan: PhysicalPlan) -> np.ndarray:
    """The position of every logical qubit (columns) after each step (rows, the
    initial layout first) of a staged plan."""
    return np.array([tuple(plan.initial_layout), *plan.layouts()])


def plot_plan(plan: PhysicalPlan, *, axes: Sequence[Any] | None = None) -> Any:
    """Two panels: which qubits are local (inside blocks) at each step, and the
    amplitudes each step moves between blocks. Returns the matplotlib Figure."""
    if plan.method != "planned":
        raise ValidationError(f"plot_plan draws staged plans (method 'planned'), got {plan.method!r}")
    plt = _pyplot()
    if axes is None:
        fig, axes = plt.subplots(2, 1, sharex=True, figsize=(8, 5), height_ratios=(3, 1))
    else:
        fig = axes[0].figure
    where, moves = axes
    positions = plan_positions(plan)
    local = (positions < plan.chunk_qubits).T  # qubit x step
    where.imshow(local, aspect="auto", cmap="Blues", interpolation="nearest", vmin=0, vmax=1.4)
    where.set_ylabel("qubit")
    where.set_title(
        f"{plan.num_qubits} qubits in blocks of 2^{plan.chunk_qubits}: dark = local, light = global"
    )
    moved = [0] + [step.traffic(plan.num_qubits, L).amplitudes_moved for _, step, L in plan.walk()]
    kinds = ["start"] + [step.name for _, step, _ in plan.walk()]
    colors = ["tab:red" if k == "relayout" else "tab:gray" for k in kinds]
    moves.bar(range(len(moved)), moved, color=colors)
    moves.set_ylabel("amplitudes moved")
    moves.set_xlabel("step (red: relayout)")
    return fig
