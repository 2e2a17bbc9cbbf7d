"""membench: reproduce, measure and compare memory-efficient GPU training methods."""

__version__ = "0.1.0"
