"""Stores from the command line and the API: ``dasq info`` prints sizes as Dask does
(``dask.utils.format_bytes``), and a store in a directory that takes no files (/proc,
/sys: they report 0 bytes free) is refused as not writable, not as short of disk."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dask.utils import format_bytes

import dasq
from dasq.cli import main


def _ghz(n: int) -> dasq.Circuit:
    c = dasq.Circuit(n).h(0)
    for q in range(n - 1):
        c.cx(q, q + 1)
    return c


def test_info_prints_sizes_with_dasks_units(tmp_path, capsys):
    store = tmp_path / "ghz.zarr"
    dasq.simulate(_ghz(10), store=store, memory_limit="32KiB")
    assert main(["info", str(store), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert main(["info", str(store)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("on disk"))
    assert line == (
        f"on disk      {format_bytes(facts['size_on_disk'])}; "
        f"a run needs up to {format_bytes(facts['disk_needed'])}"
    )
    assert "kiB" in line and "GiB" not in line  # a 16 KiB state is not "0.000 GiB"


UNWRITABLE = [p for p in ("/proc", "/sys") if Path(p).is_dir()]


@pytest.mark.skipif(not UNWRITABLE, reason="no /proc or /sys on this system")
@pytest.mark.parametrize("directory", UNWRITABLE)
def test_a_store_where_nothing_can_be_written_is_refused_as_not_writable(directory, tmp_path, capsys):
    path = f"{directory}/dasq-test.zarr"
    refused = re.escape(f"cannot create {path}: {directory} is not writable")
    with pytest.raises(dasq.StoreError, match=refused):
        dasq.simulate(_ghz(3), store=path)
    with pytest.raises(dasq.StoreError, match="is not writable"):
        dasq.simulate(_ghz(3)).to_zarr(path)
    qasm = tmp_path / "ghz.qasm"
    qasm.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\nh q[0];\ncx q[0],q[1];\n')
    assert main(["run", str(qasm), "--store", path]) == 2
    err = capsys.readouterr().err
    assert "is not writable" in err and "free" not in err and "\n" not in err.strip()


def test_a_store_in_a_missing_directory_names_it(tmp_path):
    with pytest.raises(dasq.StoreError, match=r"the directory .*missing does not exist"):
        dasq.simulate(_ghz(3), store=tmp_path / "missing" / "s.zarr")
