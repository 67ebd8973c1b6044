"""A real ``python -m pdb`` session inside an episode's workspace, driven through a pseudo-terminal.

The debugger runs the task's tests (``python -m pdb -m pytest -sq <test files>``) in the sandbox
(``Workspace.pty_start``/``pty_send``: the pty and every process it starts live inside the
workspace session, with its limits and no network). What the agent types after ``!`` runs there
too, and can touch nothing that grading reads: grading happens in a fresh workspace with the test
files restored.

State kept across restarts: the breakpoints (``file:line``, as the agent set them; debug-gym keeps
them the same way), at most :data:`MAX_BREAKPOINTS`. The debugger restarts, with its breakpoints
set again, after every edit of a file (the code it runs changed) and whenever another tool ran a
process in the workspace (a workspace ``run`` ends every process of the session, the debugger's
included): the agent is told when that happened. Restarts are lazy: the next ``pdb`` call starts the session.

Commands that would wait for input pdb does not prompt for (``interact``, a REPL) are refused;
``clear`` without arguments is confirmed automatically; ``debug`` and ``commands`` answer at their
own prompts (``((Pdb))``, ``(com)``). A command that does not return to the
prompt within ``timeout_s`` (an infinite loop under ``c``) has its whole process tree killed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lit_codeRL.envs.text import python_lines
from lit_codeRL.sandbox.workspace import Workspace, WorkspaceError

PROMPT = r"(\(+Pdb\)+ |\(com\) |Clear all breaks\? )$"
"""Where pdb waits for the agent: its prompt (``((Pdb))`` in the recursive debugger ``debug``
starts), ``commands``' prompt for a breakpoint's commands (ended by ``end``), or ``clear``'s
confirmation (answered ``y``). A prompt not waited for left the command hanging until the time
limit killed the debugger: ``debug`` and ``commands`` cost 10 s and the session each."""
# pdb's output is the agent's too (``!print("Deleted breakpoint 999...")``): a number read with
# int() is bounded, as a number of thousands of digits fails int() (an exception in the trainer)
_SET = re.compile(r"Breakpoint ([0-9]{1,9}) at (\S+?):([0-9]+)")
_DELETED = re.compile(r"Deleted breakpoint ([0-9]{1,9})(?![0-9])")
MAX_BREAKPOINTS = 50
"""Breakpoints an episode keeps across restarts at most: each is set again at every restart (one
round trip) and listed in every pdb turn's dump."""
MAX_LOCATION_CHARS = 512
"""Characters of a kept breakpoint's ``file:line`` at most (its path is pdb's output, which ``b
EXPR`` lets the agent print)."""
REFUSED = {"interact": "`interact` opens a Python shell this tool cannot drive; use p EXPR or !STATEMENT."}


# ``python -m pdb`` with one change: a process forked under it does not share its terminal. Both
# processes' debuggers read the one terminal before, and which of them got each command was the
# kernel's choice: the answers came from either process, at random, and the child's late prompt
# ended the next command before its answer. Every forked child now runs on untraced, reading no
# terminal (stdin is /dev/null). A child forked by a command typed at the prompt (``!os.fork()``,
# ``!Pool(2).map(...)``: ``cmd.Cmd.onecmd`` is on its stack) runs that command on, shows no value
# of it, and ends where it would come back to the debugger (``postcmd``): a process pool started
# at the prompt works, and no second prompt answers. ``sys.path[0]`` is the working directory, as
# ``-m`` makes it.
_LAUNCHER = """import cmd, os, runpy, sys


def _back_at_the_prompt(stop, line):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)


def _forked():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "onecmd" and frame.f_code.co_filename == cmd.__file__:
            debugger = frame.f_locals.get("self")
            if not isinstance(debugger, cmd.Cmd):
                os._exit(0)
            debugger.postcmd = _back_at_the_prompt
            sys.displayhook = lambda value: None
            break
        frame = frame.f_back
    sys.settrace(None)
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    except OSError:
        pass


os.register_at_fork(after_in_child=_forked)
sys.path[0] = os.getcwd()
runpy.run_module("pdb", run_name="__main__", alter_sys=True)
"""


def launched(argv: list[str]) -> list[str]:
    """What runs for ``argv``: ``python -m pdb ARGS`` as ``python -c <launcher> ARGS``
    (:data:`_LAUNCHER`), anything else as it is. The agent is shown ``argv``."""
    if argv[1:3] == ["-m", "pdb"]:
        return [argv[0], "-c", _LAUNCHER, *argv[3:]]
    return list(argv)


@dataclass
class PdbResult:
    output: str
    timed_out: bool = False
    restarted: bool = False
    """The session was (re)started for this command."""
    ended: bool = False
    """The debugger exited (``q``, or it died): it restarts at the next command."""
    wall_s: float = 0.0


@dataclass
class PdbSession:
    """The debugger of one episode (see the module docstring)."""

    argv: list[str]
    timeout_s: float = 10.0
    max_output: int = 3000
    breakpoints: dict[int, str] = field(default_factory=dict)
    """pdb's breakpoint number -> ``file:line``, of the live session."""
    locations: list[str] = field(default_factory=list)
    """Every breakpoint the agent has set and not cleared, in order: set again at each restart."""
    live: bool = False
    restarts: int = 0

    def stale(self) -> None:
        """The session is gone or must restart (a file changed, another tool ran a process)."""
        self.live = False

    def _start(self, ws: Workspace) -> tuple[str, float]:
        first = ws.pty_start(launched(self.argv), PROMPT, timeout=self.timeout_s, max_output=self.max_output)
        wall = first.wall_s
        if not first.alive:
            raise WorkspaceError(f"the debugger did not start: {first.output[-500:]}")
        self.live, self.breakpoints = True, {}
        self.restarts += 1
        notes = []
        for location in list(self.locations):
            out = ws.pty_send(f"b {location}", PROMPT, timeout=self.timeout_s, max_output=self.max_output)
            wall += out.wall_s
            match = _SET.search(out.output)
            if match:
                self.breakpoints[int(match.group(1))] = location
            else:  # the line moved away under an edit: tell the agent, forget it
                self.locations.remove(location)
                notes.append(f"breakpoint {location} could not be set again: {out.output.strip()[:200]}")
        return "\n".join(notes), wall

    def send(self, ws: Workspace, command: str) -> PdbResult:
        """Run one pdb ``command`` (its first line) and return what pdb printed."""
        # its first line as the terminal reads it (\n, \r): a U+2028 or form feed in a string is
        # part of the command, not the end of it
        command = python_lines(command.strip())[0].strip() if command.strip() else ""
        word = command.split(maxsplit=1)[0] if command else ""
        if word in REFUSED:
            return PdbResult(REFUSED[word])
        restarted, note, wall = False, "", 0.0
        if not self.live:
            note, wall = self._start(ws)
            restarted = True
        try:
            out = ws.pty_send(command, PROMPT, timeout=self.timeout_s, max_output=self.max_output)
        except WorkspaceError:  # the session ended under us (a run elsewhere): once more, fresh
            note, wall = self._start(ws)
            restarted = True
            out = ws.pty_send(command, PROMPT, timeout=self.timeout_s, max_output=self.max_output)
        wall += out.wall_s
        text = out.output
        if out.alive and text.rstrip().endswith("Clear all breaks?"):
            confirm = ws.pty_send("y", PROMPT, timeout=self.timeout_s, max_output=self.max_output)
            text, wall = text + " y\n" + confirm.output, wall + confirm.wall_s
            self.breakpoints, self.locations = {}, []
        kept = self._track(word, text)
        if not out.alive:
            self.live = False
        text = re.sub(r"\(Pdb\) $", "", text).rstrip()
        if note:
            text = f"[{note}]\n{text}"
        if kept:
            text = f"{text}\n{kept}"
        return PdbResult(text, out.timed_out, restarted, not out.alive, wall)

    def _track(self, word: str, output: str) -> str:
        """Follow the breakpoints a command set or deleted; returns a note for the agent (``""``).

        One ``b`` sets one breakpoint, reported last: ``b EXPR`` evaluates EXPR first, and what
        that prints is the agent's (``b print("Breakpoint 1 at f.py:3\\n" * 100)``), so only the
        last report counts, and at most :data:`MAX_BREAKPOINTS` are kept (each at most
        :data:`MAX_LOCATION_CHARS` long)."""
        note = ""
        if word in ("b", "break", "tbreak"):
            for num, path, line in _SET.findall(output)[-1:]:
                location = f"{path.removeprefix(Workspace.REPO + '/')}:{line}"
                self.breakpoints[int(num)] = location
                if word != "tbreak" and location not in self.locations:
                    if len(location) > MAX_LOCATION_CHARS:
                        note = (
                            "[this breakpoint is set now but not kept: its path is over "
                            f"{MAX_LOCATION_CHARS} characters]"
                        )
                    elif len(self.locations) < MAX_BREAKPOINTS:
                        self.locations.append(location)
                    else:
                        note = (
                            f"[breakpoint {location} is set now but not kept: {MAX_BREAKPOINTS} breakpoints "
                            "are set again after a restart at most; clear some you no longer need]"
                        )
        for num in _DELETED.findall(output):
            location = self.breakpoints.pop(int(num), None)
            if location in self.locations:
                self.locations.remove(location)
        return note
