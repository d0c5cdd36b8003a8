"""Matrices of the standard gates, with Qiskit's definitions (and global phases)."""

from __future__ import annotations

import numpy as np

SQ2 = 1.0 / np.sqrt(2.0)

H = np.array([[SQ2, SQ2], [SQ2, -SQ2]], dtype=complex)
SX = 0.5 * np.array([[1 + 1j, 1 - 1j], [1 - 1j, 1 + 1j]])
ISWAP = np.array([[1, 0, 0, 0], [0, 0, 1j, 0], [0, 1j, 0, 0], [0, 0, 0, 1]], dtype=complex)


def rx(theta: float) -> np.ndarray:
    c, s = np.cos(theta / 2), np.sin(theta / 2)
    return np.array([[c, -1j * s], [-1j * s, c]])


def ry(theta: float) -> np.ndarray:
    c, s = np.cos(theta / 2), np.sin(theta / 2)
    return np.array([[c, -s], [s, c]], dtype=complex)


def rz_diagonal(theta: float) -> np.ndarray:
    return np.array([np.exp(-0.5j * theta), np.exp(0.5j * theta)])


def phase_diagonal(theta: float) -> np.ndarray:
    return np.array([1.0, np.exp(1j * theta)])


def u(theta: float, phi: float, lam: float) -> np.ndarray:
    c, s = np.cos(theta / 2), np.sin(theta / 2)
    return np.array(
        [
            [c, -np.exp(1j * lam) * s],
            [np.exp(1j * phi) * s, np.exp(1j * (phi + lam)) * c],
        ]
    )
