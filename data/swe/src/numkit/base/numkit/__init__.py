"""numkit: small numeric helpers."""

__version__ = "1.0.0"
