"""textkit: text utilities."""

__version__ = "1.0.0"
