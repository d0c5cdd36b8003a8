"""Every setting that chooses a path is in dasq/_config.py and on the docs' settings page,
so neither can drift from the code; the route reads them."""

from __future__ import annotations

import ast
from pathlib import Path

import dask
import pytest

import dasq
from dasq import _config
from dasq.engine import route
from dasq.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "guide" / "settings.md").read_text()


def _strings_of(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a string (``SEARCH_KEY = "dasq.plan-search"``)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    out[target.id] = node.value.value
    return out


def keys_read_in_dasq() -> dict[str, str]:
    """Every ``dasq.*`` key passed to ``dask.config.get`` or ``_config.setting`` in
    dasq/, as a literal or a module-level name, and the module that reads it."""
    found = {}
    for path in (ROOT / "dasq").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = _strings_of(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called not in ("get", "setting"):
                continue
            first = node.args[0]
            key = first.value if isinstance(first, ast.Constant) else names.get(getattr(first, "id", ""))
            if isinstance(key, str) and key.startswith("dasq."):
                found[key] = str(path.relative_to(ROOT))
    return found


def _literal_constants(path: Path) -> set[str]:
    """UPPER names bound at module level to a number or an expression of numbers."""
    tree = ast.parse(path.read_text())
    return {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.BinOp))
        for target in node.targets
        if isinstance(target, ast.Name) and target.id.isupper()
    }


def test_every_config_key_read_in_dasq_is_a_listed_setting():
    read = keys_read_in_dasq()
    assert len(read) >= 15, read  # the scan finds the keys (a broken scan finds none)
    unlisted = {key: where for key, where in read.items() if key not in _config.CONFIG_KEYS}
    assert not unlisted, f"add these to dasq/_config.py CONFIG_KEYS: {unlisted}"
    stale = set(_config.CONFIG_KEYS) - set(read)
    assert not stale, f"CONFIG_KEYS lists keys nothing reads: {sorted(stale)}"


def test_the_settings_page_lists_every_key_and_threshold():
    missing = [key for key in _config.CONFIG_KEYS if f"`{key}`" not in PAGE]
    thresholds = _literal_constants(Path(_config.__file__))
    assert "P2P_FROM_BLOCKS" in thresholds and "BACKGROUND_MAX_WORK" in thresholds
    missing += [name for name in thresholds if f"`{name}`" not in PAGE]
    assert not missing, f"docs/guide/settings.md does not list {missing}"


def test_no_module_sets_a_threshold_of_its_own():
    """A threshold is set once, in dasq/_config.py: a second literal elsewhere would be
    the one its module reads, silently apart from the documented value."""
    ours = _literal_constants(Path(_config.__file__))
    again = {
        str(path.relative_to(ROOT)): sorted(_literal_constants(path) & ours)
        for path in (ROOT / "dasq").rglob("*.py")
        if path.name != "_config.py"
    }
    assert not {where: names for where, names in again.items() if names}


def test_each_key_says_why():
    assert all(why.strip() for why in _config.CONFIG_KEYS.values())


def test_a_key_that_is_not_a_setting_is_refused():
    with pytest.raises(KeyError, match="not a dasq setting"):
        _config.setting("dasq.no-such-key")


def test_the_route_picks_the_relayout_method_by_place_and_blocks():
    with dask.config.set(scheduler="threads"):
        assert route.resolve_relayout_method(None, None, 1 << 20) == "views"
    somewhere = object()  # any client
    assert route.resolve_relayout_method("direct", somewhere, 1) == "packed"  # its fallback
    assert route.resolve_relayout_method(None, somewhere, _config.P2P_FROM_BLOCKS) == "p2p"
    with pytest.raises(ValidationError, match="needs a distributed"):
        route.resolve_relayout_method("p2p", None)


def test_chunk_qubits_and_memory_limit_reach_the_block_sizer():
    c = dasq.Circuit(12).h(0)
    assert dasq.simulate(c, chunk_qubits=5).chunk_qubits == 5
    with pytest.raises(ValidationError, match="memory_limit"):
        dasq.simulate(c, memory_limit=1 << 10)


def test_a_small_circuit_runs_on_rows_only_where_the_route_says():
    """One row of the row engine: the plan is made only when read; a fusion size asked
    for plans it."""
    c = dasq.Circuit(3).h(0).cx(0, 1)
    assert callable(dasq.simulate(c)._plan)
    planned = dasq.simulate(c, fusion_size=2)
    assert not callable(planned._plan) and planned.report.records
    assert planned.to_numpy() == pytest.approx(dasq.simulate(c).to_numpy())
