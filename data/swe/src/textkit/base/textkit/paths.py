"""POSIX path normalisation done on strings only."""


def normalize(path):
    """Collapse ``.``, ``..`` and repeated slashes; ``""`` becomes ``"."``."""
    if not path:
        return "."
    absolute = path.startswith("/")
    parts = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    result = "/".join(parts)
    if absolute:
        return "/" + result
    return result or "."


def join(*parts):
    """Join with ``/`` and normalise; an absolute part discards everything before it."""
    joined = ""
    for part in parts:
        if part.startswith("/") or not joined:
            joined = part
        else:
            joined = f"{joined}/{part}"
    return normalize(joined)
