"""One writer per store on an object store: a lease renewed by create-only writes.

An object store has no lock that a dead process gives back, so a writer holds a
lease instead: numbered objects ``dasq.lease/<generation>`` in the store, each
naming its holder, a random token and the wall-clock instant it expires. Every
change is a create-only write of the next generation (S3 ``If-None-Match: *``,
GCS ``ifGenerationMatch=0``): of all processes creating one generation exactly
one succeeds, and each reads the object back to learn whether it was the one (a
retried request, or S3's 409 for concurrent creates, leaves no doubt).

- take: the newest generation must be released, or expired by more than the
  clock-skew bound; else a StoreError names its holder. Then create the next.
- renew: create the next generation, by a timer thread every ``renew_every``
  seconds and in ``verify``, which a writer calls before every stage and every
  manifest write. It fails exactly when another process took the lease: that
  writer has lost it and stops before writing.
- lapse: a holder that could not renew counts its lease as gone ``seconds -
  skew`` after it sent its last renewal (on a clock that runs through suspend),
  and ``verify`` then refuses even if nobody took it over.
- release: create the next generation marked released.

What is guaranteed, assuming the store applies create-only writes atomically
(checked when a lease is taken: a second create of the same object must fail),
reads are strongly consistent after writes (S3, GCS, Azure), and hosts' clocks
differ by at most ``skew`` seconds:

- a manifest (the commit of a stage) is written only by the holder: each write
  follows a renewal that proved nobody else had created a newer generation, and
  another process could take over only once that fresh generation had expired by
  its clock, ``seconds`` later (a writer frozen for longer than that between the
  renewal and the PUT is the case no lease can exclude without the store checking
  a fencing token, which object stores do not).
- a new writer takes over no earlier than the old one stopped counting the lease
  as held. Block tasks a writer had already started when it lost its lease may
  still finish: they write the chunks of the stage the new writer resumes (the
  same computation from the same checked source), and any chunk whose bytes are
  not those its stage recorded is refused by name when it is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn

from dasq.errors import StoreError, ValidationError
from dasq.storage.lock import describe_holder, resume_hint

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

LEASE_DIR = "dasq.lease"
ACQUIRE_TRIES = 5
ATOMIC_CREATE = ("s3", "s3a", "gs", "gcs", "memory")  # filesystems whose create-only write is atomic
_MEMORY_CREATE = threading.Lock()


@dataclass(frozen=True)
class LeaseTerms:
    """How long a lease lasts unless renewed, the bound on clock differences between
    hosts writing a store, and how often the holder renews (0: only in ``verify``).
    Defaults: dask config ``dasq.lease-seconds`` (60), ``dasq.lease-clock-skew`` (5)
    and ``dasq.lease-renew-seconds`` (a quarter of the lease)."""

    seconds: float = 60.0
    skew: float = 5.0
    renew_every: float = 15.0

    def __post_init__(self) -> None:
        if not 0 <= 2 * self.skew < self.seconds:
            raise ValidationError(f"a lease of {self.seconds} s needs a clock skew in [0, seconds / 2)")
        if not 0 <= self.renew_every < self.seconds - self.skew:
            raise ValidationError("a lease must be renewed before it lapses: renew_every < seconds - skew")

    @classmethod
    def from_config(cls) -> LeaseTerms:
        from dasq import _config

        seconds = _config.setting("dasq.lease-seconds")
        skew = _config.setting("dasq.lease-clock-skew")
        renew = _config.setting("dasq.lease-renew-seconds")
        seconds = 60.0 if seconds is None else float(seconds)
        skew = 5.0 if skew is None else float(skew)
        return cls(seconds, skew, seconds / 4 if renew is None else float(renew))


@dataclass(frozen=True)
class LeaseRecord:
    """One generation of a lease, as stored (JSON)."""

    generation: int
    token: str
    host: str
    pid: int
    since: float
    expires: float  # wall clock of the holder
    released: bool = False

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, generation: int, data: bytes) -> LeaseRecord:
        """The record; an unreadable one counts as expired, its holder unknown."""
        try:
            fields = json.loads(data.decode())
            return cls(
                generation,
                str(fields["token"]),
                str(fields["host"]),
                int(fields["pid"]),
                float(fields["since"]),
                float(fields["expires"]),
                bool(fields["released"]),
            )
        except (ValueError, KeyError, TypeError):
            return cls(generation, "", "", 0, 0.0, 0.0)

    def live(self, skew: float) -> bool:
        """Held, by this host's clock given the skew bound."""
        return not self.released and time.time() <= self.expires + skew

    def describe(self) -> str:
        if not self.token:
            return "holder unknown"
        if self.released:
            return f"{describe_holder(asdict(self))}, which has released it since"
        until = time.strftime("%H:%M:%S", time.localtime(self.expires))
        return f"{describe_holder(asdict(self))}; its lease runs until {until}"


class Lease:
    """``with Lease(...): ...`` writes the store alone, or raises StoreError naming the
    holder. Not reentrant; ``verify`` before every write."""

    def __init__(
        self, fs: AbstractFileSystem, root: str, name: str, terms: LeaseTerms, resume: str | None = None
    ) -> None:
        self.fs, self.root, self.name, self.terms = fs, root, name, terms
        self.how_to_resume = resume_hint(name, resume)
        self.token = uuid.uuid4().hex
        self.since = time.time()
        self._generation: int | None = None
        self._deadline = 0.0  # _clock() after which the lease no longer counts as held
        self._expires = 0.0  # wall clock, as written in the record
        self._lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._generation is not None and self._lost is None

    def acquire(self) -> Lease:
        check_create_only(self.fs, self.name)
        for _ in range(ACQUIRE_TRIES):
            generations, newest = self._newest()
            if newest is not None and newest.live(self.terms.skew):
                raise StoreError(self._busy(newest))
            g = (generations[-1] if generations else 0) + 1
            with self._mutex:
                taken = self._create(g)
            if taken.token == self.token:
                break
        else:  # each try lost the race to a lease released or lapsed at once: an unlikely storm
            raise StoreError(self._busy(self._newest()[1]))
        self._refuse_unconditional_writes(taken)
        self._forget(generations)
        if self.terms.renew_every > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._renew_until_stopped, name="dasq-lease", daemon=True)
            self._thread.start()
        return self

    def verify(self) -> None:
        """Renew the lease, or raise StoreError when it lapsed or another process took
        it; a holder calls it before it writes, so it stops before writing."""
        with self._mutex:
            try:
                self._renew()
            except OSError as exc:
                raise StoreError(
                    f"the lease of {self.name} could not be renewed ({exc}); stopped before writing. The "
                    f"last completed stage is intact: {self.how_to_resume} once the store answers"
                ) from None

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._mutex:
            if self.held and self._generation is not None:
                with contextlib.suppress(OSError, StoreError):  # else it lapses on its own
                    if self._create(self._generation + 1, released=True).token == self.token:
                        self._forget([self._generation - 1])
            self._generation = None

    def is_live(self) -> bool:
        """Whether some process holds the lease now (no waiting)."""
        newest = self._newest()[1]
        return newest is not None and newest.live(self.terms.skew)

    def _newest(self) -> tuple[list[int], LeaseRecord | None]:
        """The generations stored and the newest one's record (listed again if it was
        deleted meanwhile: its holder renewed)."""
        for _ in range(ACQUIRE_TRIES):
            generations = self._generations()
            if not generations:
                return generations, None
            newest = self._read(generations[-1])
            if newest is not None:
                return generations, newest
        return generations, None

    def _renew(self) -> None:
        if self._lost is not None:
            raise StoreError(self._lost)
        if self._generation is None:
            raise StoreError(f"the lease of {self.name} is not held")
        g = self._generation + 1
        if not self._in_time():
            newest = self._newest()[1]
            if newest is not None and newest.generation > self._generation:
                self._lose(f"it was taken over by {newest.describe()}")
            lapsed = time.strftime("%H:%M:%S", time.localtime(self._expires - self.terms.skew))
            self._lose(f"it was not renewed in time and lapsed at {lapsed}")
        back = self._create(g)
        if back.token != self.token:
            self._lose(f"it was taken over by {back.describe()}")
        self._forget([g - 2])  # keep the previous one: a reader that listed it a moment ago still finds it

    def _in_time(self) -> bool:
        return _clock() < self._deadline and time.time() < self._expires - self.terms.skew

    def _lose(self, why: str) -> NoReturn:
        self._stop.set()
        self._lost = (
            f"the lease of {self.name} was lost: {why}, so another process may be writing the store; "
            f"stopped before writing. The last completed stage is intact: once no other dasq writes the "
            f"store, {self.how_to_resume}"
        )
        raise StoreError(self._lost)

    def _create(self, g: int, released: bool = False) -> LeaseRecord:
        """Create generation ``g`` if no one has, and return it as read back."""
        sent, now = _clock(), time.time()
        record = LeaseRecord(
            g, self.token, socket.gethostname(), os.getpid(), self.since, now + self.terms.seconds, released
        )
        failed: OSError | None = None
        try:
            create_only(self.fs, self._key(g), record.encode())
        except FileExistsError:
            pass
        except OSError as exc:  # the outcome is unknown (a timeout, a conflict): the read-back tells
            failed = exc
        back = self._read(g)
        if back is None:
            raise failed or OSError(f"{self._key(g)} vanished after it was written")
        if back.token == self.token and not released:
            self._generation, self._expires = g, record.expires
            self._deadline = sent + self.terms.seconds - self.terms.skew
        return back

    def _refuse_unconditional_writes(self, mine: LeaseRecord) -> None:
        """A store that ignores create-only writes would let two writers in: a second
        create of the generation just made (same bytes) must fail."""
        try:
            create_only(self.fs, self._key(mine.generation), mine.encode())
        except FileExistsError:
            return
        self.release()
        raise StoreError(
            f"cannot keep {self.name} to one writer: the store overwrote an object that a create-only "
            "write (If-None-Match) must have refused; use a store that supports conditional writes"
        )

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self.terms.renew_every):
            with self._mutex:
                try:
                    self._renew()
                except StoreError:
                    return  # lost: the next verify says so
                except OSError:
                    continue  # unreachable for now: retried until the lease lapses

    def _busy(self, holder: LeaseRecord | None) -> str:
        who = holder.describe() if holder is not None else "holder unknown"
        return (
            f"{self.name} is being written by another dasq process ({who}); a store has one writer at a "
            f"time: wait for it to finish, or stop it and {self.how_to_resume} once its lease "
            "has run out"
        )

    def _key(self, g: int) -> str:
        return f"{self.root}/{LEASE_DIR}/{g:020d}"

    def _generations(self) -> list[int]:
        directory = f"{self.root}/{LEASE_DIR}"
        self.fs.invalidate_cache(directory)  # a cached listing would miss other processes' leases
        try:
            names = self.fs.ls(directory, detail=False)
        except FileNotFoundError:
            return []
        return sorted(int(base) for n in names if (base := n.rstrip("/").rsplit("/", 1)[-1]).isdigit())

    def _read(self, g: int) -> LeaseRecord | None:
        try:
            return LeaseRecord.decode(g, self.fs.cat_file(self._key(g)))
        except FileNotFoundError:
            return None

    def _forget(self, generations: list[int]) -> None:
        old = [self._key(g) for g in generations if g >= 1]
        if old:
            with contextlib.suppress(OSError):  # leftovers are harmless: the newest counts
                self.fs.rm(old)

    def __enter__(self) -> Lease:
        return self.acquire() if not self.held else self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


def check_create_only(fs: AbstractFileSystem, name: str) -> None:
    """Refuse to write where dasq knows no atomic create-only write."""
    if not set(protocols(fs)) & set(ATOMIC_CREATE):
        raise StoreError(
            f"cannot write {name}: dasq keeps a store to one writer by create-only writes, which it can ask "
            f"atomically of {', '.join(p + '://' for p in ATOMIC_CREATE)} only; this filesystem is "
            f"{protocols(fs)[0]}://"
        )


def create_only(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Write ``path`` only if it does not exist (else FileExistsError), atomically."""
    if "memory" in protocols(fs):
        with _MEMORY_CREATE:  # MemoryFileSystem checks, then writes: atomic under one lock per process
            if fs.exists(path):
                raise FileExistsError(path)
            fs.pipe_file(path, data)
        return
    fs.pipe_file(path, data, mode="create")


def _clock() -> float:
    """Seconds that keep counting while the machine is suspended, where the OS has one
    (a laptop asleep must not wake up believing its lease is fresh)."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()
