"""An emulated cluster of hosts joined by shaped links, on one Linux machine (as root).

Each host is a network namespace of its own: a scheduler host and W worker hosts,
each with one address in a private /24 and one link: a veth pair whose other end is
a port of a bridge that lives in a namespace of its own (the "switch"). Every link
is shaped with ``tc ... tbf`` at the given rate in both directions (the egress of
both of its ends). The calling process (the Dask client) stays in the root
namespace and reaches the hosts through one more veth into the switch, unshaped
unless ``client_rate`` says otherwise: that veth, its address and the /24 route
that comes with it are all this module adds to the root namespace.

    with emulated_cluster(workers=2, rate="1gbit") as cluster, cluster.client() as client:
        dasq.simulate(circuit, client=client)
        cluster.link_down(1)  # worker 1's switch port goes dark; cluster.link_up(1) brings it back

As a script::

    python benchmarks/hosts.py --workers 2 --rate 1gbit --probe          # raw TCP and Dask rates
    python benchmarks/hosts.py --workers 2 --rate 1gbit 5gbit none --probe --repeat 3
    python benchmarks/hosts.py --workers 2 --rate 1gbit --shell          # up until Ctrl-C

Names: namespaces ``dasqh-<pid>-<seq>-<role>``, interfaces ``dq<pid in hex>_<seq in
hex><role><end>`` (15 characters at most). Everything is torn down on exit
(``__exit__``, ``atexit``, SIGTERM, SIGINT), and every start first removes what
clusters of processes that are gone left behind (a SIGKILLed pytest): names with
these prefixes only, and only those of dead pids.

Workers run without a nanny (``nanny=True`` to have one): one ``dask worker``
process per host, so killing a host's process group or cutting its link hits
exactly that worker; a nanny would not bring a cut-off worker back anyway (a worker
whose scheduler connection breaks closes itself and its nanny with it:
"worker-handle-scheduler-connection-broken"), and it costs a process per host and
1-2 s more to start on 2 cores.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import fcntl
import functools
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

NS_PREFIX = "dasqh"
IF_PREFIX = "dq"
NS_PATTERN = re.compile(rf"^{NS_PREFIX}-(\d+)-(\d+)-")
IF_PATTERN = re.compile(rf"^{IF_PREFIX}([0-9a-f]+)_([0-9a-f]+)[a-z]")
STATE_DIR = Path("/run/dasq-hosts")  # a JSON record per live cluster (its owner's start time), and a lock
SUBNETS = ipaddress.ip_network("10.213.0.0/16")  # each cluster takes a /24 of it that nothing here routes
SCHEDULER_PORT = 8786  # the scheduler's namespace is its own: no other process holds the port there
SCHEDULER_OCTET, FIRST_WORKER_OCTET, CLIENT_OCTET = 1, 10, 254
MAX_WORKERS = 99  # roles w0..w98 keep interface names within 15 characters

# tbf: the bucket holds BURST_SECONDS of the rate, never less than MIN_BURST_BYTES,
# and the queue LATENCY of it. Raw TCP over a 5 gbit link (64 MiB, 2 cores) carried
# 1.9 Gbit/s with a bucket of 16 KiB and 3.0 with 64 KiB: tbf cannot be woken often
# enough to refill a small bucket at a high rate. With 1 ms of the rate it carried
# 4.2-4.6, with 2 ms 4.4-4.8 (4.78 is the payload of 5 Gbit/s: 1448 bytes of every
# 1514), with 16 ms 5.2: a bucket is let through at line speed on top of the rate,
# 0.4% of 64 MiB at 1 gbit with 2 ms. The queue's length (5-100 ms) changed nothing.
BURST_SECONDS = 0.002
MIN_BURST_BYTES = 128 * 1024
LATENCY = "20ms"

# Dask settings under which a lost link fails a run in seconds instead of minutes, for
# every process of a cluster (``config=``) and the client (``dask.config.set``): a
# comm that gets no answer for 12 s is dead (distributed wants 11 s at least), a new
# connection gives up after 5 s, a worker silent for 8 s is removed (checked every
# 8 s), and a task with no worker to run it fails after 10 s.
SHORT_TIMEOUTS = {
    "distributed.comm.timeouts.connect": "5s",
    "distributed.comm.timeouts.tcp": "12s",
    "distributed.scheduler.worker-ttl": "8s",
    "distributed.scheduler.no-workers-timeout": "10s",
}

_REPO = Path(__file__).resolve().parents[1]
_seq = 0
_live: list[EmulatedCluster] = []
_handlers_installed = False
_previous_handlers: dict[int, Any] = {}


class HostsError(RuntimeError):
    """A namespace, link or process of the emulated cluster could not be set up."""


# --------------------------------------------------------------------------- helpers
def _cmd(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise HostsError(f"`{' '.join(argv)}` failed ({out.returncode}): {out.stderr.strip()}")
    return out


def _ip(ns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip`` in namespace ``ns`` (None: the root namespace)."""
    return _cmd("ip", *(["-n", ns] if ns else []), *args, check=check)


def _tc(ns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _cmd("tc", *(["-n", ns] if ns else []), *args, check=check)


def parse_rate(rate: str | int | float | None) -> int | None:
    """Bits per second of ``"1gbit"``, ``"5gbit"``, ``"500mbit"``, ``"100kbit"`` (``"...bps"``:
    bytes) or a number; None for an unshaped link (also ``"none"``, ``"unshaped"``)."""
    if rate is None:
        return None
    if isinstance(rate, (int, float)):
        return int(rate)
    text = rate.strip().lower()
    if text in ("none", "unshaped", "off", ""):
        return None
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([kmg]?)(bit|bps)?", text)
    if not match:
        raise ValueError(f"a rate is like '1gbit', '500mbit' or None, not {rate!r}")
    value = float(match[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match[2]]
    return int(value * (8 if match[3] == "bps" else 1))


def tbf_parameters(bits_per_second: int) -> list[str]:
    """The ``tc qdisc ... tbf`` arguments a link of this rate is shaped with."""
    burst = max(MIN_BURST_BYTES, int(bits_per_second / 8 * BURST_SECONDS))
    return ["rate", f"{bits_per_second}bit", "burst", str(burst), "latency", LATENCY]


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (kernel ticks; None: no such process). A pid that
    was reused belongs to a process with another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL to whatever is left after ``grace`` s."""
    if proc.poll() is None and grace > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived it too
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def namespace_pids(ns: str) -> list[int]:
    """The processes inside network namespace ``ns``."""
    out = _cmd("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []


def _delete_namespace(ns: str) -> None:
    """Kills what still runs inside ``ns`` (a namespace this module made), then deletes it."""
    for _ in range(20):
        pids = namespace_pids(ns)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    _cmd("ip", "netns", "del", ns, check=False)


def _namespaces() -> list[str]:
    out = _cmd("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _root_links() -> list[str]:
    return os.listdir("/sys/class/net") if os.path.isdir("/sys/class/net") else []


def remove_leftovers() -> list[str]:
    """Deletes the namespaces, root interfaces and scratch folders left by clusters
    whose process is gone (killed before it could clean up); returns what it removed."""
    removed = []
    records: dict[tuple[int, int], dict] = {}
    if STATE_DIR.is_dir():
        for path in STATE_DIR.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                record = json.loads(path.read_text())
                records[(int(record["pid"]), int(record["seq"]))] = record | {"path": str(path)}

    def stale(pid: int, seq: int) -> bool:
        record = records.get((pid, seq))
        now = _start_time(pid)
        return now is None or (record is not None and record.get("start") not in (None, now))

    links = _root_links()  # listed first: deleting a namespace takes its veth peers with it
    for ns in _namespaces():
        match = NS_PATTERN.match(ns)
        if match and stale(int(match[1]), int(match[2])):
            _delete_namespace(ns)
            removed.append(ns)
    for link in links:
        match = IF_PATTERN.match(link)
        if match and stale(int(match[1], 16), int(match[2], 16)):
            _ip(None, "link", "del", link, check=False)  # gone already when its peer's namespace went
            removed.append(link)
    for (pid, seq), record in records.items():
        if stale(pid, seq):
            scratch = Path(record.get("scratch") or "/nonexistent")
            if scratch.name.startswith(f"{NS_PREFIX}-{pid}-{seq}-"):
                shutil.rmtree(scratch, ignore_errors=True)
            Path(record["path"]).unlink(missing_ok=True)
            removed.append(record["path"])
    return removed


@functools.cache
def can_emulate() -> str | None:
    """None when network namespaces, a veth pair between two of them, a bridge and a
    tbf qdisc can be made here; otherwise why not (a test's skip reason)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, not {sys.platform}"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    pid = os.getpid()
    a, b = f"{NS_PREFIX}-{pid}-999-probea", f"{NS_PREFIX}-{pid}-999-probeb"
    end_a, end_b = f"{IF_PREFIX}{pid:x}_3e7pa", f"{IF_PREFIX}{pid:x}_3e7pb"
    steps = [
        ("ip", "netns", "add", a),
        ("ip", "netns", "add", b),
        ("ip", "link", "add", end_a, "netns", a, "type", "veth", "peer", "name", end_b, "netns", b),
        ("ip", "-n", b, "link", "add", f"{IF_PREFIX}{pid:x}_3e7pr", "type", "bridge"),
        ("tc", "-n", a, "qdisc", "add", "dev", end_a, "root", "tbf", *tbf_parameters(10**9)),
    ]
    try:
        for step in steps:
            try:
                out = _cmd(*step, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"`{' '.join(step)}` could not run: {exc}"
            if out.returncode != 0:
                return f"`{' '.join(step)}` failed: {out.stderr.strip() or out.returncode}"
    finally:
        for ns in (a, b):
            _cmd("ip", "netns", "del", ns, check=False)
    return None


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """Serialises building networks between processes of this machine (two must not
    pick the same free /24)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _routed() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination the root namespace routes (all tables), but the default."""
    out = _ip(None, "-4", "-j", "route", "show", "table", "all", check=False)
    routed = []
    for route in json.loads(out.stdout or "[]"):
        dst = route.get("dst", "default")
        if dst != "default":
            with contextlib.suppress(ValueError):
                routed.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    return routed


def _free_subnet(pid: int, seq: int) -> ipaddress.IPv4Network:
    """A /24 of SUBNETS that no route of the root namespace overlaps (so none of this
    machine's networks, nor another live cluster's), searched from one derived from the pid."""
    subnets = list(SUBNETS.subnets(new_prefix=24))[1:-1]
    routed = _routed()
    start = (pid * 7 + seq) % len(subnets)
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(candidate.overlaps(net) for net in routed):
            return candidate
    raise HostsError(f"every /24 of {SUBNETS} is routed here already")


def _teardown_all() -> None:
    for cluster in list(_live):
        cluster.close()


def _on_signal(signum: int, frame: Any) -> None:
    _teardown_all()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)  # SIGINT: Python's own, which raises KeyboardInterrupt
    else:  # SIG_DFL: die of it, as the process would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    """Teardown at exit, and on SIGTERM and SIGINT (once, from the main thread: only
    it can set handlers), before whatever handled them does."""
    global _handlers_installed
    if not _handlers_installed:
        atexit.register(_teardown_all)
        _handlers_installed = True
    if _previous_handlers or threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if previous is signal.SIG_IGN or previous is None:  # ignored (a background job's
            continue  # SIGINT), or not set from Python: left as it is
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_signal)


# --------------------------------------------------------------------------- the cluster
@dataclasses.dataclass(frozen=True)
class Host:
    """One emulated host: its namespace (None: the root namespace: the client), its
    address, its end of its link (``interface``) and the switch's end (``port``)."""

    name: str
    namespace: str | None
    address: str
    interface: str
    port: str


class EmulatedCluster:
    """A Dask scheduler and W workers, each in a network namespace of its own, joined
    by a bridge in another namespace through links shaped with tbf. Use
    :func:`emulated_cluster` (a context manager)."""

    def __init__(
        self,
        workers: int = 2,
        rate: str | int | None = "1gbit",
        threads: int = 1,
        memory_limit: str | int | None = None,
        preload: bool = True,
        env: dict[str, str] | None = None,
        *,
        nanny: bool = False,
        config: dict[str, Any] | None = None,
        client_rate: str | int | None = None,
        startup_timeout: float = 120,
    ) -> None:
        global _seq
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be 1..{MAX_WORKERS}, not {workers}")
        self.workers, self.threads, self.memory_limit = workers, threads, memory_limit
        self.preload, self.nanny, self.startup_timeout = preload, nanny, startup_timeout
        self.rate, self.client_rate = parse_rate(rate), parse_rate(client_rate)
        self.config = dict(config or {})
        self.env = dict(env or {})
        for key, value in self.config.items():  # Dask reads DASK_A__B_C as a.b-c
            self.env["DASK_" + key.upper().replace(".", "__").replace("-", "_")] = str(value)
        self.pid, self.seq = os.getpid(), _seq % 256
        _seq += 1
        self.tag = f"{IF_PREFIX}{self.pid:x}_{self.seq:x}"
        self.switch = f"{NS_PREFIX}-{self.pid}-{self.seq}-sw"
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, Host] = {}  # "scheduler", "w0", "w1", ...
        self.client_host: Host | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        self.scratch: Path | None = None  # logs and the workers' local directories
        self.worker_addresses: list[str] = []  # Dask's address of worker i
        self.up_seconds: float | None = None
        self.down_seconds: float | None = None
        self._procs: list[tuple[str, subprocess.Popen, Path]] = []
        self._clients: list[Any] = []
        self._namespaces: list[str] = []
        self._state_file: Path | None = None
        self._closing = False
        self._closed = False

    # ------------------------------------------------------------------ bringing it up
    def start(self) -> EmulatedCluster:
        begin = time.perf_counter()
        _install_handlers()
        _live.append(self)
        try:
            remove_leftovers()
            self._make_network()
            self._start_processes()
        except BaseException:
            self.close()
            raise
        self.up_seconds = time.perf_counter() - begin
        return self

    def _add_namespace(self, ns: str) -> None:
        if self._closing:
            raise HostsError("the cluster was closed while it was starting")
        self._namespaces.append(ns)  # before it exists: a close from a signal handler deletes it
        _cmd("ip", "netns", "add", ns)
        _ip(ns, "link", "set", "lo", "up")

    def _make_network(self) -> None:
        with _machine_lock():
            self.scratch = Path(tempfile.mkdtemp(prefix=f"{NS_PREFIX}-{self.pid}-{self.seq}-"))
            self._state_file = STATE_DIR / f"{self.pid}-{self.seq}.json"
            record = {
                "pid": self.pid,
                "seq": self.seq,
                "start": _start_time(self.pid),
                "scratch": str(self.scratch),
            }
            self._state_file.write_text(json.dumps(record))
            self.subnet = _free_subnet(self.pid, self.seq)
            base = self.subnet.network_address
            self._add_namespace(self.switch)
            _ip(self.switch, "link", "add", self.bridge, "type", "bridge")
            _ip(self.switch, "link", "set", self.bridge, "up")
            roles = [("scheduler", "s", SCHEDULER_OCTET)]
            roles += [(f"w{i}", f"w{i}", FIRST_WORKER_OCTET + i) for i in range(self.workers)]
            for name, role, octet in roles:
                ns = f"{NS_PREFIX}-{self.pid}-{self.seq}-{role}"
                self._add_namespace(ns)
                self.hosts[name] = Host(
                    name, ns, str(base + octet), f"{self.tag}{role}h", f"{self.tag}{role}s"
                )
                self._link(self.hosts[name])
            client = Host("client", None, str(base + CLIENT_OCTET), f"{self.tag}ch", f"{self.tag}cs")
            self.client_host = client
            self._link(client)  # the root namespace's end, its address and its /24 route
        for host in self.hosts.values():
            self._shape(host, self.rate)
        self._shape(client, self.client_rate)

    def _link(self, host: Host) -> None:
        """``host``'s veth pair: its end in its namespace with its address, the other a
        port of the switch."""
        where = ["netns", host.namespace] if host.namespace else []
        veth = ["type", "veth", "peer", "name", host.port, "netns", self.switch]
        _ip(None, "link", "add", host.interface, *where, *veth)
        _ip(self.switch, "link", "set", host.port, "master", self.bridge, "up")
        _ip(host.namespace, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", host.interface)
        _ip(host.namespace, "link", "set", host.interface, "up")

    def _shape(self, host: Host, bits_per_second: int | None) -> None:
        """tbf at ``bits_per_second`` on both ends of ``host``'s link (None: unshaped)."""
        for ns, dev in ((host.namespace, host.interface), (self.switch, host.port)):
            if bits_per_second is None:
                _tc(ns, "qdisc", "del", "dev", dev, "root", check=False)
            else:
                _tc(ns, "qdisc", "replace", "dev", dev, "root", "tbf", *tbf_parameters(bits_per_second))

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
        env.update(self.env)
        return env

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Starts ``argv`` on ``host`` ("scheduler", "w0", ...; "client": here) in a
        process group of its own, with this cluster's environment. On a host it dies
        with this process, however that ends (PR_SET_PDEATHSIG, when started from the
        main thread: the signal follows the thread that started it)."""
        ns = self._host(host).namespace
        argv = list(argv)
        if ns is not None:
            if shutil.which("setpriv") and threading.current_thread() is threading.main_thread():
                argv = ["setpriv", "--pdeathsig", "KILL", *argv]
            argv = ["ip", "netns", "exec", ns, *argv]  # ip execs: the pid is the command's
        kwargs.setdefault("env", self._environment())
        kwargs.setdefault("cwd", str(_REPO))
        return subprocess.Popen(argv, start_new_session=True, **kwargs)

    def _spawn(self, host: str, argv: Sequence[str]) -> None:
        log = self.scratch / f"{host}.log"
        with open(log, "wb") as out:
            proc = self.popen(host, argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._procs.append((host, proc, log))

    def log(self, host: str, tail: int = 4000) -> str:
        """The last ``tail`` characters of what ``host``'s Dask process printed."""
        for name, _, path in self._procs:
            if name == host and path.exists():
                return path.read_text(errors="replace")[-tail:]
        return ""

    def _failed(self, what: str) -> HostsError:
        logs = "\n".join(f"--- {name} ---\n{self.log(name, 1500)}" for name, _, _ in self._procs)
        return HostsError(f"{what}\n{logs}")

    def _start_processes(self) -> None:
        from distributed import Client

        deadline = time.monotonic() + self.startup_timeout
        scheduler = self.hosts["scheduler"]
        python = [sys.executable, "-m"]
        where = ["--host", scheduler.address, "--port", str(SCHEDULER_PORT)]
        self._spawn("scheduler", [*python, "distributed.cli.dask_scheduler", *where, "--no-dashboard"])
        for i in range(self.workers):
            host = self.hosts[f"w{i}"]
            argv = [*python, "distributed.cli.dask_worker", self.scheduler_address, "--host", host.address]
            argv += ["--name", host.name, "--nthreads", str(self.threads), "--no-dashboard"]
            argv += ["--local-directory", str(self.scratch / host.name)]
            argv += ["--nanny" if self.nanny else "--no-nanny"]
            if self.memory_limit is not None:
                argv += ["--memory-limit", str(self.memory_limit)]
            if self.preload:
                argv += ["--preload", "dasq.worker"]
            self._spawn(host.name, argv)
        while not self._listening(scheduler.address, SCHEDULER_PORT):
            if self._procs[0][1].poll() is not None:
                raise self._failed("the scheduler exited while starting")
            if time.monotonic() > deadline:
                raise self._failed(f"the scheduler did not listen within {self.startup_timeout} s")
            time.sleep(0.05)
        with Client(self.scheduler_address, timeout=max(1.0, deadline - time.monotonic())) as probe:
            while len(probe.scheduler_info(n_workers=-1)["workers"]) < self.workers:
                dead = [name for name, proc, _ in self._procs if proc.poll() is not None]
                if dead:
                    raise self._failed(f"{', '.join(dead)} exited while starting")
                if time.monotonic() > deadline:
                    raise self._failed(f"not every worker connected within {self.startup_timeout} s")
                time.sleep(0.05)
            by_name = {w["name"]: a for a, w in probe.scheduler_info(n_workers=-1)["workers"].items()}
        self.worker_addresses = [by_name[f"w{i}"] for i in range(self.workers)]

    @staticmethod
    def _listening(address: str, port: int) -> bool:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            return False

    # ------------------------------------------------------------------ using it
    @property
    def scheduler_address(self) -> str:
        return f"tcp://{self.hosts['scheduler'].address}:{SCHEDULER_PORT}"

    def client(self, **kwargs: Any) -> Any:
        """A ``distributed.Client`` of this cluster (closed with it at the latest)."""
        from distributed import Client

        client = Client(self.scheduler_address, **kwargs)
        self._clients.append(client)
        return client

    def _host(self, which: int | str) -> Host:
        if isinstance(which, int):
            return self.hosts[f"w{which}"]
        return self.client_host if which == "client" else self.hosts[which]

    def link_down(self, which: int | str) -> None:
        """Takes the link of worker ``which`` (or of "scheduler", "client") down at the
        switch, as a pulled cable would: the host keeps its address and its own
        connections; what it sends or is sent over the link is lost until :meth:`link_up`."""
        _ip(self.switch, "link", "set", self._host(which).port, "down")

    def link_up(self, which: int | str) -> None:
        _ip(self.switch, "link", "set", self._host(which).port, "up")

    def set_rate(self, rate: str | int | None, hosts: Sequence[int | str] | None = None) -> None:
        """Reshapes the links of ``hosts`` (default: the scheduler's and every worker's)."""
        bits = parse_rate(rate)
        for which in hosts if hosts is not None else list(self.hosts):
            self._shape(self._host(which), bits)
        if hosts is None:
            self.rate = bits

    def counters(self) -> dict[str, tuple[int, int]]:
        """(bytes sent, bytes received) so far over each host's link ("scheduler", "w0",
        ..., "client"): its interface's counters."""
        out = {}
        for name, host in {**self.hosts, "client": self.client_host}.items():
            if host.namespace is None:
                stats = Path(f"/sys/class/net/{host.interface}/statistics")
                out[name] = (int((stats / "tx_bytes").read_text()), int((stats / "rx_bytes").read_text()))
            else:
                link = json.loads(
                    _ip(host.namespace, "-j", "-s", "link", "show", "dev", host.interface).stdout
                )
                out[name] = (link[0]["stats64"]["tx"]["bytes"], link[0]["stats64"]["rx"]["bytes"])
        return out

    def bytes_sent(self) -> dict[str, int]:
        """Bytes each host has sent over its link so far."""
        return {name: sent for name, (sent, _) in self.counters().items()}

    def bytes_received(self) -> dict[str, int]:
        """Bytes each host has received over its link so far."""
        return {name: received for name, (_, received) in self.counters().items()}

    def pids(self, host: str) -> list[int]:
        """The processes running on ``host`` (inside its namespace)."""
        return namespace_pids(self._host(host).namespace)

    def kill(self, host: str) -> None:
        """Kills ``host``'s Dask process (its process group), as a crash would."""
        for name, proc, _ in self._procs:
            if name == host:
                _kill_group(proc, grace=0)

    # ------------------------------------------------------------------ tearing it down
    def close(self) -> None:
        """Kills every process and deletes every namespace and interface this cluster
        made. Every step can be repeated, so a close that a signal interrupts is
        finished by the handler's own close; a closed cluster does nothing."""
        if self._closed:
            return
        self._closing = True
        begin = time.perf_counter()
        for client in list(self._clients):
            with contextlib.suppress(Exception):
                client.close(timeout=2)
        for _, proc, _ in self._procs:  # SIGTERM to all first: they stop in parallel
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in self._procs:
            _kill_group(proc, grace=3)
        for ns in reversed(self._namespaces):  # the switch last: it holds the client's peer
            _delete_namespace(ns)
        if self.client_host is not None:  # it goes with its peer in the switch; just in case
            for _ in range(100):
                if not os.path.exists(f"/sys/class/net/{self.client_host.interface}"):
                    break
                _ip(None, "link", "del", self.client_host.interface, check=False)
                time.sleep(0.02)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        if self._state_file is not None:
            self._state_file.unlink(missing_ok=True)
        if self in _live:
            _live.remove(self)
        self._closed = True
        self.down_seconds = time.perf_counter() - begin

    def leftovers(self) -> list[str]:
        """What of this cluster still exists: namespaces, root interfaces, processes."""
        left = [ns for ns in _namespaces() if ns.startswith(f"{NS_PREFIX}-{self.pid}-{self.seq}-")]
        left += [link for link in _root_links() if link.startswith(self.tag)]
        left += [f"{name} pid {proc.pid}" for name, proc, _ in self._procs if proc.poll() is None]
        if self.scratch is not None and self.scratch.exists():
            left.append(str(self.scratch))
        return left

    def __enter__(self) -> EmulatedCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        rate = "unshaped" if self.rate is None else f"{self.rate / 1e9:g} Gbit/s"
        where = self.scheduler_address if self.hosts else "not started"
        return f"<EmulatedCluster {self.workers} workers, {rate} links, scheduler {where}>"


def emulated_cluster(
    workers: int = 2,
    rate: str | int | None = "1gbit",
    threads: int = 1,
    memory_limit: str | int | None = None,
    preload: bool = True,
    env: dict[str, str] | None = None,
    **options: Any,
) -> EmulatedCluster:
    """A context manager: a scheduler and ``workers`` workers (``threads`` each, the
    ``dasq.worker`` preload unless ``preload=False``), every worker connected, on
    entry; all of it gone on exit. ``env``: more environment for their processes.
    ``options``: ``nanny`` (default False), ``config`` (Dask settings for their
    processes, e.g. SHORT_TIMEOUTS; the client's are this process's), ``client_rate``
    (shape the client's link too), ``startup_timeout`` (s)."""
    return EmulatedCluster(workers, rate, threads, memory_limit, preload, env, **options)


# --------------------------------------------------------------------------- measurements
def dask_transfer_seconds(client: Any, src_worker: str, dst_worker: str, nbytes: int) -> float:
    """Seconds Dask takes to move ``nbytes`` from worker ``src_worker`` to ``dst_worker``
    (addresses): a numpy array of random bytes (nothing to compress) is made on the
    source first, then a task on the destination takes it; timed from that task's
    submission to its result, so a few ms of scheduling are included."""
    return dask_transfers_seconds(client, [(src_worker, dst_worker)], nbytes)[0]


def dask_transfers_seconds(client: Any, pairs: Sequence[tuple[str, str]], nbytes: int) -> list[float]:
    """:func:`dask_transfer_seconds` for several (source, destination) pairs started
    together (both directions at once: ``[(a, b), (b, a)]``): each pair's seconds."""
    from distributed import as_completed

    def make(n: int, salt: int) -> Any:
        import numpy as np

        return np.random.default_rng(salt).integers(0, 256, n, dtype=np.uint8)

    def size(array: Any) -> int:
        return int(array.nbytes)

    sources = [
        client.submit(make, nbytes, i, workers=[src], allow_other_workers=False, pure=False)
        for i, (src, _) in enumerate(pairs)
    ]
    for _ in as_completed(sources, loop=client.loop):  # made there (distributed.wait needs a default client)
        pass
    begin = time.perf_counter()
    sinks = [
        client.submit(size, a, workers=[dst], allow_other_workers=False, pure=False)
        for a, (_, dst) in zip(sources, pairs)
    ]
    seconds = [0.0] * len(pairs)
    index = {sink.key: i for i, sink in enumerate(sinks)}
    for sink in as_completed(sinks, loop=client.loop):
        seconds[index[sink.key]] = time.perf_counter() - begin
        if sink.result() != nbytes:
            raise HostsError(f"{sink.key} got {sink.result()} bytes of {nbytes}")
    client.cancel(sources + sinks)
    return seconds


def tcp_transfer_seconds(
    cluster: EmulatedCluster, pairs: Sequence[tuple[str, str]], nbytes: int, timeout: float = 120
) -> list[float]:
    """Seconds one plain TCP connection takes to carry ``nbytes`` from host ``src`` to
    host ``dst`` ("w0", "scheduler", "client", ...) for each (src, dst) pair, all
    pairs at once: from the sender's connect to the receiver's acknowledgement of
    the last byte. A process of this script on each end (started in its namespace)."""
    script = str(Path(__file__).resolve())
    receivers: list[subprocess.Popen] = []
    senders: list[subprocess.Popen] = []
    try:
        for _, dst in pairs:
            argv = [sys.executable, script, "--tcp-receive", cluster._host(dst).address]
            receivers.append(cluster.popen(dst, argv, stdout=subprocess.PIPE, text=True))
        ports = [int(r.stdout.readline()) for r in receivers]
        for (src, dst), port in zip(pairs, ports):
            target = f"{cluster._host(dst).address}:{port}"
            argv = [sys.executable, script, "--tcp-send", target, "--nbytes", str(nbytes)]
            senders.append(cluster.popen(src, argv, stdout=subprocess.PIPE, text=True))
        seconds = []
        for sender in senders:
            out, _ = sender.communicate(timeout=timeout)
            if sender.returncode != 0:
                raise HostsError(f"a TCP sender failed ({sender.returncode})")
            seconds.append(float(out.strip()))
        return seconds
    finally:
        for proc in receivers + senders:
            _kill_group(proc, grace=1)


def _tcp_receive(address: str) -> None:
    with socket.socket() as listener:
        listener.bind((address, 0))
        listener.listen(1)
        print(listener.getsockname()[1], flush=True)
        conn, _ = listener.accept()
        with conn:
            header = b""
            while len(header) < 8:
                header += conn.recv(8 - len(header))
            left = int.from_bytes(header, "big")
            buffer = bytearray(1 << 22)
            while left > 0:
                got = conn.recv_into(buffer, min(left, len(buffer)))
                if not got:
                    raise SystemExit("the sender closed early")
                left -= got
            conn.sendall(b"k")


def _tcp_send(target: str, nbytes: int) -> None:
    host, port = target.rsplit(":", 1)
    payload = memoryview(os.urandom(min(nbytes, 1 << 22)))
    with socket.create_connection((host, int(port))) as conn:
        begin = time.perf_counter()
        conn.sendall(nbytes.to_bytes(8, "big"))
        left = nbytes
        while left > 0:
            piece = payload[: min(left, len(payload))]
            conn.sendall(piece)
            left -= len(piece)
        if conn.recv(1) != b"k":
            raise SystemExit("no acknowledgement")
        print(time.perf_counter() - begin, flush=True)


def probe(cluster: EmulatedCluster, client: Any, nbytes: int = 64 << 20) -> dict[str, float]:
    """Gbit/s of payload per direction between workers 0 and 1: raw TCP and Dask, one
    way (w0 -> w1) and both ways at once (by the slower direction)."""
    a, b = cluster.worker_addresses[:2]
    gbit = nbytes * 8 / 1e9
    raw_one = tcp_transfer_seconds(cluster, [("w0", "w1")], nbytes)[0]
    raw_both = tcp_transfer_seconds(cluster, [("w0", "w1"), ("w1", "w0")], nbytes)
    dask_transfer_seconds(client, a, b, 1 << 20)  # the workers' connection, made beforehand
    dask_one = dask_transfer_seconds(client, a, b, nbytes)
    dask_both = dask_transfers_seconds(client, [(a, b), (b, a)], nbytes)
    return {
        "raw_one_way_gbit_s": gbit / raw_one,
        "raw_both_ways_gbit_s": gbit / max(raw_both),
        "dask_one_way_gbit_s": gbit / dask_one,
        "dask_both_ways_gbit_s": gbit / max(dask_both),
    }


# --------------------------------------------------------------------------- the script
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--rate", nargs="+", default=["1gbit"], help="one or more, probed in turn: 1gbit 5gbit none"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--no-preload", action="store_true", help="start workers without the dasq.worker preload"
    )
    parser.add_argument("--nanny", action="store_true", help="start each worker under a nanny")
    parser.add_argument("--nbytes", type=int, default=64 << 20, help="bytes per probe transfer (64 MiB)")
    parser.add_argument("--repeat", type=int, default=1, help="probes per rate")
    parser.add_argument("--probe", action="store_true", help="measure raw TCP and Dask rates, then tear down")
    parser.add_argument("--shell", action="store_true", help="keep the cluster up until Ctrl-C")
    parser.add_argument("--json", help="write the numbers to this file")
    parser.add_argument("--tcp-receive", help=argparse.SUPPRESS)
    parser.add_argument("--tcp-send", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tcp_receive:
        _tcp_receive(args.tcp_receive)
        return 0
    if args.tcp_send:
        _tcp_send(args.tcp_send, args.nbytes)
        return 0
    reason = can_emulate()
    if reason is not None:
        print(f"cannot emulate hosts here: {reason}", file=sys.stderr)
        return 1
    if args.probe and args.workers < 2:
        parser.error("--probe needs 2 workers at least")
    cluster = emulated_cluster(
        args.workers, args.rate[0], args.threads, preload=not args.no_preload, nanny=args.nanny
    )
    probes = []
    with cluster:
        print(f"up in {cluster.up_seconds:.2f} s: {cluster!r}", flush=True)
        for host in [*cluster.hosts.values(), cluster.client_host]:
            print(
                f"  {host.name:9} {host.address:15} {host.namespace or '(root)':24} {host.interface}",
                flush=True,
            )
        if args.probe:
            with cluster.client() as client:
                for rate in args.rate:
                    cluster.set_rate(rate)
                    bits = parse_rate(rate)
                    shown = rate if bits else "unshaped"
                    for _ in range(args.repeat):
                        numbers = {"rate": shown, "tbf": " ".join(tbf_parameters(bits)) if bits else None}
                        numbers |= probe(cluster, client, args.nbytes)
                        probes.append(numbers)
                        rates = [numbers[f"{k}_gbit_s"] for k in ("raw_one_way", "raw_both_ways")]
                        rates += [numbers[f"{k}_gbit_s"] for k in ("dask_one_way", "dask_both_ways")]
                        print(
                            f"{shown:>9}, {args.nbytes >> 20} MiB, Gbit/s per direction: raw TCP one way "
                            "{:.3f}, both ways {:.3f}; Dask one way {:.3f}, both ways {:.3f}".format(*rates),
                            flush=True,
                        )
        if args.shell:
            with contextlib.suppress(KeyboardInterrupt):
                print(f"scheduler: {cluster.scheduler_address} (Ctrl-C tears it down)", flush=True)
                while True:
                    time.sleep(3600)
    print(f"down in {cluster.down_seconds:.2f} s", flush=True)
    if args.json:
        numbers = {"up_seconds": cluster.up_seconds, "down_seconds": cluster.down_seconds, "probes": probes}
        Path(args.json).write_text(json.dumps(numbers, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
