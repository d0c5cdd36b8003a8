"""Functions that act on ONE block of 2^L amplitudes (numpy; no Dask here).

A block of 2^L amplitudes is viewed as an L-dimensional tensor of shape (2,)*L in
C order, so local bit k lives on axis L-1-k. Controls are applied by indexing their
axes (a view of the satisfying amplitudes); targets are then axes of that view.
Kernels never modify their inputs: Dask may hand one block to several tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Bits = Sequence[int]


def as_tensor(block: np.ndarray, L: int) -> np.ndarray:
    return block.reshape((2,) * L)


def axis_of(bit: int, L: int) -> int:
    return L - 1 - bit


def fixed_index(L: int, fixed: dict[int, int]) -> tuple:
    """Index tuple that pins local bits ``fixed`` (bit -> value) and keeps the others.
    The trailing Ellipsis keeps the result a view even when every axis is pinned."""
    idx: list = [slice(None)] * L
    for bit, val in fixed.items():
        idx[axis_of(bit, L)] = val
    return (*idx, Ellipsis)


def view_axis(bit: int, L: int, pinned: Bits) -> int:
    """Axis of local ``bit`` in the view left after indexing the ``pinned`` bits away."""
    a = axis_of(bit, L)
    return a - sum(1 for p in pinned if axis_of(p, L) < a)


def _bit_factor(values: np.ndarray, bits: Bits, L: int, pinned: Bits) -> np.ndarray:
    """Reshape a 2^k table indexed by ``bits`` (bit j of the index -> bits[j]) so it
    broadcasts against the view left after pinning ``pinned``."""
    k = len(bits)
    ndim = L - len(pinned)
    table = values.reshape((2,) * k)  # table axis i <-> bits[k-1-i]
    axes = [view_axis(bits[k - 1 - i], L, pinned) for i in range(k)]
    order = np.argsort(axes)
    table = np.transpose(table, order)
    shape = [1] * ndim
    for a in axes:
        shape[a] = 2
    return table.reshape(shape)


# --------------------------------------------------------------------- creation
def basis_block(size: int, hot: int, dtype: str) -> np.ndarray:
    """A block of zeros with a single 1 at ``hot`` (-1: no 1 in this block)."""
    out = np.zeros(size, dtype=dtype)
    if hot >= 0:
        out[hot] = 1
    return out


# --------------------------------------------------------------------- local operations
def dense(
    block: np.ndarray, *, L: int, matrix: np.ndarray, targets: Bits, controls: dict[int, int]
) -> np.ndarray:
    """A dense 2^k x 2^k matrix on local ``targets`` of the amplitudes meeting ``controls``."""
    out = block.copy()
    view = as_tensor(out, L)[fixed_index(L, controls)]
    k = len(targets)
    pinned = list(controls)
    axes = [view_axis(targets[k - 1 - i], L, pinned) for i in range(k)]
    m = matrix.astype(block.dtype, copy=False).reshape((2,) * (2 * k))
    res = np.tensordot(m, view, axes=(list(range(k, 2 * k)), axes))
    view[...] = np.moveaxis(res, list(range(k)), axes)
    return out


def diagonal(
    block: np.ndarray, *, L: int, values: np.ndarray, targets: Bits, controls: dict[int, int]
) -> np.ndarray:
    """Multiply by a diagonal over local ``targets`` (a scalar when there are none)."""
    out = block.copy()
    view = as_tensor(out, L)[fixed_index(L, controls)]
    if len(targets) == 0:
        view *= values.reshape(()).astype(block.dtype)
    else:
        view *= _bit_factor(values.astype(block.dtype), targets, L, list(controls))
    return out


def swap_local(block: np.ndarray, *, L: int, a: int, b: int, controls: dict[int, int]) -> np.ndarray:
    out = block.copy()
    view = as_tensor(out, L)[fixed_index(L, controls)]
    pinned = list(controls)
    view[...] = np.swapaxes(view, view_axis(a, L, pinned), view_axis(b, L, pinned)).copy()
    return out


# --------------------------------------------------------------------- communicating operations
def pack(block: np.ndarray, *, L: int, fixed: dict[int, int]) -> np.ndarray:
    """The amplitudes with local bits ``fixed`` (a contiguous copy: what is sent)."""
    if not fixed:
        return block
    return np.ascontiguousarray(as_tensor(block, L)[fixed_index(L, fixed)])


def combine(
    own: np.ndarray,
    partner: np.ndarray | None = None,
    *,
    L: int,
    controls: dict[int, int],
    own_coeff: complex,
    partner_coeff: complex,
    flip_bits: Bits = (),
    sign_bits: Bits = (),
) -> np.ndarray:
    """new = own_coeff * own + partner_coeff * flip(sign * partner) on the amplitudes
    meeting ``controls``; the others keep their value.

    ``partner`` is the packed (control-selected) partner block, or None for this
    block itself. ``sign_bits`` multiply the source amplitude by (-1)^bit before the
    ``flip_bits`` axes are reversed (the local part of a Pauli string). This one
    kernel serves one-target gates on a global qubit (the paper's Alg. 6-8), Pauli
    tensors (Alg. 11-12) and Pauli/phase gadgets (Alg. 13-14).
    """
    out = own.copy()
    view = as_tensor(out, L)[fixed_index(L, controls)]
    pinned = list(controls)
    src = view if partner is None else partner.reshape(view.shape)
    if sign_bits:
        signs = np.array([(-1.0) ** bin(i).count("1") for i in range(1 << len(sign_bits))])
        src = src * _bit_factor(signs, sign_bits, L, pinned)
    if flip_bits:
        src = np.flip(src, axis=tuple(view_axis(b, L, pinned) for b in flip_bits))
    if own_coeff == 0:
        view[...] = src * partner_coeff
    else:
        view[...] = own_coeff * view + partner_coeff * src
    return out


def assemble(
    own: np.ndarray,
    *pieces: np.ndarray,
    L: int,
    controls: dict[int, int],
    piece_bits: Bits,
    piece_values: Sequence[Sequence[int]],
) -> np.ndarray:
    """A block of a fused multi-swap: ``pieces[i]`` goes where local bits
    ``piece_bits`` equal ``piece_values[i]`` (and ``controls`` hold); the rest is own."""
    out = own.copy()
    tensor = as_tensor(out, L)
    for piece, vals in zip(pieces, piece_values):
        fixed = dict(controls)
        fixed.update(zip(piece_bits, vals))
        view = tensor[fixed_index(L, fixed)]
        view[...] = piece.reshape(view.shape)
    return out


# --------------------------------------------------------------------- reductions
def marginal(block: np.ndarray, *, L: int, block_index: int, qubits: Bits) -> np.ndarray:
    """This block's share of the probabilities over ``qubits`` (little-endian), length 2^m."""
    m = len(qubits)
    p = (block.real**2 + block.imag**2).astype(np.float64)
    local = [(j, q) for j, q in enumerate(qubits) if q < L]
    base = 0
    for j, q in enumerate(qubits):
        if q >= L and (block_index >> (q - L)) & 1:
            base |= 1 << j
    out = np.zeros(1 << m)
    if not local:
        out[base] = p.sum()
        return out
    tensor = as_tensor(p, L)
    keep = [axis_of(q, L) for _, q in local]
    drop = tuple(a for a in range(L) if a not in keep)
    marg = tensor.sum(axis=drop) if drop else tensor
    # marg axes follow ascending axis order; put local[-1] first so C order gives
    # index bit i <-> local[i]
    kept_sorted = sorted(keep)
    perm = [kept_sorted.index(axis_of(q, L)) for _, q in reversed(local)]
    vec = np.transpose(marg, perm).reshape(-1)
    k = np.arange(1 << len(local))
    idx = np.full(k.shape, base)
    for i, (j, _) in enumerate(local):
        idx |= ((k >> i) & 1) << j
    out[idx] = vec
    return out


def sample_indices(block: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """``shots`` local indices drawn from this block's |amplitude|^2 (seeded)."""
    p = (block.real**2 + block.imag**2).astype(np.float64)
    cdf = np.cumsum(p)
    u = np.random.default_rng(seed).random(shots) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), p.size - 1)


def permute_bits(block: np.ndarray, *, perm: Sequence[int]) -> np.ndarray:
    """A new block whose index bit q is the input's index bit ``perm[q]``."""
    L = len(perm)
    tensor = block.reshape((2,) * L)
    axes = [L - 1 - perm[L - 1 - a] for a in range(L)]
    return np.ascontiguousarray(np.transpose(tensor, axes)).reshape(-1)
