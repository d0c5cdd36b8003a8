"""The engine: runs physical plans on blocks through executors (in memory, streamed)."""
