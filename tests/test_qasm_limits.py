"""Hostile OpenQASM gets one clear ValidationError: never a hang, a traceback, a Rust
panic or unbounded memory (dasq/frontends/convert/qasm_limits.py, qasm3.py, qasm.py).

One test (or a parametrized family) per reported case: register sizes in any radix,
constant expressions and included files; 200 nested gate definitions; includes reading
files outside the program's directory; a 10 MB program; integer literals that panic
Qiskit's lexer; a named pipe as the circuit file. Then the limits' edges, the include
rules that keep working, and the command line's one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import dasq
from dasq.cli import main
from dasq.frontends.convert import qasm as interop
from dasq.frontends.convert import qasm_limits
from dasq.frontends.convert.qasm_limits import (
    MAX_FILE_BYTES,
    MAX_GATE_DEPTH,
    MAX_INCLUDE_DEPTH,
    MAX_OPERATIONS,
    MAX_QASM3_TOKENS,
)

pytest.importorskip("qiskit")
pytest.importorskip("qiskit_qasm3_import")

PROMPT_S = 5.0  # a refusal comes before any work: well under this on a loaded 2-core machine
Q2 = 'OPENQASM 2.0;\ninclude "qelib1.inc";\n'
Q3 = 'OPENQASM 3.0;\ninclude "stdgates.inc";\n'
SECRET = "CANARY-5e1f-do-not-print"


def refused(source, match: str, **kwargs) -> str:
    """The ValidationError's message from reading ``source``, checked to come promptly:
    in this process's CPU time, which the other processes of a parallel test run (and
    the machine's other load) do not stretch as they stretch the wall clock."""
    start = time.process_time()
    with pytest.raises(dasq.ValidationError, match=match) as info:
        dasq.Circuit.from_qasm(source, **kwargs)
    assert time.process_time() - start < PROMPT_S
    return str(info.value)


def nested(version: int, levels: int, width: int = 1, calls: int = 1) -> str:
    """A program whose gate g{levels-1} nests ``levels`` gate definitions, each calling
    the one before ``calls`` times, applied once."""
    args = ",".join(f"a{i}" for i in range(width))
    qubits = ",".join(f"q[{i}]" for i in range(width))
    head = Q2 + f"qreg q[{width}];\n" if version == 2 else Q3 + f"qubit[{width}] q;\n"
    first = f"gate g0 {args} {{ h a0; cx a0,a{width - 1}; }}\n" if width > 1 else "gate g0 a0 { h a0; }\n"
    body = "".join(f"gate g{i} {args} {{ {f'g{i - 1} {args}; ' * calls}}}\n" for i in range(1, levels))
    return head + first + body + f"g{levels - 1} {qubits};\n"


# ----------------------------------------------------------------- 1. sizes before parsing
BILLION = [
    "qubit[(1000000000)] q;",
    "qubit[0o7346545000] q;",
    "qubit[0b111011100110101100101000000000] q;",
    "qubit[0x3B9ACA00] q;",
    "qubit[1_000_000_000] q;",
    "qubit[1000 * 1000 * (999 + 1)] q;",
    "qreg q[1000000000];",
]


@pytest.mark.parametrize("declaration", BILLION)
def test_a_billion_qubits_in_any_radix_or_expression_are_refused_before_allocation(declaration):
    message = refused(f"OPENQASM 3.0;\n{declaration}\n", "line 2: the program declares more than 62 qubits")
    assert "at least 1000000000" in message


@pytest.mark.parametrize("declaration", ["bit[0x3B9ACA00] c;", "creg c[1000000000];"])
def test_a_billion_classical_bits_are_refused_before_allocation(declaration):
    refused(f"OPENQASM 3.0;\n{declaration}\n", "line 2: the program declares more than 4096 classical bits")


def test_qubits_are_counted_across_declarations_and_named_at_the_line_passing_the_limit():
    message = refused(Q3 + "qubit[40] a;\nqubit b;\nqreg c[0x16];\n", "line 5: the program declares more")
    assert "at least 63" in message
    refused(Q2 + "qreg a[40];\nqreg b[23];\n", "line 4: the program declares more than 62 qubits")


def test_a_size_from_a_constant_or_repeated_squaring_is_refused_promptly():
    refused("OPENQASM 3.0;\nconst uint n = 1000000000;\nqubit[n] q;\n", "ConstantDeclaration")
    squares = "".join(f"const uint a{i} = a{i - 1} * a{i - 1};\n" for i in range(1, 40))
    refused(
        "OPENQASM 3.0;\nconst uint a0 = 4294967295 * 4294967295;\n" + squares + "qubit[a39] q;\n", "line 2"
    )


def test_a_physical_qubit_beyond_the_limit_is_refused_before_allocation():
    refused(Q3 + "h $1000000000;\n", r"line 3: physical qubit \$1000000000 is beyond \$61")
    assert dasq.Circuit.from_qasm(Q3 + "h $0;\ncx $0, $5;\n").num_qubits == 6


def test_an_included_file_declaring_a_billion_qubits_is_refused_naming_its_line(tmp_path):
    (tmp_path / "big.inc").write_text("// registers\nqreg big[1000000000];\n")
    program = tmp_path / "main.qasm"
    program.write_text(Q2 + 'include "big.inc";\n')
    refused(program, r"line 2 of 'big.inc' \(included at line 3\): the program declares more than 62 qubits")


HOSTILE_SIZES = [
    *[f"OPENQASM 3.0;\n{d}\n" for d in BILLION],
    "OPENQASM 3.0;\nbit[0x3B9ACA00] c;\n",
    Q3 + "h $1000000000;\n",
    Q3 + "qubit[2] q;\nctrl(1000000000000) @ x q[0], q[1];\n",
    Q2 + "qreg q[1000000000];\n",
    "OPENQASM 2.0;\nqreg q[99999999999999999999999999999999];\n",
]


def test_hostile_sizes_allocate_nothing_in_a_process_limited_to_2_gib():
    script = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        import dasq
        for text in {HOSTILE_SIZES!r}:
            try:
                dasq.Circuit.from_qasm(text)
            except dasq.ValidationError:
                continue
            raise SystemExit("read: " + text)
        print("all refused")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "all refused" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "panicked" not in done.stderr and "memory allocation" not in done.stderr


# ----------------------------------------------------------------- 2. nesting
@pytest.mark.parametrize("version", [2, 3])
def test_200_nested_gate_definitions_are_one_validation_error(version):
    message = refused(nested(version, 200), f"{MAX_GATE_DEPTH} levels deep")
    assert "nests gate definitions" in message


def _in_a_deep_stack(frames: int, call):
    return call() if frames <= 0 else _in_a_deep_stack(frames - 1, call)


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("width", [1, 4])  # a dense matrix (<= 3 qubits), or expanded
def test_definitions_at_the_depth_limit_read_from_a_caller_already_500_frames_deep(version, width):
    circuit = _in_a_deep_stack(500, lambda: dasq.Circuit.from_qasm(nested(version, MAX_GATE_DEPTH, width)))
    assert circuit.num_qubits == width
    refused(nested(version, MAX_GATE_DEPTH + 1, width), "nests gate definitions")


def test_a_nested_gate_becomes_the_matrix_qiskit_gives():
    from qiskit import qasm2
    from qiskit.quantum_info import Operator

    text = nested(2, 6, width=2, calls=2).replace("h a0;", "h a0; rz(0.3) a1; t a0;")
    circuit = dasq.Circuit.from_qasm(text)
    (op,) = list(circuit)
    expected = Operator(qasm2.loads(text, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)).data
    assert np.allclose(op.matrix, expected, atol=1e-12)


@pytest.mark.parametrize("width", [1, 4])
def test_definitions_expanding_exponentially_are_refused_by_the_operation_limit(width):
    refused(nested(2, 30, width, calls=2), f"more than {MAX_OPERATIONS} operations")


def test_openqasm3_definitions_copied_exponentially_are_refused_before_copying():
    refused(nested(3, 30, calls=20), "line 8: the program's gate uses copy more than")


def test_a_recursion_error_anywhere_becomes_one_validation_error():
    deep = "(" * 3000 + "1" + ")" * 3000
    refused(f"OPENQASM 3.0;\nqubit[{deep}] q;\n", "nests too deeply")


def test_memory_errors_while_reading_become_one_validation_error(monkeypatch):
    def exhausted(text):
        raise MemoryError

    monkeypatch.setattr(interop, "_load_qasm2", exhausted)
    refused(Q2 + "qreg q[1];\n", "ran out of memory")


# ----------------------------------------------------------------- 3. includes stay near their program
@pytest.fixture
def program_dir(tmp_path: Path) -> Path:
    """A program's directory, next to (not holding) a file with a secret word."""
    (tmp_path / "secret.inc").write_text(f"{SECRET} qreg s[1];\n")
    folder = tmp_path / "prog"
    (folder / "lib").mkdir(parents=True)
    return folder


def _including(folder: Path, name: str) -> Path:
    program = folder / "main.qasm"
    program.write_text(Q2 + f'qreg q[1];\ninclude "{name}";\n')
    return program


def test_an_absolute_include_is_refused_without_reading_it(program_dir):
    secret = program_dir.parent / "secret.inc"
    message = refused(_including(program_dir, str(secret)), "line 4: include .* absolute include paths")
    assert SECRET not in message
    message = refused(Q2 + 'include "/etc/passwd";\n', "absolute include paths are not searched")
    assert "root" not in message


@pytest.mark.parametrize("how", ["dot-dot", "link"])
def test_an_include_leading_out_of_the_programs_directory_is_refused(program_dir, how):
    name = "../secret.inc"
    if how == "link":
        (program_dir / "link.inc").symlink_to(program_dir.parent / "secret.inc")
        name = "link.inc"
    message = refused(
        _including(program_dir, name), "lies outside the program's directory and the include path"
    )
    assert SECRET not in message


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_include_that_is_not_a_regular_file_is_refused_without_blocking(program_dir, kind):
    target = program_dir / "special.inc"
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    what = "a named pipe" if kind == "fifo" else "a directory"
    refused(
        _including(program_dir, "special.inc"),
        f"include 'special.inc' is refused: it is not a regular file \\({what}",
    )


def test_an_include_over_the_size_limit_is_refused_before_reading(program_dir):
    with open(program_dir / "huge.inc", "wb") as sparse:
        sparse.truncate(MAX_FILE_BYTES + 1)
    refused(_including(program_dir, "huge.inc"), f"is {MAX_FILE_BYTES + 1} bytes; dasq reads OpenQASM files")


def test_an_include_cycle_is_refused_where_it_closes(program_dir):
    (program_dir / "a.inc").write_text('include "b.inc";\n')
    (program_dir / "b.inc").write_text('include "a.inc";\n')
    refused(
        _including(program_dir, "a.inc"), r"include 'a.inc' is an include cycle \(a.inc -> b.inc -> a.inc\)"
    )
    (program_dir / "self.inc").write_text('include "self.inc";\n')
    refused(_including(program_dir, "self.inc"), r"is an include cycle \(self.inc -> self.inc\)")


def test_includes_nested_too_deep_are_refused(program_dir):
    for k in range(MAX_INCLUDE_DEPTH + 1):
        (program_dir / f"n{k}.inc").write_text(f'include "n{k + 1}.inc";\n' if k < MAX_INCLUDE_DEPTH else "")
    refused(_including(program_dir, "n0.inc"), f"includes nest more than {MAX_INCLUDE_DEPTH} deep")


def _same(circuit: dasq.Circuit, other: dasq.Circuit) -> bool:
    """The same operations on the same qubits with the same matrices."""
    if circuit.num_qubits != other.num_qubits or len(circuit) != len(other):
        return False
    for op, theirs in zip(circuit, other):
        if (op.name, op.targets, op.controls) != (theirs.name, theirs.targets, theirs.controls):
            return False
        if hasattr(op, "matrix") and not np.allclose(op.matrix, theirs.matrix, atol=1e-12):
            return False
    return True


def test_includes_resolve_under_the_program_and_give_what_qiskit_gives(program_dir):
    from qiskit import qasm2

    (program_dir / "lib" / "gates.inc").write_text("gate pair a, b { cx a, b; h b; } // two\nqreg r[2];\n")
    (program_dir / "lib" / "outer.inc").write_text('include "gates.inc";\ngate one a { x a; }\n')
    program = program_dir / "main.qasm"
    program.write_text(
        Q2 + 'include "lib/outer.inc";\nqreg q[2];\ncreg c[2];\n'
        "pair q[0], q[1];\none r[1];\nmeasure q -> c;\n"
    )
    circuit = dasq.Circuit.from_qasm(program)
    legacy = qasm2.LEGACY_CUSTOM_INSTRUCTIONS
    search = [program_dir, program_dir / "lib"]
    expected = qasm2.load(program, include_path=search, custom_instructions=legacy)
    assert circuit.num_qubits == 4 and [op.name for op in circuit] == ["pair", "one", "measure", "measure"]
    assert _same(circuit, dasq.Circuit.from_qiskit(expected))


def test_the_include_path_is_searched_after_the_programs_directory(program_dir, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "gates.inc").write_text("gate flip a { x a; }\n")
    program = program_dir / "main.qasm"
    program.write_text(Q2 + 'include "gates.inc";\nqreg q[1];\nflip q[0];\n')
    refused(program, "include 'gates.inc' is not found")
    assert [op.name for op in dasq.Circuit.from_qasm(program, include_path=[shared])] == ["flip"]


def test_a_program_given_as_text_searches_only_the_include_path(program_dir):
    (program_dir / "lib" / "gates.inc").write_text("gate flip a { x a; }\n")
    text = Q2 + 'include "gates.inc";\nqreg q[1];\nflip q[0];\n'
    refused(text, "a program given as text has no directory of its own")
    assert dasq.Circuit.from_qasm(text, include_path=[program_dir / "lib"]).num_qubits == 1


def test_an_error_inside_an_include_names_the_include(program_dir):
    (program_dir / "bad.inc").write_text("gate g a { nope a; }\n")
    refused(_including(program_dir, "bad.inc"), "line 4.*in the text of include 'bad.inc'")


def test_include_path_must_be_a_sequence_of_directories(tmp_path):
    with pytest.raises(TypeError, match="sequence of directories"):
        dasq.Circuit.from_qasm(Q2, include_path=str(tmp_path))
    refused(Q2, "is not a directory", include_path=[tmp_path / "missing"])


# ----------------------------------------------------------------- 4. size of a program
def test_a_ten_megabyte_program_of_900k_gates_is_refused_promptly(tmp_path):
    program = tmp_path / "big.qasm"
    gates = ["h q[0];", "cx q[0], q[1];", "rz(0.5) q[2];", "u3(0.1, 0.2, 0.3) q[1];"]
    program.write_text(Q2 + "qreg q[3];\n" + "\n".join(gates[i % 4] for i in range(900_000)) + "\n")
    assert program.stat().st_size > 10**7
    refused(program, f"more than {MAX_OPERATIONS} operations")


def test_statements_on_whole_registers_count_one_operation_per_qubit():
    count = MAX_OPERATIONS // 62 + 1
    refused(Q2 + "qreg q[62];\n" + "h q;\n" * count, f"line {count + 3}: the program has more than")


def test_a_circuit_file_over_the_size_limit_is_refused_before_reading(tmp_path):
    with open(tmp_path / "huge.qasm", "wb") as sparse:
        sparse.truncate(MAX_FILE_BYTES + 1)
    refused(tmp_path / "huge.qasm", f"is {MAX_FILE_BYTES + 1} bytes")


def test_an_openqasm3_program_over_the_token_limit_is_refused_before_parsing():
    refused(Q3 + "qubit q;\n" + "h q;\n" * (MAX_QASM3_TOKENS // 3), f"more than {MAX_QASM3_TOKENS} tokens")
    refused(Q3 + "// " + "x" * (qasm_limits.MAX_QASM3_BYTES + 1), "OpenQASM 3 programs of up to")


def test_unterminated_block_comments_are_read_in_linear_time():
    refused("OPENQASM 3.0;\n" + "/*" * 400_000, "invalid OpenQASM")
    refused("/*" * 2_000_000 + "\n", "invalid OpenQASM")  # no header: read as OpenQASM 2


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    (tmp_path / "latin.qasm").write_bytes(Q2.encode() + b"// caf\xe9\n")
    refused(tmp_path / "latin.qasm", "is not UTF-8 text")


# ----------------------------------------------------------------- 5. panics in Qiskit's lexer
HUGE = "99999999999999999999999999999999"


@pytest.mark.parametrize(
    "statement",
    [
        f"qreg q[{HUGE}];",
        f"qreg q[1];\ncreg c[{HUGE}];",
        f"qreg q[2];\ncx q[0], q[{HUGE}];",
        f"qreg q[1];\ncreg c[1];\nmeasure q[{HUGE}] -> c[0];",
        f"qreg q[1];\nbarrier q[{HUGE}];",
        f"qreg q[1];\nreset q[{HUGE}];",
    ],
)
def test_an_integer_beyond_64_bits_is_refused_without_a_rust_panic(statement, capfd):
    refused(Q2 + statement + "\n", "is too large: OpenQASM 2 integers go up to 18446744073709551615")
    assert "panicked" not in capfd.readouterr().err


def test_a_version_number_beyond_64_bits_is_refused_without_a_rust_panic(capfd):
    refused(f"OPENQASM 2.{HUGE};\nqreg q[1];\n", "is not an OpenQASM version")
    assert "panicked" not in capfd.readouterr().err


def test_reals_and_names_with_long_digit_runs_still_read():
    circuit = dasq.Circuit.from_qasm(
        Q2 + f"qreg q{HUGE}[1];\nrz(1.{HUGE}) q{HUGE}[0];\nrz(2e-{HUGE}) q{HUGE}[0];\n"
    )
    assert circuit.num_qubits == 1


def test_a_panic_in_the_parser_becomes_a_validation_error(monkeypatch):
    class PanicException(BaseException):  # pyo3's, which is not an Exception
        pass

    def panics(text):
        raise PanicException("called `Result::unwrap()` on an `Err` value")

    monkeypatch.setattr(interop, "_load_qasm2", panics)
    refused(Q2 + "qreg q[1];\n", "Qiskit's parser failed")


# ----------------------------------------------------------------- 6. the circuit file itself
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_circuit_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "circuit.qasm"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = Path(os.devnull)
    refused(path, "is not a regular file")


# ----------------------------------------------------------------- modifiers
def test_modifiers_are_checked_before_qiskit_applies_them():
    refused(Q3 + "qubit[2] q;\nctrl(1000000000000) @ x q[0], q[1];\n", "line 4: ctrl.* control qubits")
    seven = ", ".join(f"a{i}" for i in range(7))
    gate = f"gate wide {seven} {{ h a0; }}\n"
    refused(Q3 + "qubit[7] q;\n" + gate + "pow(0.5) @ wide q;\n", "pow on a gate of 7 qubits")
    hundred = Q3 + "qubit q;\ngate g0 a {" + " h a;" * 100 + " }\ngate g1 a {" + " g0 a;" * 101 + " }\n"
    refused(hundred + "inv @ g1 q;\n", "line 6: a modifier on gate 'g1' makes Qiskit rebuild more than")
    assert len(dasq.Circuit.from_qasm(hundred + "inv @ g0 q;\n")) == 1
    circuit = dasq.Circuit.from_qasm(
        Q3 + "qubit[3] q;\nnegctrl(2) @ x q[0], q[1], q[2];\npow(0.5) @ h q[0];\n"
    )
    assert len(circuit) == 2


# ----------------------------------------------------------------- the command line
@pytest.fixture
def hostile(program_dir) -> dict[str, Path]:
    """Circuit files the command line is given: each has one clean refusal."""
    files = {}
    for name, text in {
        "nested": nested(2, 200),
        "secret": Q2 + 'include "../secret.inc";\n',
        "panic": f"OPENQASM 2.0;\nqreg q[{HUGE}];\n",
        "billion": "OPENQASM 3.0;\nqubit[0x3B9ACA00] q;\n",
    }.items():
        files[name] = program_dir / f"{name}.qasm"
        files[name].write_text(text)
    files["fifo"] = program_dir / "fifo.qasm"
    os.mkfifo(files["fifo"])
    return files


@pytest.mark.parametrize("case", ["nested", "secret", "panic", "billion", "fifo"])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_the_command_line_gives_one_line_for_a_hostile_file(hostile, case, command, capfd):
    start = time.perf_counter()
    assert main([command, str(hostile[case])]) == 2
    assert time.perf_counter() - start < PROMPT_S
    out, err = capfd.readouterr()
    assert err.startswith("dasq: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "panicked" not in err and SECRET not in err + out


def test_the_command_line_include_path_option(program_dir, tmp_path, capsys):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "gates.inc").write_text("gate flip a { x a; }\n")
    program = program_dir / "main.qasm"
    program.write_text(Q2 + 'include "gates.inc";\nqreg q[1];\ncreg c[1];\nflip q[0];\nmeasure q -> c;\n')
    assert main(["run", str(program), "--shots", "5", "-I", str(shared)]) == 0
    assert capsys.readouterr().out.split() == ["1", "5"]
    assert main(["plan", str(program), "--include-path", str(shared)]) == 0
    assert main(["run", str(program), "--shots", "5"]) == 2
    assert "include 'gates.inc' is not found" in capsys.readouterr().err


def test_the_operation_limit_is_a_setting_named_in_its_refusal():
    import dask

    program = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\n' + "h q[0];\n" * 101
    with (
        dask.config.set({"dasq.max-operations": 100}),
        pytest.raises(dasq.ValidationError, match=r"dasq\.max-operations"),
    ):
        dasq.Circuit.from_qasm(program)
    assert len(dasq.Circuit.from_qasm(program)) == 101  # the default holds far more
