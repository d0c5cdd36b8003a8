"""Converters between dasq circuits and other formats; each builds circuits from the circuit package alone."""
