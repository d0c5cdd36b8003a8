"""Creating a store under a URL, where nothing can be renamed into place.

A local store is built in a hidden directory and renamed to its name in one step.
An object store has no rename of a prefix, so a store there is built where it will
live, under its lease, and the manifest (written last, by one PUT) is what makes
it a store: a reader of a prefix without one is told it is not a dasq store. A
build killed half-way leaves objects without a manifest, marked as dasq's by the
group's attributes; its lease lapses, and the next creator, holding the lease,
removes them before it builds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import replace

from dasq.errors import StoreError
from dasq.storage.lease import LEASE_DIR, Lease
from dasq.storage.location import FsspecDir
from dasq.storage.manifest import GRADIENT_RECORD, MANIFEST

GROUP_METADATA = "zarr.json"
MARK = "dasq"  # the group attribute every dasq store carries (store.create_arrays)


def check_new(target: FsspecDir) -> None:
    """Refuse a URL that holds a store, or objects that are not a dasq store's."""
    if target.exists(MANIFEST) or target.exists(GRADIENT_RECORD):
        raise StoreError(f"{target} exists and holds a dasq store; choose another path or delete it")
    if leftovers(target) is None:
        raise StoreError(f"{target} exists and is not a dasq store; choose another path or delete it")


def leftovers(target: FsspecDir) -> list[str] | None:
    """The keys a killed dasq build left under ``target`` (none: []), or None when
    something else is stored there."""
    keys = [k for k in target.list_keys() if not k.startswith(LEASE_DIR + "/")]
    if not keys:
        return []
    try:
        attributes = json.loads(target.read_bytes(GROUP_METADATA)).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return None
    committed = MANIFEST in keys or GRADIENT_RECORD in keys  # what a build writes last
    return keys if isinstance(attributes, dict) and MARK in attributes and not committed else None


def create_in_place(
    target: FsspecDir, build: Callable[[FsspecDir], None], resume: str | None = None
) -> Lease:
    """Take the lease of ``target``, build the store there (``build`` writes the
    manifest last, after a renewal of the lease like every manifest) and return the
    lease, held. Two processes creating the same store: one takes the lease, the
    other is refused, or finds the store made."""
    lease = target.writer(resume=resume).acquire()
    try:
        if target.exists(MANIFEST) or target.exists(GRADIENT_RECORD):
            raise StoreError(
                f"{target} was created by another process while this one prepared it; "
                "a store has one writer: choose another path, or resume that run"
            )
        found = leftovers(target)
        if found is None:
            raise StoreError(f"{target} exists and is not a dasq store; choose another path or delete it")
        try:
            target.remove(found)
            build(replace(target, guard=lease.verify))
        except OSError as exc:
            raise StoreError(f"cannot create {target}: {exc}") from None
        lease.verify()
    except BaseException:
        if lease.held:  # what this build wrote; never anything once the lease is someone else's
            with contextlib.suppress(Exception):
                target.remove(leftovers(target) or [])
        lease.release()
        raise
    return lease
