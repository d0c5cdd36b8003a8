"""The one validation layer: every entry point (builder, append, QASM, Qiskit,
records read from a store, simulate and the read-outs) checks its input here.

Wrong types raise ``TypeError``; wrong values raise ``dasq.ValidationError`` (a
``ValueError``). Messages say what was wrong and what is allowed.

Unitarity tolerance: a matrix M counts as unitary when every entry of
M^dagger M - I has modulus <= ``UNITARY_ATOL`` (1e-8), the same for diagonal
entries (|d| - 1). Matrices given in single precision are checked at 1e-5.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable, Sequence

import numpy as np

from dasq import _config
from dasq.errors import ValidationError

UNITARY_ATOL = 1e-8
UNITARY_ATOL_SINGLE = 1e-5
PAULI_CHARS = frozenset("IXYZ")
DTYPES = ("complex128", "complex64")
MAX_QUBITS = 62  # basis indices are int64 throughout


def is_int(value: object) -> bool:
    if type(value) is int:  # the common case, without the ABC check
        return True
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(value: object, what: str, low: int | None = None, high: int | None = None) -> int:
    """An int within [low, high] (either bound may be None)."""
    if not is_int(value):
        raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")
    v = int(value)  # type: ignore[call-overload]
    if (low is not None and v < low) or (high is not None and v > high):
        if high is None:
            allowed = f">= {low}"
        elif low is None:
            allowed = f"<= {high}"
        else:
            allowed = f"between {low} and {high}"
        raise ValidationError(f"{what} must be {allowed}, got {v}")
    return v


def check_num_qubits(n: object) -> int:
    return check_int(n, "number of qubits", 1, MAX_QUBITS)


def check_qubit(q: object, num_qubits: int, what: str = "qubit") -> int:
    if type(q) is int and 0 <= q < num_qubits:
        return q
    if not is_int(q):
        raise TypeError(f"{what} must be an int, got {q!r} ({type(q).__name__})")
    if not 0 <= q < num_qubits:  # type: ignore[operator]
        raise ValidationError(f"{what} {q} is out of range: the circuit has qubits 0..{num_qubits - 1}")
    return int(q)  # type: ignore[call-overload]


def check_qubits(qs: object, num_qubits: int, what: str) -> tuple[int, ...]:
    """Distinct qubits from an int or a sequence of ints."""
    if type(qs) is int:
        return (check_qubit(qs, num_qubits, what[:-1] if what.endswith("s") else what),)
    if is_int(qs):
        qs = (qs,)
    elif type(qs) is tuple and not qs:
        return ()
    if not isinstance(qs, Iterable) or isinstance(qs, (str, bytes)):
        raise TypeError(f"{what} must be an int or a sequence of ints, got {qs!r}")
    single = what[:-1] if what.endswith("s") else what
    out = tuple(check_qubit(q, num_qubits, single) for q in qs)
    if len(set(out)) != len(out):
        raise ValidationError(f"repeated qubit in {what}: {list(out)}")
    return out


def check_operands(
    targets: object, controls: object, control_states: object, num_qubits: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Targets, controls and control states, validated together."""
    t = check_qubits(targets, num_qubits, "targets")
    if not t:
        raise ValidationError("an operation needs at least one target qubit")
    c = check_qubits(controls if controls is not None else (), num_qubits, "controls")
    both = set(t) & set(c)
    if both:
        raise ValidationError(f"qubit(s) {sorted(both)} used as both control and target")
    return t, c, check_control_states(control_states, len(c))


def check_control_states(states: object, num_controls: int) -> tuple[int, ...]:
    """Control states from None (all 1), a 0/1 sequence, an int (bit j -> controls[j]) or a
    Qiskit-style bit string (rightmost character -> controls[0])."""
    if states is None:
        return (1,) * num_controls
    if isinstance(states, str):
        if len(states) != num_controls or set(states) - {"0", "1"}:
            raise ValidationError(
                f"control_states string must have {num_controls} characters of 0/1, got {states!r}"
            )
        return tuple(int(ch) for ch in reversed(states))
    if is_int(states):
        if not 0 <= states < (1 << num_controls):  # type: ignore[operator]
            raise ValidationError(f"control_states integer {states} does not fit {num_controls} control(s)")
        return tuple((int(states) >> j) & 1 for j in range(num_controls))  # type: ignore[call-overload]
    if not isinstance(states, Sequence):
        raise TypeError(f"control_states must be a sequence of 0/1, an int or a str, got {states!r}")
    out = tuple(states)
    if len(out) != num_controls:
        raise ValidationError(f"control_states has {len(out)} entries for {num_controls} control(s)")
    for s in out:
        if not is_int(s) or s not in (0, 1):
            raise ValidationError(f"control states must be 0 or 1, got {list(out)}")
    return tuple(int(s) for s in out)


def check_angle(theta: object, what: str = "angle") -> float:
    if type(theta) is float and math.isfinite(theta):
        return theta
    if isinstance(theta, bool) or not isinstance(theta, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {theta!r}")
    value = float(theta)
    if not np.isfinite(value):
        raise ValidationError(f"{what} must be finite, got {value}")
    return value


def check_probability(p: object, what: str = "probability") -> float:
    """A real number in [0, 1]."""
    value = check_angle(p, what)
    if not 0.0 <= value <= 1.0:
        raise ValidationError(f"{what} must be in [0, 1], got {value:g}")
    return value


def as_complex_array(data: object, what: str) -> tuple[np.ndarray, float]:
    """``data`` as a finite complex128 array, and the unitarity tolerance its precision allows."""
    if type(data) is np.ndarray and data.dtype == np.complex128:  # builders' own matrices
        arr = data.copy()
        if not np.isfinite(arr).all():
            raise ValidationError(f"{what} contains NaN or infinity")
        return arr, UNITARY_ATOL
    try:
        arr = np.asarray(data)
    except Exception as exc:  # ragged nested lists and the like
        raise TypeError(f"{what} is not an array: {exc}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{what} must hold numbers, got dtype {arr.dtype}")
    single = arr.dtype in (np.float32, np.complex64, np.float16)
    arr = arr.astype(np.complex128)
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{what} contains NaN or infinity")
    return arr, UNITARY_ATOL_SINGLE if single else UNITARY_ATOL


def check_matrix(matrix: object, num_targets: int, *, require_unitary: bool = True) -> np.ndarray:
    """A read-only 2^k x 2^k complex matrix for k targets, unitary unless told otherwise."""
    m, atol = as_complex_array(matrix, "matrix")
    dim = 1 << num_targets
    if m.shape != (dim, dim):
        raise ValidationError(
            f"matrix for {num_targets} target(s) must have shape ({dim}, {dim}), got {m.shape}"
        )
    if require_unitary:
        err = np.abs(m.conj().T @ m - _identity(dim)).max()
        if err > atol:
            raise ValidationError(
                f"matrix is not unitary: max |M^dagger M - I| = {err:.3g} > tolerance {atol:g}"
            )
    m.setflags(write=False)
    return m


@functools.cache
def _identity(dim: int) -> np.ndarray:
    eye = np.eye(dim)
    eye.setflags(write=False)
    return eye


def check_diagonal(values: object, num_targets: int, *, require_unitary: bool = True) -> np.ndarray:
    """A read-only vector of the 2^k diagonal entries for k targets."""
    d, atol = as_complex_array(values, "diagonal")
    dim = 1 << num_targets
    if d.shape != (dim,):
        raise ValidationError(
            f"diagonal for {num_targets} target(s) must have {dim} entries, got shape {d.shape}"
        )
    if require_unitary:
        err = np.abs(np.abs(d) - 1.0).max()
        if err > atol:
            raise ValidationError(f"diagonal is not unitary: max ||d| - 1| = {err:.3g} > tolerance {atol:g}")
    d.setflags(write=False)
    return d


def check_pauli_label(label: object, num_targets: int | None = None) -> str:
    if not isinstance(label, str):
        raise TypeError(f"Pauli label must be a str such as 'XZ', got {label!r}")
    lab = label.upper()
    if not lab or set(lab) - PAULI_CHARS:
        raise ValidationError(f"Pauli label {label!r} must be a non-empty string of I, X, Y, Z")
    if num_targets is not None and len(lab) != num_targets:
        raise ValidationError(f"Pauli label {label!r} has {len(lab)} characters for {num_targets} target(s)")
    return lab


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"operation name must be a str, got {name!r}")
    return name


def check_params(params: object) -> tuple[float, ...]:
    if type(params) is tuple and not params:
        return ()
    if not isinstance(params, Iterable) or isinstance(params, (str, bytes)):
        raise TypeError(f"params must be a sequence of real numbers, got {params!r}")
    return tuple(check_angle(p, "parameter") for p in params)


# --------------------------------------------------------------------- run options
def check_dtype(dtype: object) -> str:
    try:
        name = np.dtype(dtype).name  # type: ignore[call-overload]
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValidationError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return name


def check_seed(seed: object, what: str = "seed") -> int | None:
    """A run's seed: None (fresh entropy) or an int >= 0, what numpy's SeedSequence
    takes (said here, with the argument's name, rather than by numpy)."""
    if seed is None:
        return None
    if not is_int(seed):
        raise TypeError(f"{what} must be None or an int >= 0, got {seed!r}")
    if seed < 0:  # type: ignore[operator]
        raise ValidationError(f"{what} must be None or an int >= 0, got {seed}")
    return int(seed)  # type: ignore[call-overload]


def random_generator(seed: object, what: str = "seed") -> np.random.Generator:
    """A numpy Generator from what a user passes as a seed (the Qiskit, Cirq and
    PennyLane adapters draw each run's seed from it): None (fresh entropy), an int,
    a Generator (used as it is) or a legacy RandomState (a Generator seeded from it)."""
    if seed is None or is_int(seed):
        return np.random.default_rng(check_seed(seed, what))
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31))
    raise TypeError(f"{what} must be None, an int, a numpy Generator or a numpy RandomState, got {seed!r}")


def check_chunk_qubits(chunk_qubits: object, num_qubits: int) -> int:
    if not is_int(chunk_qubits):
        raise TypeError(f"chunk_qubits must be an int, got {chunk_qubits!r}")
    return check_int(chunk_qubits, "chunk_qubits", 0, num_qubits)


def check_fusion_size(value: object) -> int:
    if not is_int(value):
        raise TypeError(f"fusion_size must be an int, got {value!r}")
    return check_int(value, "fusion_size", 1, 10)


def check_index(index: object, num_qubits: int, what: str = "index") -> int:
    """A basis-state index of a ``num_qubits``-qubit state."""
    if not is_int(index):
        raise TypeError(f"{what} must be an int, got {index!r}")
    if not 0 <= index < (1 << num_qubits):  # type: ignore[operator]
        raise ValidationError(f"{what} {index} is out of range 0..{(1 << num_qubits) - 1}")
    return int(index)  # type: ignore[call-overload]


def check_basis(index: object, num_qubits: int) -> int:
    return check_index(index, num_qubits, "initial basis state")


MAX_SHOTS = 2**63 - 1  # counts are int64; drawing them takes the same time at any number of shots
MAX_MEMORY_SHOTS = 10_000_000  # per-shot outcomes (memory=True) are kept one key per shot


def check_shots(shots: object, memory: bool = False) -> int:
    """Shots as an int in 0..MAX_SHOTS (at most MAX_MEMORY_SHOTS when every shot's
    outcome is kept), refused before any work."""
    if not is_int(shots) or shots < 0:  # type: ignore[operator]
        raise ValidationError(f"shots must be a non-negative int, got {shots!r}")
    if shots > MAX_SHOTS:  # type: ignore[operator]
        raise ValidationError(f"shots must be at most 2^63 - 1 = {MAX_SHOTS}, got {shots}")
    if memory:
        instead = "counts (memory=False) take any number of shots"
        check_per_shot(int(shots), "memory=True keeps every shot's outcome", 8, instead)  # type: ignore[call-overload]
    return int(shots)  # type: ignore[call-overload]


def check_per_shot(shots: int, what: str, bytes_each: int, instead: str, unit: str = "shots") -> None:
    """Refuse, before any work, more than MAX_MEMORY_SHOTS ``unit`` where ``what`` keeps
    something for each of them (``bytes_each`` bytes at least): the one limit on
    per-shot memory, whichever interface asks for it."""
    if shots > MAX_MEMORY_SHOTS:
        need = shots * bytes_each
        raise ValidationError(
            f"{what}: at most {MAX_MEMORY_SHOTS:,} {unit}, got {shots:,} (at least {_bytes(need)}, "
            f"{need:,} bytes); {instead}"
        )


def check_bytes(need: int, limit: int, what: str, limit_name: str, instead: str) -> None:
    """Refuse, before allocating, ``what`` when the ``need`` bytes it takes are more than
    ``limit`` (``limit_name``: "this machine's memory", a setting); the message names both."""
    if need > limit:
        raise ValidationError(
            f"{what} needs about {_bytes(need)} ({need:,} bytes), more than {limit_name} "
            f"({_bytes(limit)}); {instead}"
        )


def check_choice(value: object, choices: Sequence[str], what: str) -> str:
    if value not in choices:
        raise ValidationError(f"{what} must be one of {tuple(choices)}, got {value!r}")
    return str(value)


def check_client(client: object) -> object:
    """None (Dask's default client, else threads) or a ``distributed.Client``: a
    scheduler's address, or anything else, gets one TypeError naming what to pass;
    a closed client, or one cut off from its scheduler, one ValidationError saying so."""
    if client is None:
        return None
    from distributed import Client  # imported where a client is given: it takes a quarter second

    if not isinstance(client, Client):
        hint = ""
        if isinstance(client, str):
            hint = f"; for a scheduler's address pass distributed.Client({client!r})"
        raise TypeError(f"client must be a distributed.Client or None, got {type(client).__name__}{hint}")
    status = client.status  # "connecting": it lost its scheduler; "newly-created": never started
    if status != "running":  # else distributed fails on the first call: "'NoneType' ... 'ncores'"
        problem = "is closed" if status in ("closing", "closed") else "is not connected to its scheduler"
        raise ValidationError(
            f"client {problem} (status {status!r}): pass an open distributed.Client, e.g. "
            "Client(cluster) or Client('tcp://host:8786'), or client=None to run on this machine's threads"
        )
    return client


def check_memory_limit(memory_limit: object) -> int:
    """Bytes from an int or a string such as "4GiB" / "512 MB"."""
    from dask.utils import parse_bytes

    wanted = f"memory_limit must be a number of bytes or a size such as '4GiB', got {memory_limit!r}"
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, (numbers.Integral, str)):
        raise TypeError(wanted)
    try:
        value = parse_bytes(memory_limit) if isinstance(memory_limit, str) else int(memory_limit)
    except (ValueError, TypeError):
        raise ValidationError(wanted) from None
    if value <= 0:
        raise ValidationError(f"memory_limit must be positive, got {memory_limit!r}")
    return value


def check_initial_amplitudes(finite: bool, norm: float) -> None:
    """Initial amplitudes (numpy or dask, reduced by the caller) must be a unit vector."""
    if not finite:
        raise ValidationError("initial amplitudes contain NaN or infinity")
    if abs(norm - 1) > NORM_ATOL:
        raise ValidationError(f"initial amplitudes must be normalised, their norm is {norm:.6g}")


NORM_ATOL = 1e-6  # how far from 1 the norm of initial amplitudes may be
MAX_BLOCKS = 1 << 16  # wider graphs cost more to build and schedule than their work


def check_in_memory_run(
    num_qubits: int, itemsize: int, chunk_qubits: int, available: int, where: str, density: bool = False
) -> None:
    """Refuse, before any graph is built, an in-memory run that cannot fit or whose
    graph would be absurdly wide; the message carries the numbers (``density``: the
    ``num_qubits`` are a density matrix's vector, of twice its qubits)."""
    need = _config.IN_MEMORY_COPIES * (itemsize << num_qubits)
    if need > available:
        what = f"{num_qubits // 2}-qubit density matrix" if density else f"{num_qubits}-qubit state"
        raise ValidationError(
            f"an in-memory run of a {what} needs about {_bytes(need)} ({need} bytes: the state "
            f"and a stage's output), but {where} has {_bytes(available)}; pass store='state.zarr' (and "
            "memory_limit=) to stream the state from disk, or use a cluster with more memory"
        )
    check_block_count(num_qubits, chunk_qubits)


def check_block_count(num_qubits: int, chunk_qubits: int) -> None:
    blocks = 1 << (num_qubits - chunk_qubits)
    if blocks > MAX_BLOCKS:
        raise ValidationError(
            f"{blocks} blocks of 2^{chunk_qubits} amplitudes is more than the {MAX_BLOCKS} a graph can "
            f"sensibly hold; use chunk_qubits >= {num_qubits - MAX_BLOCKS.bit_length() + 1}"
        )


def _bytes(n: int) -> str:
    for unit, size in (
        ("EiB", 1 << 60),
        ("PiB", 1 << 50),
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
    ):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def check_readout_qubits(qubits: object, num_qubits: int) -> tuple[int, ...]:
    """Qubits for a read-out: None (all), an int, or distinct ints."""
    if qubits is None:
        return tuple(range(num_qubits))
    return check_qubits(qubits, num_qubits, "qubits")


def not_a_circuit(value: object) -> str:
    """The refusal of ``value`` where a dasq.Circuit is expected, naming the converter
    for a Qiskit or Cirq circuit, or for OpenQASM text."""
    kind = type(value)
    module = "str" if isinstance(value, str) else kind.__module__.split(".")[0]
    hint = {
        "qiskit": ": convert it with dasq.Circuit.from_qiskit(circuit)",
        "cirq": ": convert it with dasq.Circuit.from_cirq(circuit)",
        "str": ": OpenQASM text or a file is read by dasq.Circuit.from_qasm(text_or_path)",
    }.get(module, "")
    return f"expected a dasq.Circuit, got {kind.__name__}{hint}"
