"""The Cirq converter's old path, kept for dasq/cirq/trajectories.py alone until that
module moves (it is being merged into the one walker); the converter itself is
dasq.frontends.convert.from_cirq, reached lazily as Circuit.from_cirq reaches it."""


def __getattr__(name: str) -> object:
    from dasq.frontends.convert import from_cirq

    return getattr(from_cirq, name)
