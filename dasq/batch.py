"""Many circuits: expectation values, gradients, states and counts over arrays of
parameter sets, one circuit planned once and bound per set.

Why: most of what runs on a simulator is one circuit at many parameter values
(sweeps, Estimator batches, optimisation loops). Here the circuit is planned once
and a batch of parameter sets runs as rows of one block (``dasq.engine.rows``; the
adjoint gradient walks the same program back, ``dasq.engine.adjoint``): no plan and
no Dask graph per set. A batch is a Dask collection: its parameter array is split
along the batch axis, each piece runs many circuits in one task, on this machine's
threads or, given a ``distributed.Client``, on the workers (the result is then a
Dask array on the cluster, and the dashboard shows the pieces). Circuits the row
engine does not hold (mid-circuit measurements, channels, a wide parametrised gate)
and runs given ``dasq.simulate``'s settings run set by set through ``dasq.simulate``.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np

from dasq import _config
from dasq.api import simulate
from dasq.circuit import validation as v
from dasq.circuit.circuit import Circuit
from dasq.circuit.parameters import ParameterBatch, parameter_batch
from dasq.engine import stored_gradient
from dasq.engine.adjoint import adjoint_gradient
from dasq.engine.rows import (
    PauliTerms,
    RowError,
    RowProgram,
    SlottedCircuit,
    expectations,
    pass_buffer,
    row_program,
    slotted,
)
from dasq.errors import ValidationError
from dasq.state.observables import PauliSum
from dasq.storage.store import state_bytes

PASS_BYTES = 1 << 21  # rows run together in a task: their states take this (Python paid once a pass)
TASKS_PER_THREAD = 1  # pieces of a batch per thread (or worker thread): fewer round trips measured best

__all__ = ["expectation", "gradient"]


# ------------------------------------------------------------------ observables
def observable_list(observables: Any, num_qubits: int) -> tuple[list[PauliSum], bool]:
    """(observables, one): a single observable, or a list of them (a list of
    (label, coefficient) pairs is one observable)."""
    single = isinstance(observables, str | PauliSum) or type(observables).__name__ == "SparsePauliOp"
    if not single and isinstance(observables, Sequence) and observables:
        single = all(isinstance(term, tuple) for term in observables)
    items = [observables] if single else list(observables)
    if not items:
        raise ValidationError("no observables were given")
    parsed = [PauliSum.parse(item) for item in items]
    for obs in parsed:
        if obs.num_qubits != num_qubits:
            raise ValidationError(
                f"an observable acts on {obs.num_qubits} qubits but the circuit has {num_qubits}"
            )
    return parsed, single


# ------------------------------------------------------------------ running pieces
def _rows_per_pass(num_qubits: int, dtype: Any) -> int:
    return max(1, PASS_BYTES // ((1 << num_qubits) * np.dtype(dtype).itemsize))


def _expectation_piece(x: np.ndarray, program: RowProgram, terms: list, dtype: str) -> np.ndarray:
    """(rows, observables) for one piece of a batch, in cache-sized passes."""
    out = np.empty((x.shape[0], len(terms)), dtype=np.complex128)
    step = _rows_per_pass(program.num_qubits, dtype)
    buffer = pass_buffer(min(step, x.shape[0]), program.num_qubits, dtype)
    for start in range(0, x.shape[0], step):
        states = program.run(x[start : start + step], dtype, out=buffer)
        for k, t in enumerate(terms):
            out[start : start + step, k] = expectations(states, t)
    return out


def _gradient_piece(
    x: np.ndarray, program: RowProgram, terms: Any, dtype: str, initial: np.ndarray | None
) -> np.ndarray:
    """(rows, 1 + P): each row's value, then its gradient."""
    out = np.empty((x.shape[0], 1 + program.num_parameters))
    step = _rows_per_pass(program.num_qubits, dtype)
    rows = min(step, x.shape[0])
    buffers = (pass_buffer(rows, program.num_qubits, dtype), pass_buffer(rows, program.num_qubits, dtype))
    for start in range(0, x.shape[0], step):
        values, grads = adjoint_gradient(
            program, x[start : start + step], terms, dtype=dtype, initial=initial, buffers=buffers
        )
        out[start : start + step, 0] = values
        out[start : start + step, 1:] = grads
    return out


def _pieces(rows: int, threads: int) -> int:
    """Rows per task: a few tasks per thread, never fewer rows than a pass holds."""
    return max(1, math.ceil(rows / max(1, threads * TASKS_PER_THREAD)))


HELD_PROGRAMS = 8  # programs a worker keeps between batches (their compiled kernels with them)
_program_keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # here: program -> its key
_held_programs: OrderedDict[str, RowProgram] = OrderedDict()  # on a worker: key -> its program
_held_lock = threading.Lock()


def _program_key(program: RowProgram) -> str:
    """A key naming this program on workers for as long as it lives here."""
    key = _program_keys.get(program)
    if key is None:
        key = _program_keys[program] = uuid.uuid4().hex
    return key


def _held_program(key: str, circuit: Circuit) -> RowProgram:
    """The program this worker made first under ``key``: a program travels as its
    circuit (its compiled kernels do not pickle) and is planned once per worker."""
    with _held_lock:
        found = _held_programs.get(key)
        if found is not None:
            _held_programs.move_to_end(key)
            return found
    found = row_program(circuit)
    with _held_lock:
        _held_programs[key] = found
        while len(_held_programs) > HELD_PROGRAMS:
            _held_programs.popitem(last=False)
    return found


def _piece_on_worker(x: np.ndarray, function: Any, key: str, circuit: Circuit, **kwargs: Any) -> Any:
    return function(x, program=_held_program(key, circuit), **kwargs)


def _over_batch(
    function: Any,
    circuit: Circuit,
    batch: ParameterBatch,
    columns: int,
    client: Any,
    dtype_out: Any,
    **kwargs: Any,
) -> Any:
    """``function(x_piece, **kwargs)`` -> (rows, columns) over the batch's rows as a
    Dask array: computed on threads here (numpy back), or on ``client``'s workers
    (a Dask array whose pieces are held there)."""
    if client is not None:
        threads = sum(client.nthreads().values())
    else:  # Dask's threads: dask config num_workers, else this machine's cores
        threads = dask.config.get("num_workers", None) or _config.cores(None)
    rows = _pieces(batch.size, threads)
    piece = functools.partial(function, **kwargs)
    if client is not None:  # the workers' programs, kept between calls
        program = kwargs.pop("program")
        key = _program_key(program)
        piece = functools.partial(_piece_on_worker, function=function, key=key, circuit=circuit, **kwargs)
    if client is None and batch.size <= rows:  # one piece: no graph, no scheduler
        return piece(batch.values)
    x = da.from_array(batch.values, chunks=(rows, batch.values.shape[1]), name=False)
    result = x.map_blocks(
        piece,
        chunks=(x.chunks[0], (columns,)),
        meta=np.empty((0, columns), dtype=dtype_out),  # no trial call to infer it
        name=f"dasq-batch-{uuid.uuid4().hex}",
    )
    if client is not None:
        return client.persist(result)
    with dask.config.set(scheduler="threads"):
        return result.compute()


def _shaped(values: Any, shape: tuple[int, ...], tail: tuple[int, ...]) -> Any:
    return values.reshape((*shape, *tail))


def _program(circuit: Circuit) -> RowProgram | None:
    """The circuit planned for rows, or None where the row engine does not hold it
    (a mid-circuit measurement, a channel, a wide parametrised gate)."""
    try:
        return row_program(circuit)
    except RowError:
        return None


# ------------------------------------------------------------------ public
def expectation(
    circuit: Circuit,
    observables: Any,
    *,
    parameters: Any = None,
    client: Any = None,
    dtype: str = "complex128",
    **options: Any,
) -> Any:
    """Expectation values of ``observables`` on the states of ``circuit`` at every
    parameter set of ``parameters``.

    Args:
        circuit: A ``dasq.Circuit``, maybe with ``dasq.Parameter`` angles (its
            terminal measurements are ignored).
        observables: One observable (a ``PauliSum``, a Pauli label, a list of
            (label, coefficient) pairs, a Qiskit ``SparsePauliOp``) or a list of them.
        parameters: None for a circuit without parameters; one set; an array
            (..., P) whose last axis follows ``circuit.parameters``; or a mapping of
            names (or Parameters) to arrays, broadcast together.
        client: A ``distributed.Client``: the batch is split along its first axis
            and each piece runs on a worker; the result is then a Dask array held
            on the cluster (``.compute()`` brings it back).
        dtype: "complex128" or "complex64".
        **options: ``dasq.simulate``'s settings, for circuits that run set by set
            (mid-circuit measurements, ``density=True``, wide states).

    Returns:
        A numpy array of the batch's shape (a float for one set and one
        observable), with a last axis of observables when a list was given;
        complex where an observable is not Hermitian. A Dask array with a client.

    Raises:
        ValidationError: Parameters of the wrong shape, observables of the wrong
            width, or settings out of range.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(v.not_a_circuit(circuit))
    dtype = v.check_dtype(dtype)
    client = v.check_client(client)
    batch = parameter_batch(circuit.parameters, parameters)
    parsed, single = observable_list(observables, circuit.num_qubits)
    hermitian = all(obs.is_hermitian for obs in parsed)
    program = None if options else _program(circuit)
    if program is None:
        values = _set_by_set(circuit, parsed, batch, client, dtype, options)
    else:
        terms = [PauliTerms.of(obs) for obs in parsed]
        values = _over_batch(
            _expectation_piece,
            circuit,
            batch,
            len(terms),
            client,
            np.complex128,
            program=program,
            terms=terms,
            dtype=dtype,
        )
    if hermitian:
        values = values.real
    tail = () if single else (len(parsed),)
    shaped = _shaped(values, batch.shape, tail)
    if client is None and not batch.shape and single:
        return shaped.item()
    return shaped


def _set_by_set(
    circuit: Circuit, parsed: list, batch: ParameterBatch, client: Any, dtype: str, options: dict
) -> Any:
    """The general path: ``dasq.simulate`` per parameter set (its state may be big
    and spread over ``client``'s workers)."""

    out = np.empty((batch.size, len(parsed)), dtype=np.complex128)
    for row, x in enumerate(batch.values):
        state = simulate(
            circuit, parameters=x if batch.names else None, dtype=dtype, client=client, **options
        )
        for k, obs in enumerate(parsed):
            out[row, k] = state.expectation(obs)
    return da.from_array(out) if client is not None else out


def gradient(
    circuit: Circuit,
    observable: Any,
    *,
    parameters: Any,
    dtype: str = "complex128",
    client: Any = None,
    initial: Any = None,
    memory_limit: int | str | None = None,
    store: str | os.PathLike[str] | None = None,
    return_value: bool = False,
) -> Any:
    """The gradient of <observable> in every parameter of ``circuit``, by the adjoint
    method (Jones and Gacon, 2020): one forward pass, then one backward sweep that
    undoes each gate on two states, about three passes over the state in all. When
    three states do not fit ``memory_limit`` (or ``store`` is given), psi and lambda
    live in a zarr store, out of core, and the sweep runs in passes over their blocks.

    Args:
        circuit: A unitary ``dasq.Circuit`` with ``dasq.Parameter`` angles.
        observable: One observable (as for ``expectation``), Hermitian.
        parameters: One set (P,), an array (..., P) in ``circuit.parameters`` order,
            or a mapping of names to arrays.
        dtype: "complex128" or "complex64".
        client: A ``distributed.Client``: the sets are split over its workers and a
            Dask array is returned.
        initial: None (|0...0>), a basis-state int or an array of 2^n amplitudes
            (out of core: None or an int).
        memory_limit: Bytes or "4GiB" the run may hold (default: this machine's
            memory). Three states larger than this run out of core, blocks sized to it.
        store: A directory for the out-of-core states (psi and lambda, two copies
            each), kept after the run: the same call on it resumes an interrupted run
            or answers from its record. Default: a temporary directory (under Dask's
            ``temporary-directory``), removed after. With a ``client``, every worker
            must reach it. One parameter set per store.
        return_value: Also return the expectation values.

    Returns:
        An array (..., P) of derivatives (and, with ``return_value``, the values
        (...)).

    Raises:
        ValidationError: A circuit the adjoint method cannot take (measurements,
            channels, conditioned blocks), a non-Hermitian observable, or a
            ``memory_limit`` too small for blocks of 2^8 amplitudes.
        StoreError: A ``store`` that holds something else, or is damaged.
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(v.not_a_circuit(circuit))
    dtype = v.check_dtype(dtype)
    client = v.check_client(client)
    if not circuit.parameters:
        raise ValidationError("the circuit has no parameters: there is nothing to differentiate")
    batch = parameter_batch(circuit.parameters, parameters)
    parsed, single = observable_list(observable, circuit.num_qubits)
    if not single:
        raise ValidationError("gradient() takes one observable; sum them first, or call it per observable")
    (obs,) = parsed
    if not obs.is_hermitian:
        raise ValidationError("gradient() needs a Hermitian observable (real coefficients)")
    try:
        program = row_program(circuit)
    except RowError as error:
        raise ValidationError(
            f"the adjoint gradient needs a unitary circuit of gates: {error} "
            "(remove measurements, resets, channels and conditioned blocks)"
        ) from None
    terms = PauliTerms.of(obs)
    limit = _memory_limit(memory_limit)
    if store is not None or 3 * state_bytes(circuit.num_qubits, dtype) > limit:
        return _stored_gradient(
            circuit, slotted(circuit), batch, terms, dtype, initial, limit, store, client, return_value
        )
    start = _initial_vector(initial, circuit.num_qubits, dtype)
    out = _over_batch(
        _gradient_piece,
        circuit,
        batch,
        1 + program.num_parameters,
        client,
        np.float64,
        program=program,
        terms=terms,
        dtype=dtype,
        initial=start,
    )
    grads = _shaped(out[:, 1:], batch.shape, (program.num_parameters,))
    if not return_value:
        return grads
    values = _shaped(out[:, 0], batch.shape, ())
    if client is None and not batch.shape:
        values = float(values)
    return grads, values


def _memory_limit(memory_limit: Any) -> int:
    if memory_limit is not None:
        return v.check_memory_limit(memory_limit)
    return _config.available_memory(None, None)[0]


def _stored_gradient(
    circuit: Circuit,
    body: SlottedCircuit,
    batch: ParameterBatch,
    terms: PauliTerms,
    dtype: str,
    initial: Any,
    limit: int,
    store: Any,
    client: Any,
    return_value: bool,
) -> Any:
    """``gradient`` out of core: each parameter set in turn, psi and lambda in a store."""
    if initial is not None and not v.is_int(initial):
        raise ValidationError(
            "an out-of-core gradient starts from |0...0> or a basis-state int, not an array"
        )
    basis = 0 if initial is None else v.check_basis(initial, circuit.num_qubits)
    if store is not None and batch.size != 1:
        raise ValidationError(f"a gradient store holds one parameter set's run; got {batch.size} sets")
    if client is not None:
        workers = sum(client.nthreads().values())
    else:
        workers = dask.config.get("num_workers", None) or _config.cores(None)
    values = np.empty(batch.size)
    grads = np.empty((batch.size, len(body.parameter_names)))
    for row in range(batch.size):
        run = stored_gradient.describe_run(
            body,
            batch.values[row],
            terms,
            dtype=dtype,
            basis=basis,
            memory_limit=limit,
            workers=workers,
            circuit_key=circuit.fingerprint(),
        )
        values[row], grads[row] = stored_gradient.run_stored_gradient(run, store, client=client)
    shaped = _shaped(grads, batch.shape, (len(body.parameter_names),))
    if not return_value:
        return shaped
    return shaped, (float(values[0]) if not batch.shape else _shaped(values, batch.shape, ()))


def _initial_vector(initial: Any, num_qubits: int, dtype: str) -> np.ndarray | None:
    """None for |0...0>, else the 2^n amplitudes of a basis state or of an array."""
    if initial is None:
        return None
    size = 1 << num_qubits
    if v.is_int(initial):
        vector = np.zeros(size, dtype=dtype)
        vector[v.check_basis(initial, num_qubits)] = 1
        return vector
    vector = np.asarray(initial)
    if vector.shape != (size,) or not np.issubdtype(vector.dtype, np.number):
        raise ValidationError(
            f"initial must be a basis-state int or {size} amplitudes, got shape {vector.shape}"
        )
    v.check_initial_amplitudes(bool(np.all(np.isfinite(vector))), float(np.linalg.norm(vector)))
    return vector.astype(dtype)
