"""Backends: what happens to one block (numpy + numba on CPU; cupy next)."""
