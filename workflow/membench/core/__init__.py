"""Shared core used by every system: errors, atomic I/O, validation, meter, metrics, tables."""
