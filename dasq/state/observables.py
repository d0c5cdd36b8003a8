"""Pauli-sum observables: sum_k c_k P_k with Qiskit's label convention (qubit 0 rightmost)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Mapping

from dasq.circuit.validation import check_pauli_label
from dasq.errors import ValidationError


def pauli_label(paulis: Mapping[int, str], num_qubits: int) -> str:
    """The ``num_qubits``-qubit label with ``paulis[q]`` on qubit q and I elsewhere
    (qubit 0 rightmost): how every adapter widens a Pauli word on some qubits."""
    label = ["I"] * num_qubits
    for q, pauli in paulis.items():
        label[num_qubits - 1 - q] = pauli
    return "".join(label)


class PauliSum:
    """A weighted sum of Pauli strings, each label spanning all ``num_qubits`` qubits."""

    def __init__(self, terms: Iterable[tuple[str, complex]]) -> None:
        parsed: list[tuple[str, complex]] = []
        for term in terms:
            if not isinstance(term, tuple) or len(term) != 2:
                raise TypeError(f"each term must be a (label, coefficient) pair, got {term!r}")
            label, coeff = term
            lab = check_pauli_label(label)
            if not isinstance(coeff, numbers.Number) or isinstance(coeff, bool):
                raise TypeError(f"coefficient of {label!r} must be a number, got {coeff!r}")
            parsed.append((lab, complex(coeff)))
        if not parsed:
            raise ValidationError("a PauliSum needs at least one term")
        widths = {len(lab) for lab, _ in parsed}
        if len(widths) != 1:
            raise ValidationError(f"all Pauli labels must have the same length, got lengths {sorted(widths)}")
        self._terms = parsed
        self.num_qubits = widths.pop()

    @classmethod
    def parse(cls, observable: object) -> PauliSum:
        """Accept a PauliSum, a label, a list of (label, coeff), or a qiskit SparsePauliOp."""
        if isinstance(observable, PauliSum):
            return observable
        if isinstance(observable, str):
            return cls([(observable, 1.0)])
        to_list = getattr(observable, "to_list", None)
        if callable(to_list) and type(observable).__name__ == "SparsePauliOp":
            return cls([(lab, complex(c)) for lab, c in to_list()])
        if isinstance(observable, Iterable):
            return cls(list(observable))
        raise TypeError(
            "observable must be a dasq.PauliSum, a Pauli label, a list of (label, coeff) "
            f"or a qiskit SparsePauliOp, got {type(observable).__name__}"
        )

    @classmethod
    def from_string(cls, text: str) -> PauliSum:
        """'XZ:0.5,ZZ:-1' (a missing coefficient means 1)."""
        terms = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            label, _, coeff = part.partition(":")
            try:
                value = complex(coeff.strip()) if coeff.strip() else 1.0
            except ValueError:
                raise ValidationError(f"bad coefficient {coeff!r} in observable term {part!r}") from None
            terms.append((label.strip(), value))
        return cls(terms)

    @property
    def terms(self) -> list[tuple[str, complex]]:
        """(label, coefficient) pairs; the rightmost character of a label is qubit 0."""
        return list(self._terms)

    @property
    def is_hermitian(self) -> bool:
        """True when every coefficient is real (a Hermitian observable)."""
        return all(c.imag == 0 for _, c in self._terms)

    def __iter__(self) -> Iterator[tuple[str, complex]]:
        return iter(self._terms)

    def __len__(self) -> int:
        return len(self._terms)

    def __repr__(self) -> str:
        return "PauliSum(" + " + ".join(f"{c:g}*{lab}" for lab, c in self._terms) + ")"
