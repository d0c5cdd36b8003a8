"""Hostile OpenQASM programs (hypothesis): register sizes in every radix, in
parentheses, as expressions, with underscores and beyond 64 bits; gate definitions
nested to random depths and fan-outs; includes inside the program's directory,
absolute, through '..', through a link out, of a pipe, a directory, a file over the
size limit, a cycle; huge and non-finite angles; garbage text and bytes. Whatever a
program holds, reading it gives a circuit of at most 62 qubits or exactly one
ValidationError (TypeError, ImportError), promptly, and reads no file outside the
program's directory and the include path: a canary file beside the program's
directory never shows in any message.

A few examples per property run in CI; ``DASQ_FUZZ_EXAMPLES=1200 pytest -m fuzz`` is
the long run (tests/fuzzing.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fuzzing import FUZZ
from hypothesis import assume, event, given
from hypothesis import strategies as hst

import dasq
from dasq.circuit.classical import MAX_CLBITS
from dasq.circuit.validation import MAX_QUBITS
from dasq.frontends.convert import qasm_limits

pytest.importorskip("qiskit")
pytest.importorskip("qiskit_qasm3_import")

pytestmark = pytest.mark.fuzz

WAIT_S = 10.0  # every example is read or refused within this (the limits allow ~30 s only at the edge)
CANARY = "CANARY-d41d8cd9-never-read"
ALLOWED = (dasq.ValidationError, TypeError, ImportError)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A program directory ``prog`` with every kind of include a program may name, and
    a canary file beside it (outside it) that nothing may read."""
    root = tmp_path_factory.mktemp("programs")
    (root / "canary.inc").write_text(f"{CANARY} qreg canary[1];\n")
    prog = root / "prog"
    (prog / "sub").mkdir(parents=True)
    (root / "shared").mkdir()
    (prog / "ok.inc").write_text("gate okg a { h a; }\nqreg inc_q[2];\n")
    (prog / "sub" / "nested.inc").write_text('include "../ok.inc";\n')
    (prog / "big.inc").write_text("qreg big[1000000000];\n")
    (prog / "cycle_a.inc").write_text('include "cycle_b.inc";\n')
    (prog / "cycle_b.inc").write_text('include "cycle_a.inc";\n')
    (prog / "bad.inc").write_bytes(b"gate \xff\xfe a { h a; }\n")
    (prog / "link_out.inc").symlink_to(root / "canary.inc")
    (prog / "dir.inc").mkdir()
    os.mkfifo(prog / "fifo.inc")
    with open(prog / "huge.inc", "wb") as sparse:
        sparse.truncate(qasm_limits.MAX_FILE_BYTES + 1)
    (root / "shared" / "lib.inc").write_text("gate libg a, b { cx a, b; }\n")
    return root


INCLUDES = [
    "ok.inc",
    "sub/nested.inc",
    "big.inc",
    "cycle_a.inc",
    "bad.inc",
    "link_out.inc",
    "dir.inc",
    "fifo.inc",
    "huge.inc",
    "../canary.inc",
    "sub/../../canary.inc",
    "CANARY_ABSOLUTE",  # the canary's absolute path, filled in per tree
    "/etc/passwd",
    "missing.inc",
    "lib.inc",
    "qelib1.inc",
    "stdgates.inc",
    "",
]

# ----------------------------------------------------------------- strategies
SIZES = hst.one_of(
    hst.integers(0, 70),
    hst.sampled_from([62, 63, 64, 1000, 10**9, 2**31, 2**63, 2**64 - 1, 2**64, 10**30, 10**40, 10**400]),
    hst.integers(-5, -1),
)


@hst.composite
def qasm3_size(draw, value: int) -> str:
    """``value`` written as OpenQASM 3 may write an integer."""
    form = draw(
        hst.sampled_from(["dec", "hex", "oct", "bin", "underscore", "paren", "sum", "product", "neg"])
    )
    magnitude = abs(value)
    text = {
        "dec": str(magnitude),
        "hex": f"0x{magnitude:X}",
        "oct": f"0o{magnitude:o}",
        "bin": f"0b{magnitude:b}",
        "underscore": f"{magnitude:_}",
        "paren": f"(({magnitude}))",
        "sum": f"({magnitude // 2} + {magnitude - magnitude // 2})",
        "product": f"{magnitude} * 1",
        "neg": f"-(-{magnitude})",
    }[form]
    return f"-{text}" if value < 0 else text


@hst.composite
def declarations(draw, version: int) -> str:
    lines = []
    for _ in range(draw(hst.integers(0, 4))):
        size = draw(SIZES)
        name = f"r{len(lines)}"
        if version == 2:
            kind = draw(hst.sampled_from(["qreg", "creg"]))
            digits = str(size) if draw(hst.booleans()) or size < 0 else f"0x{size:X}"
            lines.append(f"{kind} {name}[{digits}];")
        else:
            written = draw(qasm3_size(size))
            lines.append(
                draw(
                    hst.sampled_from(
                        [
                            f"qubit[{written}] {name};",
                            f"bit[{written}] {name};",
                            f"qreg {name}[{written}];",
                            f"creg {name}[{written}];",
                        ]
                    )
                )
            )
    return "\n".join(lines)


ANGLES = hst.one_of(
    hst.floats(allow_nan=False, allow_infinity=False).map(repr),
    hst.sampled_from(
        [
            "1e400",
            "-1e400",
            "0/0",
            "1/0",
            "1.0/0",
            "pi*1e308*10",
            "1e308*1e308",
            "9" * 400,
            "2e-99999999999",
            "(((((pi)))))",
            "-" * 200 + "1",
            "sin(" * 50 + "1" + ")" * 50,
        ]
    ),
)


@hst.composite
def gates(draw, version: int) -> str:
    """Gate definitions nested ``depth`` deep, each calling the one before ``fanout``
    times, then used; the doubling ones are what the operation limits are for."""
    depth = draw(hst.integers(1, 80))
    fanout = draw(hst.sampled_from([1, 1, 2, 3, 20]))
    if fanout in (2, 3) and depth > 8 and draw(hst.booleans()):
        depth = 8  # 2^30 is refused at once; 2^16 takes the converter seconds to reach
    width = draw(hst.integers(1, 4))
    args = ",".join(f"a{i}" for i in range(width))
    first = f"gate g0 {args} {{ rx({draw(ANGLES)}) a0; }}"
    body = [f"gate g{i} {args} {{ {f'g{i - 1} {args}; ' * fanout}}}" for i in range(1, depth)]
    use = f"g{depth - 1} " + ",".join(f"q[{i}]" for i in range(width)) + ";"
    modifier = "" if version == 2 else draw(hst.sampled_from(["", "", "inv @ ", "pow(2) @ ", "ctrl @ "]))
    if modifier == "ctrl @ ":
        use = use.replace(f"g{depth - 1} ", f"g{depth - 1} q[{width}],")
    return "\n".join([first, *body, modifier + use])


GARBAGE = hst.text(
    alphabet=hst.sampled_from(list('qregcbit[]();{}@$"/*0123456789xXoOeE._-+, \n\tπ\x00')), max_size=60
)


@hst.composite
def programs(draw) -> tuple[str, int]:
    version = draw(hst.sampled_from([2, 3]))
    header = {2: 'OPENQASM 2.0;\ninclude "qelib1.inc";', 3: 'OPENQASM 3.0;\ninclude "stdgates.inc";'}[version]
    bogus = f"OPENQASM {draw(hst.integers(0, 10**30))}.{draw(hst.integers(0, 10**30))};"
    parts = [draw(hst.sampled_from([header] * 6 + ["", bogus]))]
    width = 5
    parts.append(f"qreg q[{width}];" if version == 2 else f"qubit[{width}] q;")
    pieces = {
        "declare": declarations(version),
        "gates": gates(version),
        "include": hst.sampled_from(INCLUDES).map(lambda name: f'include "{name}";'),
        "apply": ANGLES.map(lambda a: f"rz({a}) q[0];"),
        "broadcast": hst.just("h q;"),
        "physical": hst.integers(0, 10**12).map(lambda n: f"h ${n};"),
        "integer": hst.integers(0, 10**40).map(lambda n: f"x q[{n}];"),
        "garbage": GARBAGE,
    }
    for _ in range(draw(hst.integers(0, 5))):
        parts.append(draw(pieces[draw(hst.sampled_from(sorted(pieces)))]))
    return "\n".join(parts) + "\n", version


# ----------------------------------------------------------------- properties
def _read(source, include_path=None):
    """The circuit, or the allowed exception's message; anything else fails the test."""
    start = time.perf_counter()
    try:
        circuit = dasq.Circuit.from_qasm(source, include_path=include_path)
    except ALLOWED as exc:
        outcome = str(exc)
    else:
        assert circuit.num_qubits <= MAX_QUBITS and circuit.num_clbits <= MAX_CLBITS
        outcome = circuit
    elapsed = time.perf_counter() - start
    assert elapsed < WAIT_S, f"took {elapsed:.1f} s"
    event("read" if isinstance(outcome, dasq.Circuit) else _kind_of(outcome))
    return outcome


def _kind_of(message: str) -> str:
    """A refusal's kind, for hypothesis's statistics (--hypothesis-show-statistics)."""
    for words in ("declares more", "operations", "copy more", "nests", "include", "too large", "modifier"):
        if words in message:
            return words
    return "refused otherwise"


def _no_canary(outcome, reads: list[str], tree: Path) -> None:
    assert CANARY not in str(outcome)
    allowed = (os.path.realpath(tree / "prog"), os.path.realpath(tree / "shared"))
    for path in reads:
        real = os.path.realpath(path)
        assert real.startswith(allowed) or not real.startswith(os.path.realpath(tree)), path
        assert "canary" not in real


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every path dasq's one reader opens, in order."""
    seen: list[str] = []
    real = qasm_limits.read_file

    def recording(path, what, nofollow=False):
        seen.append(path)
        return real(path, what, nofollow)

    monkeypatch.setattr(qasm_limits, "read_file", recording)
    return seen


@FUZZ
@given(program=programs(), as_file=hst.booleans(), search=hst.booleans())
def test_a_hostile_program_gives_a_circuit_or_one_validation_error(tree, reads, program, as_file, search):
    text, _ = program
    text = text.replace("CANARY_ABSOLUTE", str(tree / "canary.inc"))
    include_path = [tree / "shared"] if search else None
    source: object = text
    if as_file:
        source = tree / "prog" / "main.qasm"
        source.write_text(text)
    reads.clear()
    _no_canary(_read(source, include_path), reads, tree)


@FUZZ
@given(data=hst.binary(max_size=300), header=hst.sampled_from([b"", b"OPENQASM 2.0;\n", b"OPENQASM 3.0;\n"]))
def test_garbage_bytes_in_a_file_give_one_validation_error(tree, reads, data, header):
    path = tree / "prog" / "garbage.qasm"
    path.write_bytes(header + data)
    outcome = _read(path)
    _no_canary(outcome, reads, tree)


@FUZZ
@given(
    header=hst.sampled_from(["", "OPENQASM 2.0;\n", "OPENQASM 3.0;\n", "OPENQASM 3;\n"]),
    text=hst.text(max_size=200),
)
def test_any_text_gives_a_circuit_or_one_validation_error(tree, reads, header, text):
    _no_canary(_read(header + text + ";\n"), reads, tree)


@FUZZ
@given(
    version=hst.sampled_from([2, 3]),
    sizes=hst.lists(hst.tuples(hst.booleans(), hst.integers(0, 30)), min_size=1, max_size=5),
    data=hst.data(),
)
def test_the_sizes_counted_before_parsing_are_the_parsed_circuits(version, sizes, data):
    """The pre-parse counts and the parser agree on small valid declarations (so the
    counting follows the parser's rules), and a total past the limit is refused."""
    lines = []
    for i, (quantum, size) in enumerate(sizes):
        if version == 2:
            lines.append(f"{'qreg' if quantum else 'creg'} r{i}[{size}];")
            continue
        written = data.draw(qasm3_size(size))
        single = size == 1 and data.draw(hst.booleans())
        lines.append(
            (f"qubit r{i};" if single else f"qubit[{written}] r{i};")
            if quantum
            else (f"bit r{i};" if single else f"bit[{written}] r{i};")
        )
    qubits = sum(size for quantum, size in sizes if quantum)
    clbits = sum(size for quantum, size in sizes if not quantum)
    assume(qubits >= 1 or version == 3)
    header = "OPENQASM 2.0;\n" if version == 2 else "OPENQASM 3.0;\n"
    text = header + "\n".join(lines) + "\n"
    if qubits > MAX_QUBITS or clbits > MAX_CLBITS:
        with pytest.raises(dasq.ValidationError, match="the program declares more than"):
            dasq.Circuit.from_qasm(text)
        return
    if version == 2:
        from qiskit import qasm2

        prepared = qasm_limits.prepare_qasm2(qasm_limits.Program(text, None), ())
        parsed = qasm2.loads(prepared.text, include_path=())
        counted = (prepared.qubits, prepared.clbits)
    else:
        from dasq.frontends.convert.qasm3 import GuardedConverter, parse_program

        converter = GuardedConverter()
        parsed = converter.convert(parse_program(text)).circuit
        counted = (converter.qubits, converter.clbits)
    assert counted == (parsed.num_qubits, parsed.num_clbits) == (qubits, clbits)
