"""PennyLane's ``dasq.qubit`` device, ``DasqDevice`` (dasq.frontends.pennylane): the name
PennyLane's plugin entry point and users import it by."""

from dasq.frontends.pennylane.device import DasqDevice

__all__ = ["DasqDevice"]
