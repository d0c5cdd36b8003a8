"""Relayout pieces compressed on their way between workers.

A relayout's all-to-all moves (1 - 2^-k) of the state; on a cluster the pieces
that cross to another worker can travel compressed: losslessly (zstd, or blosc
with byte shuffling, through numcodecs) or after bit rounding of the mantissas
(``keep_bits``, as for stored states), whose cost in fidelity is measured on the
pieces it rounds and reported with the run. Pieces that stay on their worker are
never encoded: nothing travels.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasq import _config
from dasq.storage.store import FLOAT_OF, Codec

# per graph layer: squared norm of the exact pieces, their overlap with the rounded
# ones (real, imaginary) and the squared norm of the rounded ones; read back by the
# executor (``take_rounding``) from every worker
_ROUNDING: defaultdict[str, np.ndarray] = defaultdict(lambda: np.zeros(4))


@dataclass(frozen=True)
class PieceCodec:
    """How pieces that cross workers are encoded: ``compression`` None, "zstd" or
    "blosc"; ``keep_bits`` None or the mantissa bits kept by bit rounding first."""

    compression: str | None = None
    keep_bits: int | None = None

    @classmethod
    def chosen(cls, compression: Any, keep_bits: Any, dtype: str) -> PieceCodec | None:
        """The codec asked for (else dask config ``dasq.relayout-compression`` and
        ``dasq.relayout-keep-bits``), checked for ``dtype``; None: pieces travel as they are."""
        if compression is None:
            compression = _config.setting("dasq.relayout-compression")
        if keep_bits is None:
            keep_bits = _config.setting("dasq.relayout-keep-bits")
        if compression is None and keep_bits is None:
            return None
        Codec(compression, keep_bits).check(dtype, prefix="relayout_")
        return cls(compression, keep_bits)

    def _compressor(self, dtype: Any) -> Any:
        from numcodecs import Blosc, Zstd

        if self.compression == "zstd":
            return Zstd(level=1)
        if self.compression == "blosc":
            typesize = np.dtype(FLOAT_OF[np.dtype(dtype).name]).itemsize
            return Blosc(cname="zstd", clevel=1, shuffle=Blosc.SHUFFLE, typesize=typesize)
        return None

    def encode(self, piece: np.ndarray, layer: str) -> np.ndarray:
        """The bytes that travel for ``piece`` (uint8); bit rounding's effect on it is
        added to ``layer``'s tally in this process."""
        piece = np.ascontiguousarray(piece)
        data = piece
        if self.keep_bits is not None:
            from numcodecs import BitRound

            floats = piece.view(FLOAT_OF[piece.dtype.name])
            rounded = np.asarray(BitRound(keepbits=self.keep_bits).encode(floats.copy()))
            data = rounded.view(floats.dtype).view(piece.dtype)
            overlap = np.vdot(piece, data)
            exact2 = np.vdot(piece, piece).real
            _ROUNDING[layer] += (exact2, overlap.real, overlap.imag, np.vdot(data, data).real)
        compressor = self._compressor(piece.dtype)
        if compressor is None:
            return np.frombuffer(data.tobytes(), dtype=np.uint8)
        return np.frombuffer(compressor.encode(data), dtype=np.uint8)

    def decode(self, data: np.ndarray, dtype: Any) -> np.ndarray:
        compressor = self._compressor(dtype)
        raw = data if compressor is None else compressor.decode(data)
        return np.frombuffer(raw, dtype=dtype)


def is_encoded(piece: Any) -> bool:
    """Whether a piece arrived encoded (bytes) rather than as amplitudes."""
    return getattr(piece, "dtype", None) == np.uint8


def take_rounding(layers: list[str], dask_worker: Any = None) -> dict[str, list[float]]:
    """This process's rounding tally of ``layers`` (forgotten once read)."""
    return {name: _ROUNDING.pop(name).tolist() for name in layers if name in _ROUNDING}


def relayout_fidelities(tallies: list[np.ndarray | None]) -> list[float | None]:
    """Fidelity each relayout kept, |<exact|rounded>|^2 / (|exact|^2 |rounded|^2), from
    the tallies of its rounded pieces, in order; None where nothing was rounded. The
    state's squared norm starts at 1 and changes by what each relayout rounds; pieces
    that were not rounded count exactly."""
    out: list[float | None] = []
    norm2 = 1.0
    for tally in tallies:
        if tally is None:
            out.append(None)
            continue
        exact2, re, im, rounded2 = tally
        kept = norm2 - exact2
        after = kept + rounded2
        out.append(float(((kept + re) ** 2 + im**2) / (norm2 * after)))
        norm2 = after
    return out
