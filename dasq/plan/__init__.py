"""Planning: from operations to a physical plan of steps (pure functions, no Dask)."""
