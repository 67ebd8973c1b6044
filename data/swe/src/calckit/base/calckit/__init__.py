"""calckit: arithmetic expressions without eval()."""

__version__ = "1.0.0"
