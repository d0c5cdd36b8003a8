"""Out-of-core states: a zarr v3 group on disk, streamed stage by stage."""
