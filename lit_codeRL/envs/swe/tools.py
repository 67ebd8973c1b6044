"""Tool bundles an agent gets in its workspace: ``<base_tools_path>/<name>/{bin/, config.yaml, install.sh}``.

The layout of SWE-agent's tool bundles. At reset every configured bundle is bound read-only at
``/opt/tools/<name>`` in the episode's workspace, its ``bin/`` goes on ``PATH`` and its
``install.sh`` runs once (inside the sandbox, like any command); ``config.yaml`` describes the tool
to the agent (``name``, ``description``, ``usage``, ``examples``), and that text goes into the
first observation. ``env/tools/search`` ships with the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from lit_codeRL.errors import ConfigError

TOOLS_MOUNT = "/opt/tools"


def default_tools_path() -> Path:
    """``env/tools`` of this checkout (beside the package)."""
    return Path(__file__).resolve().parents[3] / "env" / "tools"


@dataclass(frozen=True)
class ToolBundle:
    name: str
    path: Path
    description: str
    usage: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    @property
    def mount(self) -> str:
        return f"{TOOLS_MOUNT}/{self.name}"

    @property
    def has_install(self) -> bool:
        return (self.path / "install.sh").is_file()

    def help_text(self) -> str:
        lines = [f"- {self.name}: {self.description}"]
        lines += [f"    {u}" for u in self.usage]
        lines += [f"    e.g. {e}" for e in self.examples]
        return "\n".join(lines)


def load_tools(names: list[str] | tuple[str, ...], base_path: str | Path | None = None) -> list[ToolBundle]:
    """The bundles ``names`` under ``base_path`` (default :func:`default_tools_path`), checked."""
    base = Path(base_path).expanduser() if base_path else default_tools_path()
    tools = []
    for name in names:
        path = base / name
        if not (path / "bin").is_dir():
            raise ConfigError(
                f"tool {name!r}: no {path / 'bin'} (tools live in <base_tools_path>/<name>/bin)"
            )
        config_file = path / "config.yaml"
        try:
            config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
        except yaml.YAMLError as e:
            raise ConfigError(f"tool {name!r}: {config_file} is not valid YAML: {e}") from None
        config = config or {}
        if not isinstance(config, dict):
            raise ConfigError(f"tool {name!r}: {config_file} must be a mapping")
        tools.append(
            ToolBundle(
                name=name,
                path=path.resolve(),
                description=str(config.get("description", "")).strip(),
                usage=tuple(str(u) for u in _as_list(config.get("usage"))),
                examples=tuple(_example(e) for e in _as_list(config.get("examples"))),
            )
        )
    return tools


def _example(entry: object) -> str:
    """An example as one line: a string as is, ``{command, explanation}`` as ``command  # explanation``."""
    if isinstance(entry, dict):
        command, why = str(entry.get("command", "")).strip(), str(entry.get("explanation", "")).strip()
        return f"{command}  # {why}" if why else command
    return str(entry)


def _as_list(value: object) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
