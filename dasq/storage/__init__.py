"""Out-of-core states: a zarr v3 group on disk or under a URL, streamed stage by stage."""
