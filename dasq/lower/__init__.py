"""Lowering: operations -> Dask graph layers over blocks, with their communication cost."""
