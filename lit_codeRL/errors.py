"""Errors a user can fix: the CLI prints them as one line instead of a traceback."""


class ConfigError(ValueError):
    """A configuration value, file or model source that cannot be used; the message names the fix."""


class DivergedError(ConfigError):
    """Training stopped: its gradients stayed non-finite (NaN/inf) for several optimizer steps in a
    row; the message names what to change (learning rate, precision, data)."""
