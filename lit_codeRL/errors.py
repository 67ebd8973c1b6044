"""Errors a user can fix: the CLI prints them as one line instead of a traceback."""


class ConfigError(ValueError):
    """A configuration value, file or model source that cannot be used; the message names the fix."""
