"""Where numba caches dasq's kernels: a directory of the user's cache, never inside the
installed package. ``pip uninstall`` leaves the files numba wrote there, and the
package's directory they keep, without its ``__init__.py``, then hides a later install
(an editable one from a clone) as an empty namespace package. Imports nothing of dasq:
the kernels' module places its cache before it defines them."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any


def cache_dir() -> Path | None:
    """numba's cache directory for dasq's kernels (``NUMBA_CACHE_DIR``, numba's own
    setting, else one per installation in the user's cache: ``XDG_CACHE_HOME`` or
    ~/.cache), or None where it cannot be written."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    if configured:
        path = Path(configured)
    else:
        package = str(Path(__file__).resolve().parents[1])
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = base / "dasq" / f"kernels-{hashlib.sha256(package.encode()).hexdigest()[:16]}"
    with contextlib.suppress(OSError):
        path.mkdir(parents=True, exist_ok=True)
    return path if os.access(path, os.W_OK) else None


def place_numba_cache() -> None:
    """Has numba cache the kernels of dasq's modules in ``cache_dir()``: a locator put
    first in numba's list, which answers for this package's files only (called before
    the kernels are defined; with ``NUMBA_CACHE_DIR`` set numba's own locator places them)."""
    from numba.core import caching

    locators = caching.CacheImpl._locator_classes
    # numba's locator of NUMBA_CACHE_DIR (its name had a leading underscore up to numba 0.61 at least)
    names = ("UserProvidedCacheLocator", "_UserProvidedCacheLocator")
    provided = next((getattr(caching, name) for name in names if hasattr(caching, name)), None)
    if provided is None or any(getattr(c, "places_dasq", False) for c in locators):
        return  # (a numba without it caches beside the source, as numba does by default)
    package = Path(__file__).resolve().parents[1]

    class DasqKernelsLocator(provided):  # type: ignore[misc, valid-type]
        places_dasq = True

        def __init__(self, py_func: Any, py_file: str, directory: Path) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(directory)

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if os.environ.get("NUMBA_CACHE_DIR") or not Path(py_file).resolve().is_relative_to(package):
                return None
            directory = cache_dir()
            return None if directory is None else cls(py_func, py_file, directory)

    locators.insert(0, DasqKernelsLocator)
