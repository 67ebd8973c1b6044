"""Default configuration; every file is merged on top of this."""

DEFAULTS = {
    "server": {"host": "127.0.0.1", "port": 8080, "workers": 2, "debug": False},
    "logging": {"level": "INFO", "file": ""},
}
