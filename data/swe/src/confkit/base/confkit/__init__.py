"""confkit: INI configuration with typed defaults."""

__version__ = "1.0.0"
