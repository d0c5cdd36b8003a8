"""The `diskfloor` suite: the disk floor alone (write the state's bytes, then read
them back cold while writing a second file), for the sizes of the outofcore suite.

    python benchmarks/run.py diskfloor --qubits 30 31 32
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.machine import machine
from benchmarks.measure import disk_streaming


def suite_diskfloor(args: argparse.Namespace) -> dict:
    """The disk floor alone, read cold, for the sizes of the outofcore suite."""
    work = Path(args.directory).absolute()
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.qubits:
        for dtype in args.dtypes:
            nbytes = (1 << n) * (8 if dtype == "complex64" else 16)
            rows.append({"qubits": n, "dtype": dtype, **disk_streaming(work, nbytes, cold=True)})
            print(json.dumps(rows[-1]), flush=True)
    return {"suite": "diskfloor", "machine": machine(), "rows": rows}
