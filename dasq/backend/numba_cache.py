"""Where numba caches dasq's kernels: a directory of the user's cache, never inside the
installed package. ``pip uninstall`` leaves the files numba wrote there, and the
package's directory they keep, without its ``__init__.py``, then hides a later install
(an editable one from a clone) as an empty namespace package. Imports nothing of dasq:
the kernels' module places its cache before it defines them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]


def _candidates() -> Iterator[Path]:
    """``NUMBA_CACHE_DIR`` where it is set (numba's own setting); else the user's cache
    (``XDG_CACHE_HOME`` or ~/.cache), then the temporary directory, one directory per
    installation in either."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    if configured:
        yield Path(configured)
        return
    name = f"kernels-{hashlib.sha256(str(PACKAGE).encode()).hexdigest()[:16]}"
    with contextlib.suppress(RuntimeError, KeyError):  # no home directory (HOME unset, no passwd entry)
        yield Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dasq" / name
    yield Path(tempfile.gettempdir()) / f"dasq-{os.getuid()}" / name


def cache_dir() -> Path | None:
    """numba's cache directory for dasq's kernels: the first of ``_candidates`` that can
    be written, or None."""
    for path in _candidates():
        with contextlib.suppress(OSError):
            path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    return None


def place_numba_cache() -> None:
    """Has numba cache the kernels of dasq's modules in ``cache_dir()``: a locator put
    first in numba's list, which answers for this package's files only (called before
    the kernels are defined). Where numba read ``NUMBA_CACHE_DIR`` when it was imported,
    its own locator places them there."""
    from numba.core import caching, config

    locators = caching.CacheImpl._locator_classes
    # numba's locator of NUMBA_CACHE_DIR (its name had a leading underscore up to numba 0.61 at least)
    names = ("UserProvidedCacheLocator", "_UserProvidedCacheLocator")
    provided = next((getattr(caching, name) for name in names if hasattr(caching, name)), None)
    if provided is None or any(getattr(c, "places_dasq", False) for c in locators):
        return  # (a numba without it caches beside the source, as numba does by default)

    class DasqKernelsLocator(provided):  # type: ignore[misc, valid-type]
        places_dasq = True

        def __init__(self, py_func: Any, py_file: str, directory: Path) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(directory)

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if config.CACHE_DIR or not Path(py_file).resolve().is_relative_to(PACKAGE):
                return None
            directory = cache_dir()
            return None if directory is None else cls(py_func, py_file, directory)

    locators.insert(0, DasqKernelsLocator)
