"""Kernels: functions on one block of amplitudes; no Dask inside."""
