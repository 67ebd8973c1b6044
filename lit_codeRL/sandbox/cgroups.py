"""The cgroups of a sandbox: groups for one worker or workspace session that bound its processes
(pids), its memory and its share of the CPU, made where this process may make them, joined by the
sandbox's wrapper before it execs (:func:`join_cgroups_argv`), removed when the sandbox closes.

- cgroup v1 (a hierarchy per controller, ``/sys/fs/cgroup/<controller>``): one group per
  controller, joined in turn.
- cgroup v2 (one hierarchy: ``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` beside v1 on a
  hybrid host): a process is in one group only, so joining a group per controller would leave the
  sandbox in the last one. One group holds every limit, in a ``lit_coderl`` group that enables
  the controllers for its children. That group goes below the nearest group on this process's line
  that hands the controllers down (:func:`v2_parents`).
- A hybrid host: a controller bound to a v1 hierarchy is used there; the others come from v2.

None of this is needed for containment: rlimits, the fork server's kill loop and (as root without
a pids group) a user namespace of its own bound a program where no group can be made. The groups
add what those cannot: a bound on a sandbox's processes as root, on its memory with tmpfs pages
counted, and a fair share of the CPU.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from lit_codeRL.sandbox.config import SandboxConfig

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_DEFAULT = {"cpu.shares": 1024, "cpu.weight": 100}
"""The default weight of a group (v1, v2): every sandbox's group gets it."""


class Cgroup:
    """A cgroup directory this process made for one worker or session: join it through
    :attr:`procs`, list its processes, :meth:`remove` it once they are gone. ``path is None``
    when no candidate was writable. :attr:`limits`: the limit files written in it."""

    path: Path | None = None
    limits: dict[str, int] = {}

    def _make(self, parents: Iterable[Path], prefix: str, limits: dict[str, int]) -> bool:
        """Make ``<parent>/lit_coderl/<prefix><pid>-<id>`` with each of ``limits`` (file -> value)
        written under the first parent where that works; ``False`` when none does. A group with
        a cpu weight reweighs its ``lit_coderl`` parent, as its :meth:`remove` does."""
        for parent in parents:
            path = parent / "lit_coderl" / f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                path.mkdir(parents=True)
                for name, value in limits.items():
                    (path / name).write_text(str(int(value)))
            except OSError:
                try:
                    path.rmdir()
                except OSError:
                    pass
                continue
            self.path, self.limits = path, dict(limits)
            if any(name in CPU_DEFAULT for name in limits):
                _reweigh_cpu_parent(path.parent)
            return True
        return False

    def _make_below_own(self, controller: str, prefix: str, limit_file: str, limit: int) -> None:
        """:meth:`_make` in ``controller``'s v1 hierarchy: below this process's own group there
        where possible, else at the hierarchy's root."""
        root = CGROUP_ROOT / controller
        if not (root / "cgroup.procs").exists():
            return
        own = own_cgroup(controller).lstrip("/")
        self._make(dict.fromkeys([root / own if own else root, root]), prefix, {limit_file: limit})

    @property
    def procs(self) -> str | None:
        return str(self.path / "cgroup.procs") if self.path else None

    def pids(self) -> list[int]:
        return [int(x) for x in _read(self.path / "cgroup.procs").split()] if self.path else []

    def remove(self) -> None:
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass
            if any(name in CPU_DEFAULT for name in self.limits):
                _reweigh_cpu_parent(self.path.parent)

    def kill_stragglers(self, tries: int) -> None:
        """SIGKILL whatever is still in the group (a fork bomb's late children) until it is empty,
        at most ``tries`` rounds."""
        from lit_codeRL.sandbox._server import _sigkill

        for _ in range(tries):
            pids = self.pids()
            if not pids:
                return
            _sigkill(pids)
            time.sleep(0.005)


class PidsCgroup(Cgroup):
    """A per-worker group in the v1 ``pids`` hierarchy, if writable (v2: :class:`V2Cgroup`).

    RLIMIT_NPROC is not enforced for uid 0, so when the trainer runs as root this is the only
    bound on a fork bomb besides the server's kill loop. Absent (``path is None``) when unavailable.
    """

    def __init__(self, limit: int) -> None:
        self.path = None
        root = CGROUP_ROOT / "pids"
        if (root / "cgroup.procs").exists():
            self._make([root], "w", {"pids.max": limit})


class MemoryCgroup(Cgroup):
    """A per-session group in the v1 ``memory`` hierarchy (``memory.limit_in_bytes``), if writable.

    Made below this process's own memory group where possible, so it can only narrow the limit
    the trainer already runs under. tmpfs pages written inside a sandbox are charged to it too.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.path = None
        self._make_below_own("memory", "m", "memory.limit_in_bytes", limit_bytes)


class CpuCgroup(Cgroup):
    """A cpu group per worker or session in the v1 ``cpu`` hierarchy, if writable, all at the same
    weight: the scheduler shares the CPU between sandboxes, not between their processes.

    Without it a program that forks busy processes (or a test run that does) takes the cores
    from every other sample's run on the machine, and those runs' wall-clock limits turn into
    ``timeout`` verdicts: rewards of other samples, which in a GRPO group raises the hostile
    sample's own advantage. The kernel's autogroup does the same per session, but only for
    processes in the root cpu cgroup, which a container or a SLURM job is not. Made below this
    process's own cpu cgroup where possible, so the trainer's own CPU limit still holds.

    The groups share one parent (``lit_coderl``), whose weight is one default weight per group
    in it (:func:`_reweigh_cpu_parent`): at the trainer's level the sandboxes together weigh as
    much as that many processes, as each did as a session of its own under autogroup. At one
    default weight, every sandbox of the machine together got the CPU of one busy process beside
    the trainer's threads or another test's processes (a 4 s MBPP reference then timed out at
    10 s in CI).
    """

    def __init__(self) -> None:
        self.path = None
        self._make_below_own("cpu", "c", "cpu.shares", CPU_DEFAULT["cpu.shares"])


class V2Cgroup(Cgroup):
    """One cgroup v2 group of a sandbox with every limit of ``limits`` (v2 file -> value) whose
    controller is handed down where it is made (:func:`v2_parents`): ``s<pid>-<id>`` in a
    ``lit_coderl`` group that enables those controllers for its children. ``path is None`` when
    there is no v2 hierarchy, no such parent, or none is writable."""

    def __init__(self, limits: dict[str, int]) -> None:
        self.path = None
        mount = v2_mount()
        if mount is None or not limits:
            return
        wanted = {name.split(".", 1)[0] for name in limits}
        for parent, handed_down in v2_parents(wanted, *mount, own=own_cgroup("")):
            home = parent / "lit_coderl"
            made_home = not home.is_dir()
            try:
                home.mkdir(exist_ok=True)
            except OSError:
                continue
            enabled = _enable_controllers(home, handed_down)
            mine = {name: value for name, value in limits.items() if name.split(".", 1)[0] in enabled}
            if mine and self._make([parent], "s", mine):
                return
            if made_home:  # leave no empty group where none of ours could go
                try:
                    home.rmdir()
                except OSError:
                    pass


def _enable_controllers(group: Path, controllers: set[str]) -> set[str]:
    """Enable ``controllers`` for ``group``'s children (its ``cgroup.subtree_control``) where they
    are not yet; the wanted ones enabled after. A controller its parent does not hand down, or a
    group with processes of its own (v2 keeps processes in leaves), refuses the write."""
    control = group / "cgroup.subtree_control"
    for controller in sorted(controllers - set(_read(control).split())):
        try:
            control.write_text(f"+{controller}")
        except OSError:
            pass
    return controllers & set(_read(control).split())


def v2_mount(mountinfo: Path = Path("/proc/self/mountinfo")) -> tuple[Path, str] | None:
    """Where the cgroup v2 hierarchy is mounted here and which of its groups that mount shows at
    its top (``/`` unless a container's runtime bound a subtree there); ``None`` without one."""
    for line in _read(mountinfo).splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(_unescape(fields[4])), _unescape(fields[3])
    return None


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) undone."""
    return field.encode("latin-1").decode("unicode_escape") if "\\" in field else field


def v2_parents(wanted: set[str], mount: Path, mount_root: str, own: str) -> list[tuple[Path, set[str]]]:
    """Where a sandbox's v2 group can go (under ``<parent>/lit_coderl``), best first, each with the
    ``wanted`` controllers it hands down to its children (its ``cgroup.subtree_control``): the
    groups on this process's line (``own``), from its own group up to the top of the mount.

    Its own group hands nothing down unless it is the root (v2 keeps processes in leaves), so on a
    systemd host or under SLURM the group goes beside this process's. It never goes above a group
    with a limit of its own (:func:`_limited`): a process moved to a v2 group leaves its old one for
    every controller, and a sandbox there would escape the limit the trainer runs under. The most
    controllers win; among equals, the nearest."""
    found: list[tuple[Path, set[str]]] = []
    line = _v2_line(mount, mount_root, own)
    for k, group in enumerate(line):
        handed_down = wanted & set(_read(group / "cgroup.subtree_control").split())
        if handed_down:
            found.append((group, handed_down))
        if k + 1 < len(line) and _limited(group):
            break
    return sorted(found, key=lambda f: -len(f[1]))


def _v2_line(mount: Path, mount_root: str, own: str) -> list[Path]:
    """The v2 groups from this process's own (``own``, a path in its cgroup namespace) up to the
    top of the mount; none when its group is not in what the mount shows."""
    top = mount_root.rstrip("/")
    if not own.startswith("/") or not (own == top or own.startswith(top + "/")):
        return []
    parts = [p for p in own[len(top) :].split("/") if p]
    if ".." in parts:
        return []
    return [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _limited(group: Path) -> bool:
    """Does v2 ``group`` set a limit of its own: a ``*.max`` file of a controller (``memory.max``,
    ``pids.max``, ``hugetlb.2MB.max``, ``io.max``'s ``rbps=``, ...) or ``memory.high`` whose value is
    neither ``max`` nor a number of 2**60 or more, or a quota in ``cpu.max`` (``<quota> <period>``)?"""
    try:
        names = [p.name for p in group.iterdir()]
    except OSError:
        return False
    for name in names:
        if name.startswith("cgroup.") or not (name.endswith(".max") or name == "memory.high"):
            continue
        text = _read(group / name)
        if name == "cpu.max":
            values = text.split()[:1]
        else:
            values = []
            for line in text.splitlines():
                tokens = line.split()
                keyed = [t.split("=", 1)[1] for t in tokens if "=" in t]
                values += keyed or tokens[-1:]
        if any(v != "max" and not (v.isdigit() and int(v) >= 2**60) for v in values):
            return True  # (hugetlb writes "none" as the largest page-aligned number)
    return False


def sandbox_cgroups(
    pids: int | None = None, memory_bytes: int | None = None, cpu: bool = False
) -> list[Cgroup]:
    """The groups of one sandbox that could be made here, bounding it to ``pids`` processes and
    ``memory_bytes`` (each ``None``: no bound) and, with ``cpu``, giving it a group of its own at
    the default weight: a v1 group per controller with a v1 hierarchy, and one v2 group for the
    other controllers. Join them all (:func:`join_cgroups_argv`)."""
    groups: list[Cgroup] = []
    v2: dict[str, int] = {}
    for wanted, make, v2_limits in (
        (pids is not None, lambda: PidsCgroup(pids), {"pids.max": pids}),
        (memory_bytes is not None, lambda: MemoryCgroup(memory_bytes), {"memory.max": memory_bytes}),
        (cpu, CpuCgroup, {"cpu.weight": CPU_DEFAULT["cpu.weight"]}),
    ):
        if wanted:
            group = make()
            if group.path is not None:
                groups.append(group)
            else:
                v2.update(v2_limits)
    if v2:
        group = V2Cgroup(v2)
        if group.path is not None:
            groups.append(group)
    return groups


def bounds(groups: Iterable[Cgroup], limit_file: str) -> bool:
    """Does one of ``groups`` set ``limit_file`` (``pids.max``: a bound on processes)?"""
    return any(limit_file in g.limits for g in groups)


def release(groups: Iterable[Cgroup]) -> None:
    """Remove ``groups`` (a probe's, or a sandbox's that did not start)."""
    for group in groups:
        group.remove()


def _reweigh_cpu_parent(parent: Path) -> None:
    """Give ``parent`` (a ``lit_coderl`` group) one default weight per sandbox group in it (at
    least one; at most the controller's maximum). Workers start in parallel threads, and trainers
    on one machine share the parent: each writer counts again after its write and writes again
    until the count it wrote holds, so the last write counts every group made or removed before
    it."""
    v1 = (parent / "cpu.shares").exists()
    limit_file, unit, most = ("cpu.shares", 1024, 262144) if v1 else ("cpu.weight", 100, 10000)
    if not (parent / limit_file).exists():
        return

    def count() -> int:
        return sum(1 for d in parent.iterdir() if d.is_dir() and d.name[:1] in "cs")

    try:
        groups = count()
        for _ in range(100):
            (parent / limit_file).write_text(str(min(most, max(1, groups) * unit)))
            groups, wrote = count(), groups
            if groups == wrote:
                return
    except OSError:
        pass


def _lit_coderl_parents() -> set[Path]:
    """Every ``lit_coderl`` group this process may have made sandbox groups in."""
    parents = {CGROUP_ROOT / "pids" / "lit_coderl"}
    for controller in ("memory", "cpu"):
        own = own_cgroup(controller).lstrip("/")
        parents |= {CGROUP_ROOT / controller / own / "lit_coderl", CGROUP_ROOT / controller / "lit_coderl"}
    mount = v2_mount()
    if mount is not None:
        parents |= {group / "lit_coderl" for group in _v2_line(*mount, own=own_cgroup(""))}
    return parents


def sweep_stale_cgroups() -> int:
    """Remove the sandbox groups (``w<pid>-*``, ``m<pid>-*``, ``c<pid>-*``, ``s<pid>-*``) of
    processes that no longer exist: a trainer killed with SIGKILL cannot remove its own. Returns
    how many went."""
    removed = 0
    for parent in _lit_coderl_parents():
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for d in entries:
            pid = d.name[1:].split("-", 1)[0]
            if d.is_dir() and d.name[:1] in "wmcs" and pid.isdigit() and not Path(f"/proc/{pid}").exists():
                try:
                    d.rmdir()  # only succeeds once no process is left in it
                    removed += 1
                except OSError:
                    pass
        _reweigh_cpu_parent(parent)
    return removed


def own_cgroup(controller: str, proc_cgroup: Path = Path("/proc/self/cgroup")) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` ("" = the v2 one); ""
    where it has none (``proc_cgroup``: another process's file, or a test's)."""
    for line in _read(proc_cgroup).splitlines():
        if line.count(":") < 2:
            continue
        _, ctrls, path = line.split(":", 2)
        if (controller and controller in ctrls.split(",")) or (not controller and ctrls == ""):
            return path
    return ""


def join_cgroups_argv(procs_files: Iterable[str | None], argv: list[str]) -> list[str]:
    """``argv`` prefixed by a shell that moves itself into each cgroup (its ``cgroup.procs``)
    before exec, so every process the wrapper forks starts inside them."""
    files = [f for f in procs_files if f]
    if not files:
        return list(argv)
    script = (
        'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; exec "$@"'
    )
    return ["/bin/sh", "-c", script, "sh", str(len(files)), *files, *argv]


@functools.cache
def pids_cgroup_writable() -> bool:
    """Can this process make a group that bounds a sandbox's processes? (A probe, removed; once.)"""
    probe = sandbox_cgroups(pids=1)
    release(probe)
    return bounds(probe, "pids.max")


@functools.cache
def cpu_cgroup_writable() -> bool:
    """Can this process give a sandbox a cpu group of its own? (A probe, removed; once.)"""
    probe = sandbox_cgroups(cpu=True)
    release(probe)
    return any(bounds(probe, name) for name in CPU_DEFAULT)


NO_V2_GROUP = (
    "on cgroup v2 the groups go below a group that hands the controllers down to its children "
    "(cgroup.subtree_control), not below a group with processes in it: run the trainer in a leaf "
    "of a delegated group (systemd-run --scope -p Delegate=yes, or a container whose other "
    "processes sit in a leaf)"
)


def unshared_cpu(use_cpu_cgroup: bool) -> str | None:
    """Why a sandbox's busy processes can take the cores from the others here, or ``None``
    (cpu groups of their own, or the kernel's autogroup, which each sandbox's session gets
    while this process is in the root cpu cgroup)."""
    if use_cpu_cgroup and cpu_cgroup_writable():
        return None
    if _read(Path("/proc/sys/kernel/sched_autogroup_enabled")).strip() == "1" and (
        (own_cgroup("cpu") or own_cgroup("")) == "/"
    ):
        return None
    if not use_cpu_cgroup:
        return "use_cpu_cgroup is off"
    return (
        f"no writable cpu cgroup (v1 /sys/fs/cgroup/cpu, or cgroup v2 with the cpu controller; {NO_V2_GROUP})"
    )


_WARNED: set[str] = set()


def warn_unshared_cpu(use_cpu_cgroup: bool) -> None:
    """Say once per process when nothing shares the CPU between sandboxes."""
    why = unshared_cpu(use_cpu_cgroup)
    if why is not None and why not in _WARNED:
        _WARNED.add(why)
        logger.warning(
            "sandbox: %s: a program that forks busy processes slows every other run on this "
            "machine, and their wall-clock limits may then fail them (the kernel's autogroup "
            "shares the CPU per session only outside a cpu cgroup)",
            why,
        )


def unbounded_processes(cfg: SandboxConfig) -> str | None:
    """Why nothing bounds the number of processes a program can fork here, or ``None``.

    RLIMIT_NPROC bounds a non-root uid; the kernel does not apply it to root, where only the pids
    cgroup does. Without either, a fork bomb runs until its timeout and the kill of its tree."""
    if os.getuid() != 0:
        return None
    if not cfg.use_pids_cgroup:
        return "use_pids_cgroup is off"
    if not pids_cgroup_writable():
        return f"no writable pids cgroup (v1 /sys/fs/cgroup/pids, or cgroup v2 with the pids controller; {NO_V2_GROUP})"
    return None


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""
