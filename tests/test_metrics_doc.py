"""Every metric name the code logs is listed in docs/metrics.md (the one table users read)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "metrics.md"
# First path parts of logged names; stats keys without one ("clip_ratio/low") are logged under
# ``train/`` and checked at run time by the module tests (``undocumented_metrics``).
METRIC_PREFIXES = {"train", "time", "sandbox", "mbpp_eval", "game_eval", "test", "exec", "greedy", "samples"}


def documented_patterns() -> list[re.Pattern[str]]:
    """docs/metrics.md's backticked names as regexes: ``<x>`` and a trailing ``_k``/``@k`` stand
    for any part, ``{a,b}`` for a choice, ``*`` for anything, ``[/seatN]`` for an optional part."""
    patterns = []
    for name in re.findall(r"`([a-z_]+/[^`\s]*|[a-z_]+)`", DOC.read_text()):
        rx = re.escape(name)
        rx = re.sub(r"<[^>]+>", r"[^/]+", rx.replace(r"\<", "<").replace(r"\>", ">"))
        rx = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace(",", "|") + ")", rx)
        rx = rx.replace(r"\[", "(").replace(r"\]", ")?").replace(r"\*", ".*")
        rx = re.sub(r"(_|@)k$", r"\1[0-9]+", rx).replace("seatN", "seat[0-9]+")
        patterns.append(re.compile(rx + "$"))
    return patterns


def _name(node: ast.AST) -> str | None:
    """A str constant as is; an f-string with each ``{...}`` as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def logged_names() -> dict[str, str]:
    """Metric names in lit_codeRL: first arguments of ``.log(...)``, keys of metric dicts (dict
    literals, comprehensions and ``d[key] = ...``) and tuple items -> where they appear."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "lit_codeRL").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            candidates: list[ast.AST] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr == "log":
                    name = _name(node.args[0])
                    if name is not None and " " not in name:
                        found.setdefault(name, f"{path.relative_to(REPO)}:{node.lineno}")
            elif isinstance(node, ast.Dict):
                candidates = [k for k in node.keys if k is not None]
            elif isinstance(node, ast.DictComp):
                candidates = [node.key]
            elif isinstance(node, ast.Tuple):  # for name, metric in (("train/reward", m), ...)
                candidates = list(node.elts)
            elif isinstance(node, ast.Assign):
                candidates = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
            for key in candidates:
                name = _name(key)
                if name and name.split("/", 1)[0] in METRIC_PREFIXES and "/" in name:
                    found.setdefault(name, f"{path.relative_to(REPO)}:{key.lineno}")
    return found


def undocumented(names: list[str] | dict[str, str]) -> list[str]:
    patterns = documented_patterns()
    missing = []
    for name in names:
        if name.endswith("/"):  # a prefix the code builds names from
            continue
        if "{}" in name:
            head, tail = name.split("{}", 1)[0], name.rsplit("{}", 1)[-1]
            if head.count("/") == 1 and head.endswith("/") and not tail:
                continue  # f"train/{key}": names from a stats dict, checked at run time
            sample = name.replace("{}", "1")
            alt = name.replace("{}", "x")
            if any(p.match(sample) or p.match(alt) for p in patterns):
                continue
            missing.append(name)
        elif not all(any(p.match(part) for p in patterns) for part in name.split("|")):
            missing.append(name)  # "a|b": a curves panel's pair, both must be documented
    return missing


def test_every_logged_metric_name_is_documented():
    names = logged_names()
    assert {"train/reward", "time/generate_s", "train/success_after_turn_{}", "success"} <= set(names)
    missing = undocumented(names)
    assert not missing, "undocumented in docs/metrics.md: " + ", ".join(f"{m} ({names[m]})" for m in missing)


def test_the_check_catches_an_undocumented_name():
    assert undocumented(["train/reward", "train/clip_ratio/high", "train/success_after_turn_3"]) == []
    assert undocumented(["train/game/writer_reward|train/game/predictor_reward"]) == []
    missing = ["train/no_such_metric", "exec/nowhere", "success_rate", "train/reward|train/nothing"]
    assert undocumented([*missing, "train/reward"]) == missing
