"""Command-line groups of the shared core."""
