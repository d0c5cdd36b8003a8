"""What dasq reads of an OpenQASM program before any parser sees it, and the limits it holds.

A parser allocates what a program declares (a billion-qubit register is a billion
objects) and follows what it includes (``include "/etc/passwd";``), so before Qiskit
parses anything this module reads every file through one reader (regular files of
bounded size only), resolves OpenQASM 2 includes itself (the standard library, or a
file under the program's directory or an include-path directory) and counts the
program's qubits, classical bits and top-level operations by the parser's own rules.
OpenQASM 3 sizes are checked by the converter's own evaluator (dasq.frontends.convert.qasm3);
what gate definitions expand to is counted while dasq expands them (interop's budget of
MAX_OPERATIONS). Every refusal is one ``ValidationError`` naming the limit and, where
there is one, the line.

Each limit is sized so that a program at it still reads in bounded time and memory
(docs/guide/circuits.md quotes the measurements).
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike

from dasq.circuit import budget
from dasq.circuit.classical import MAX_CLBITS
from dasq.circuit.validation import MAX_QUBITS
from dasq.errors import ValidationError

MAX_FILE_BYTES = 64 << 20  # a file, and a program with all its includes (64 MiB)
MAX_INCLUDE_DEPTH = 16  # includes inside includes
MAX_GATE_DEPTH = 32  # gate definitions inside gate definitions (and if/else bodies): Qiskit's and
# dasq's walks recurse a few frames a level, so this stays inside Python's recursion limit even
# for a caller already hundreds of frames deep
# operations after broadcasts and gate bodies expand (the default of dask config
# dasq.max-operations, the limit of every circuit read: dasq/circuit/budget.py): each is Qiskit's
# objects and dasq's validated record, so time and memory grow with it
MAX_OPERATIONS = budget.MAX_OPERATIONS
MAX_QASM3_BYTES = 4 << 20  # the OpenQASM 3 reference parser is pure Python: its time grows with
MAX_QASM3_TOKENS = 250_000  # ... the characters it lexes and the tokens it parses
MAX_QASM3_COPIES = 50_000  # gate-body operations the OpenQASM 3 converter deep-copies, in all (it
# copies a gate's whole body at each use, and Qiskit 2.6 never frees part of each copy)
MAX_MODIFIED_OPERATIONS = 10_000  # a gate under ctrl/negctrl/inv/pow: Qiskit rebuilds its whole body
MAX_POWER_WIDTH = 6  # pow(k) @ g builds g's dense matrix: 4^width entries
MAX_INTEGER = (1 << 64) - 1  # Qiskit's OpenQASM 2 parser reads integers as 64-bit (larger ones panic)
STANDARD_INCLUDES = {2: "qelib1.inc", 3: "stdgates.inc"}


def _mib(n: int) -> str:
    return f"{n} bytes ({n >> 20} MiB)"


# ----------------------------------------------------------------- the one reader
@dataclass(frozen=True)
class Program:
    """A program's text and the directory its relative includes start from (None:
    it was given as text, so only the include path is searched)."""

    text: str
    directory: str | None


def read_program(text_or_path: str | PathLike[str]) -> Program:
    """The program: a path-like, or a one-line string (no ';'), names a file."""
    if not isinstance(text_or_path, (str, PathLike)):
        raise TypeError(f"expected QASM text or a path, got {type(text_or_path).__name__}")
    if isinstance(text_or_path, str) and (";" in text_or_path or "\n" in text_or_path):
        if len(text_or_path) > MAX_FILE_BYTES:
            raise ValidationError(
                f"the OpenQASM text has {len(text_or_path)} characters; dasq reads programs of up to "
                f"{_mib(MAX_FILE_BYTES)}"
            )
        return Program(text_or_path, None)
    path = os.fspath(text_or_path)
    if not isinstance(path, str):
        raise TypeError(f"expected a str path, got {type(path).__name__}")
    try:
        exists = os.path.lexists(path)
    except (OSError, ValueError):
        exists = False
    shown = path if len(path) <= 200 else path[:200] + "..."
    if not exists:
        text_too = " (nor is it OpenQASM text, which has ';')" if isinstance(text_or_path, str) else ""
        raise ValidationError(f"no such file: {shown!r}{text_too}")
    text = read_file(path, f"the circuit file {shown!r}")
    return Program(text, os.path.dirname(os.path.abspath(path)))


def read_file(path: str, what: str, nofollow: bool = False) -> str:
    """UTF-8 text of the regular file ``path`` of at most MAX_FILE_BYTES bytes. Anything
    else is refused from its status before it is opened (opening a device can act on
    it), and the file is opened without blocking (a named pipe swapped in meanwhile
    would wait for a writer forever) and checked again on its descriptor before a
    byte is read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        _check_regular(os.lstat(path) if nofollow else os.stat(path), what)
        fd = os.open(path, flags)
    except ValidationError:
        raise
    except FileNotFoundError:
        raise ValidationError(f"{what} does not exist") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValidationError(f"{what} cannot be opened ({reason})") from None
    try:
        _check_regular(os.fstat(fd), what)
        data = _read_at_most(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValidationError(f"{what} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # it grew while being read
        raise ValidationError(f"{what} is over {_mib(MAX_FILE_BYTES)}, the most dasq reads")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{what} is not UTF-8 text (byte {exc.start} is not)") from None


def _check_regular(info: os.stat_result, what: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise ValidationError(f"{what} is not a regular file ({_kind(info.st_mode)})")
    if info.st_size > MAX_FILE_BYTES:
        raise ValidationError(
            f"{what} is {info.st_size} bytes; dasq reads OpenQASM files of up to {_mib(MAX_FILE_BYTES)}"
        )


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a link"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def include_directories(include_path: object) -> tuple[str, ...]:
    """The caller's include directories, each an existing directory, as absolute paths."""
    if include_path is None:
        return ()
    if isinstance(include_path, (str, bytes, PathLike)):
        raise TypeError(
            "include_path must be a sequence of directories (e.g. ['lib']), "
            f"got a single {type(include_path).__name__}"
        )
    if not isinstance(include_path, Iterable):
        raise TypeError(f"include_path must be a sequence of directories, got {type(include_path).__name__}")
    out = []
    for entry in include_path:
        if not isinstance(entry, (str, PathLike)):
            raise TypeError(f"an include_path entry must be a str or path, got {type(entry).__name__}")
        path = os.fspath(entry)
        if not isinstance(path, str) or not os.path.isdir(path):
            raise ValidationError(f"include path entry {path!r} is not a directory")
        out.append(os.path.abspath(path))
    return tuple(out)


# ----------------------------------------------------------------- the header
_HEADER = re.compile(r"OPENQASM\s+(\d{1,9})(?!\d)")


def qasm_version(text: str) -> int:
    """The major version from the ``OPENQASM`` header (2 without one); comments and
    blank space before it do not count. Linear in the text, whatever it holds."""
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n\f\v\ufeff":
            pos += 1
        if text.startswith("//", pos):
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end + 1
        elif text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            pos = len(text) if end < 0 else end + 2
        else:
            break
    found = _HEADER.match(text, pos)
    return int(found.group(1)) if found else 2


# ----------------------------------------------------------------- where an error is
@dataclass(frozen=True)
class Where:
    """A place in a program: a line of the main text, or of an included file (with
    the chain of include lines that led there)."""

    line: int
    include: str | None = None
    included_at: Where | None = None

    def __str__(self) -> str:
        if self.include is None:
            return f"line {self.line}"
        return f"line {self.line} of {self.include!r} (included at {self.included_at})"


def refuse(where: Where | None, message: str) -> ValidationError:
    prefix = "invalid OpenQASM" if where is None else f"invalid OpenQASM at {where}"
    return ValidationError(f"{prefix}: {message}")


# ----------------------------------------------------------------- OpenQASM 2
# Qiskit's OpenQASM 2 lexer: '//' comments only, strings only in include statements,
# decimal register sizes. Whitespace it accepts is a subset of Python's \s.
_QASM2_COMMENT = re.compile(r'("[^"\n]*")|//[^\n]*')
_QASM2_INCLUDE = re.compile(r'"[^"\n]*"|(?<![\w.])include(?!\w)')
_QASM2_INCLUDE_STATEMENT = re.compile(r'include\s*"([^"\n]*)"\s*;')
_QASM2_REGISTER = re.compile(r"(?<![\w.])(qreg|creg)\s+([A-Za-z_]\w*)\s*\[\s*(\d+)\s*\]")
_QASM2_LONG_DIGITS = re.compile(r"\d{20,}")
_QASM2_VERSION = re.compile(r"(?<![\w.])OPENQASM(?!\w)\s*([^\s;]*)")
_QASM2_BODY = re.compile(r"\{[^{}]*\}")
_QASM2_GATE_HEADER = re.compile(r"\s*gate\s+([A-Za-z_]\w*)")
_QASM2_CALL = re.compile(r"(?:^|[;{])\s*([A-Za-z_]\w*)")
_QASM2_HEAD = re.compile(r"\s*(?:if\s*\([^)]*\)\s*)?([A-Za-z_]\w*)")
_QASM2_BARE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(?!\w)(?!\s*\[)")


@dataclass
class _Totals:
    """Running totals over the program and its includes, in the order the parser reads them."""

    qubits: int = 0
    clbits: int = 0
    operations: int = 0
    bytes: int = 0
    registers: dict[str, int] = field(default_factory=dict)
    gates: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (depth, size)
    included: dict[int, str] = field(default_factory=dict)  # main-text line -> include name


@dataclass(frozen=True)
class _Includes:
    """Where includes may come from: directories searched in order after the including
    file's own, and the real directories every included file must lie under."""

    search: tuple[str, ...]
    roots: tuple[str, ...]
    reading: list[str] = field(default_factory=list)  # the real paths being included, outermost first


@dataclass(frozen=True)
class Prepared:
    """An OpenQASM 2 program ready for Qiskit's parser, and which of its lines hold
    an included file's text (by the include's name)."""

    text: str
    included: dict[int, str]
    qubits: int  # declared, as the parser will size them
    clbits: int


def prepare_qasm2(program: Program, include_path: Sequence[str]) -> Prepared:
    """The program as Qiskit's OpenQASM 2 parser will read it, with every include but
    the standard library's written in place (each on its include's line, so line
    numbers still hold), once every file is read and every limit checked: Qiskit then
    opens no file of its own."""
    roots = [*([program.directory] if program.directory else []), *include_path]
    includes = _Includes(tuple(include_path), tuple(os.path.realpath(r) for r in roots))
    totals = _Totals(bytes=len(program.text))
    text = _prepare_file(program.text, program.directory, None, 0, includes, totals)
    return Prepared(text, totals.included, totals.qubits, totals.clbits)


def _prepare_file(
    text: str, directory: str | None, origin: Where | None, depth: int, includes: _Includes, totals: _Totals
) -> str:
    code = _QASM2_COMMENT.sub(r"\1", text)  # a comment ends its line: no column moves
    _check_integers(code, origin)
    pieces, pos, line = [], 0, 1  # line: the line of code[pos]
    for found in _QASM2_INCLUDE.finditer(code):
        if found.start() < pos or found.group().startswith('"'):
            continue
        _count(code[pos : found.start()], line, origin, totals)
        pieces.append(code[pos : found.start()])
        line += code.count("\n", pos, found.start())
        where = _where(line, origin)
        statement = _QASM2_INCLUDE_STATEMENT.match(code, found.start())
        if statement is None:
            raise refuse(where, 'an include needs a file name in double quotes and a ";"')
        name = statement.group(1)
        if name == STANDARD_INCLUDES[2]:
            pieces.append(statement.group())
        else:
            pieces.append(_include(name, directory, where, depth, includes, totals))
            if origin is None:
                totals.included.setdefault(line, name)
        pos = statement.end()
        line += code.count("\n", found.start(), pos)
    _count(code[pos:], line, origin, totals)
    pieces.append(code[pos:])
    return "".join(pieces)


def _where(line: int, origin: Where | None) -> Where:
    if origin is None:
        return Where(line)
    return Where(line, origin.include, origin.included_at)


def _include(
    name: str, directory: str | None, where: Where, depth: int, includes: _Includes, totals: _Totals
) -> str:
    """The text of included file ``name``, checked and prepared, on one line."""
    if depth + 1 > MAX_INCLUDE_DEPTH:
        raise refuse(
            where, f"includes nest more than {MAX_INCLUDE_DEPTH} deep at include {name!r} (an include cycle?)"
        )
    path = _resolve(name, directory, where, includes)
    if path in includes.reading:
        cycle = [os.path.basename(p) for p in includes.reading[includes.reading.index(path) :]]
        raise refuse(where, f"include {name!r} is an include cycle ({' -> '.join([*cycle, cycle[0]])})")
    try:
        text = read_file(path, "it", nofollow=True)
    except ValidationError as exc:
        raise refuse(where, f"include {name!r} is refused: {exc}") from None
    totals.bytes += len(text)
    if totals.bytes > MAX_FILE_BYTES:
        raise refuse(
            where, f"the program and its includes exceed {_mib(MAX_FILE_BYTES)}, the most dasq reads"
        )
    origin = Where(1, name, where)
    includes.reading.append(path)
    inner = _prepare_file(text, os.path.dirname(path), origin, depth + 1, includes, totals)
    includes.reading.pop()
    return inner.replace("\r", " ").replace("\n", " ")


def _resolve(name: str, directory: str | None, where: Where, includes: _Includes) -> str:
    """The real path of include ``name``: the first of the including file's directory
    and the include path that has it, and only under the program's directory or an
    include-path directory; anything else is refused before it is opened."""
    if not name or "\x00" in name:
        raise refuse(where, f"include {name!r} is not a file name")
    if os.path.isabs(name) or os.path.splitdrive(name)[0]:
        raise refuse(
            where,
            f"include {name!r} is refused: absolute include paths are not searched; put the file "
            "under the program's directory, or name its directory as an include path "
            "(the include_path argument, or -I DIR on the command line)",
        )
    bases = [*([directory] if directory else []), *includes.search]
    for base in bases:
        candidate = os.path.join(base, name)
        if not os.path.lexists(candidate):
            continue
        real = os.path.realpath(candidate)
        if not any(_inside(real, root) for root in includes.roots):
            raise refuse(
                where,
                f"include {name!r} is refused: it lies outside the program's directory and the include "
                "path (name its directory in the include_path argument, or -I DIR on the command line)",
            )
        return real
    if not bases:
        raise refuse(
            where,
            f"include {name!r} is not found: a program given as text has no directory of its own; "
            f"it may include {STANDARD_INCLUDES[2]!r}, or files under the directories named in the "
            "include_path argument",
        )
    searched = ", ".join(repr(b) for b in bases)
    raise refuse(where, f"include {name!r} is not found (searched {searched})")


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def _check_integers(code: str, origin: Where | None) -> None:
    """Refuse integer literals over 2^64 - 1, and any version number that long: Qiskit's
    OpenQASM 2 lexer panics on them (a Rust panic, not an exception)."""
    for found in _QASM2_LONG_DIGITS.finditer(code):
        digits = found.group().lstrip("0")
        too_large = len(digits) > 20 or int(digits or "0") > MAX_INTEGER
        if too_large and _is_integer_token(code, found.start(), found.end()):
            shown = found.group()[:24] + ("..." if len(found.group()) > 24 else "")
            raise refuse(
                _where(code.count("\n", 0, found.start()) + 1, origin),
                f"the integer {shown} is too large: OpenQASM 2 integers go up to {MAX_INTEGER}",
            )
    for found in _QASM2_VERSION.finditer(code):
        if _QASM2_LONG_DIGITS.search(found.group(1)):
            raise refuse(
                _where(code.count("\n", 0, found.start()) + 1, origin),
                f"the version {found.group(1)[:24]!r} is not an OpenQASM version",
            )


def _is_integer_token(code: str, start: int, end: int) -> bool:
    """Whether the digits code[start:end] are an integer token (not part of a name or a real)."""
    before = code[start - 1] if start else " "
    after = code[end] if end < len(code) else " "
    if before.isalpha() or before in "_." or after in ".eE":
        return False
    return not (before in "+-" and start >= 2 and code[start - 2] in "eE")


def _count(code: str, line: int, origin: Where | None, totals: _Totals) -> None:
    """Add a stretch of OpenQASM 2 (comments removed) starting at ``line`` to the totals:
    the qubits and bits its registers declare and the operations its statements
    broadcast to; refuse at the first place a total passes its limit."""
    pos = 0
    for found in _QASM2_REGISTER.finditer(code):
        line += code.count("\n", pos, found.start())
        pos = found.start()
        kind, name, digits = found.groups()
        digits = digits.lstrip("0")
        size = int(digits or "0") if len(digits) <= 20 else MAX_INTEGER + 1
        totals.registers[name] = size
        if kind == "qreg":
            totals.qubits += size
            if totals.qubits > MAX_QUBITS:
                raise refuse(
                    _where(line, origin),
                    f"the program declares more than {MAX_QUBITS} qubits (at least {totals.qubits}); "
                    f"dasq simulates up to {MAX_QUBITS}",
                )
        else:
            totals.clbits += size
            if totals.clbits > MAX_CLBITS:
                raise refuse(
                    _where(line, origin),
                    f"the program declares more than {MAX_CLBITS} classical bits (at least {totals.clbits}); "
                    f"dasq allows up to {MAX_CLBITS}",
                )
    line -= code.count("\n", 0, pos)  # back to the stretch's first line
    _count_operations(code, line, origin, totals)


def _count_operations(code: str, line: int, origin: Where | None, totals: _Totals) -> None:
    """The operations the statements make: each statement on whole registers once per
    qubit, a gate the program defines as many times as its body expands to (so an
    exponentially nested definition is refused here, at its line, before Qiskit
    parses it); refuse definitions nested deeper than MAX_GATE_DEPTH. Every scan is
    linear in the text, whatever it holds."""
    pieces, pos = [], 0
    limit = max_operations()  # read once: a setting looked up per statement costs more than the scan
    for body in _QASM2_BODY.finditer(code):
        start = max(pos, code.rfind(";", pos, body.start()) + 1, code.rfind("}", pos, body.start()) + 1)
        header = _QASM2_GATE_HEADER.match(code, start, body.start())
        if header is None:
            continue
        depth, size = 1, 1
        for call in _QASM2_CALL.finditer(body.group()):
            inner_depth, inner_size = totals.gates.get(call.group(1), (0, 1))
            depth, size = max(depth, inner_depth + 1), size + inner_size
        if depth > MAX_GATE_DEPTH:
            where = _where(line + code.count("\n", 0, header.start(1)), origin)
            raise refuse(where, depth_message(header.group(1), depth))
        totals.gates[header.group(1)] = (depth, min(size, limit + 1))
        pieces += [code[pos:start], "\n" * code.count("\n", start, body.end()), ";"]
        pos = body.end()
    flat = "".join([*pieces, code[pos:]])
    sizes = {name: size for name, size in totals.registers.items() if size > 1}
    start = 0
    while (end := flat.find(";", start)) >= 0:
        statement = flat[start : end + 1]
        head = _QASM2_HEAD.match(statement)
        gate = totals.gates.get(head.group(1), (0, 1))[1] if head else 1
        totals.operations += gate * _broadcast(statement, sizes)
        if totals.operations > limit:
            first = end + 1 - len(statement.lstrip())  # the statement's first character
            raise refuse(_where(line + flat.count("\n", 0, first), origin), operations_message())
        start = end + 1


def _broadcast(statement: str, sizes: dict[str, int]) -> int:
    """How many times a statement applies: the largest register it names whole."""
    widest = 1
    if sizes:
        for found in _QASM2_BARE.finditer(statement):
            widest = max(widest, sizes.get(found.group(1), 1))
            if widest >= MAX_QUBITS:
                break
    return widest


def max_operations() -> int:
    """The limit in force: MAX_OPERATIONS unless dask config ``dasq.max-operations``
    raises or lowers it (time and memory grow with it)."""
    return budget.max_operations()


def operations_message(found: str = "") -> str:
    limit = max_operations()
    return (
        f"the program has more than {limit} operations (counting each qubit of a statement on "
        f"whole registers, the bodies of the gates it uses and each pass of its for loops); dasq "
        f"reads OpenQASM programs of up to {limit} operations ({budget.setting()})"
    )


# ----------------------------------------------------------------- OpenQASM 3 text
_QASM3_SKIP = re.compile(r'"[^"\n]*"|//|/\*')
_QASM3_TOKEN = re.compile(r"[\w$.]+|\S")


def check_qasm3_text(text: str) -> None:
    """Refuse an OpenQASM 3 text too long for the reference parser (pure Python: time
    and memory grow with characters and tokens) before it is parsed."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_QASM3_BYTES:
        raise ValidationError(
            f"the OpenQASM 3 program is {size} bytes; dasq reads OpenQASM 3 programs of up to "
            f"{_mib(MAX_QASM3_BYTES)} (OpenQASM 2 up to {MAX_FILE_BYTES >> 20} MiB)"
        )
    tokens = 0
    for piece in _qasm3_code(text):
        for _ in _QASM3_TOKEN.finditer(piece):
            tokens += 1
            if tokens > MAX_QASM3_TOKENS:
                raise ValidationError(
                    f"the OpenQASM 3 program has more than {MAX_QASM3_TOKENS} tokens; dasq reads OpenQASM 3 "
                    f"programs of up to {MAX_QASM3_TOKENS} (OpenQASM 2 up to {max_operations()} operations)"
                )


def _qasm3_code(text: str) -> Iterator[str]:
    """The text in pieces, comments left out (linear, even when a '/*' never closes)."""
    pos = 0
    while True:
        found = _QASM3_SKIP.search(text, pos)
        if found is None:
            yield text[pos:]
            return
        mark = found.group()
        if mark.startswith('"'):
            yield text[pos : found.end()]
            pos = found.end()
            continue
        yield text[pos : found.start()]
        end = text.find("\n" if mark == "//" else "*/", found.end())
        if end < 0:
            return
        pos = end + (1 if mark == "//" else 2)


# ----------------------------------------------------------------- after parsing
@functools.cache
def leaf_classes() -> tuple[type, ...]:
    """Instruction classes that are their own matrix or action (Qiskit's standard
    gates, measure, reset, barrier, delay, explicit unitaries): nothing to expand."""
    from qiskit.circuit import Barrier
    from qiskit.circuit.library import UnitaryGate, get_standard_gate_name_mapping

    return (*{gate.base_class for gate in get_standard_gate_name_mapping().values()}, Barrier, UnitaryGate)


def depth_message(name: str, depth: int) -> str:
    return (
        f"gate {name!r} nests gate definitions more than {MAX_GATE_DEPTH} deep (at least {depth}); "
        f"dasq reads definitions up to {MAX_GATE_DEPTH} levels deep"
    )
