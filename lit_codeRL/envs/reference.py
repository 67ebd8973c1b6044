"""What the agent envs' reference trajectories share: the fix as line edits, and scripted play.

A reference trajectory (``envs/swe/reference.py``, ``envs/debug/reference.py``) is a short episode
of the way an engineer debugs, derived from a task's gold fix alone: run the tests, look at the
code around each change, make each change with a small targeted edit, run the tests again, submit.
This module holds the parts that do not depend on the env's action format:

* :func:`line_edits`: the changes between a file's text before and after the fix (difflib), as
  line-range replacements, changes a couple of lines apart merged into one, and a pure insertion
  or deletion widened by one unchanged line so that every edit replaces lines with lines;
* :func:`edit_sites`: the edits of one file grouped into the windows an engineer would look at
  (``SITE_CONTEXT`` lines around each edit, overlapping windows merged), each site's edits
  bottom-up so that the line numbers of the site's view stay valid while it is edited;
* :func:`play_scripts`: action lists played through any env's batched interface
  (``reset_batch``/``step_batch``/``finish_batch``, the one the episode runner drives), in lockstep,
  so the observations are the env's own and the grade is the env's real one (a step may be a
  function of the observation before it, :data:`Step`); :func:`play_references`
  writes each problem's script and plays them, a batch of ``parallel`` at a time;
* :func:`edit_reason`: one sentence naming what is wrong in an edit's lines and what it should be
  (the smallest span of code tokens the edit changes), for the edit's lead-in;
* :func:`ends_at_stop`: whether an action stops where a sampled one would (an action with a stop
  string inside it cannot be imitated: generation would end there);
* :func:`misquote`: a quote written wrong the ways a model misquotes from memory, for a
  trajectory that recovers from the refusal (each env's ``misquote_actions``).
"""

from __future__ import annotations

import bisect
import difflib
import hashlib
import random
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lit_codeRL.envs.protocol import Action
from lit_codeRL.envs.replacement import CLOSEST_MAX_LINES, closest_lines, found_once, occurrences
from lit_codeRL.envs.text import line_number, python_lines
from lit_codeRL.problems.record import Problem

MERGE_GAP = 2
"""Changes at most this many unchanged lines apart are one edit (the lines between rewritten)."""
SITE_CONTEXT = 3
"""Lines shown above and below the changed lines when the code is opened."""
MAX_REASON_CHARS = 60
"""A changed span longer than this is not quoted in an edit's lead-in (the edit says it all)."""
_TOKEN = re.compile(r"\*\*=?|//=?|>>=?|<<=?|[<>=!]=|->|:=|\w+|\S")


@dataclass
class ReferenceEpisode:
    """A played reference trajectory."""

    task_id: str
    prompt: str
    """The first observation (the task prompt, before the chat template)."""
    actions: list[str] = field(default_factory=list)
    """Every action played, in order (the last one ends the episode)."""
    observations: list[str] = field(default_factory=list)
    """What the env answered after each action but the last."""
    reward: float = 0.0
    resolved: bool = False
    """The grade resolved the task with the full reward (only such trajectories are kept)."""
    verdict: str = ""
    """The grade's verdict, or why the trajectory was not played (no script, invalid task)."""
    context: tuple[int, ...] = ()
    """Actions played but not imitated (BC masks them): a recovery trajectory's wrong edit."""


@dataclass(frozen=True)
class LineEdit:
    """Replace lines ``start..end`` (1-based, inclusive, numbered as in the file before the fix)
    with ``new`` (lines with their endings)."""

    start: int
    end: int
    old: tuple[str, ...]
    new: tuple[str, ...]

    @property
    def delta(self) -> int:
        """How many lines the file grows by."""
        return len(self.new) - len(self.old)


def line_edits(old: Sequence[str], new: Sequence[str]) -> list[LineEdit]:
    """The edits that turn the lines ``old`` into ``new`` (see the module docstring), top-down.

    Raises:
        ValueError: an empty file on one side (nothing to anchor an edit on).
    """
    matcher = difflib.SequenceMatcher(None, list(old), list(new), autojunk=False)
    changes = [op[1:] for op in matcher.get_opcodes() if op[0] != "equal"]
    merged: list[list[int]] = []
    for i1, i2, j1, j2 in changes:
        if merged and i1 - merged[-1][1] <= MERGE_GAP:
            merged[-1][1], merged[-1][3] = i2, j2
        else:
            merged.append([i1, i2, j1, j2])
    edits = []
    for i1, i2, j1, j2 in merged:
        if i1 == i2 or j1 == j2:  # a pure insertion or deletion: take one unchanged line with it
            if i1 > 0:
                i1, j1 = i1 - 1, j1 - 1
            elif i2 < len(old):
                i2, j2 = i2 + 1, j2 + 1
            else:
                raise ValueError("an empty file: nothing to anchor an edit on")
        edits.append(LineEdit(i1 + 1, i2, tuple(old[i1:i2]), tuple(new[j1:j2])))
    return edits


@dataclass(frozen=True)
class Site:
    """A window of a file (lines ``first..last`` before the fix) and the edits inside it,
    bottom-up."""

    first: int
    last: int
    edits: tuple[LineEdit, ...]

    @property
    def delta(self) -> int:
        return sum(e.delta for e in self.edits)


def edit_sites(edits: Sequence[LineEdit], num_lines: int) -> list[Site]:
    """``edits`` (top-down, of a file of ``num_lines`` lines) grouped into sites, top-down."""
    groups: list[tuple[int, int, list[LineEdit]]] = []
    for edit in edits:
        first = max(1, edit.start - SITE_CONTEXT)
        last = min(num_lines, max(edit.end, edit.start) + SITE_CONTEXT)
        if groups and first <= groups[-1][1] + 1:
            groups[-1] = (groups[-1][0], max(last, groups[-1][1]), [*groups[-1][2], edit])
        else:
            groups.append((first, last, [edit]))
    return [Site(first, last, tuple(reversed(group))) for first, last, group in groups]


def edit_reason(edit: LineEdit, numbered: bool = True) -> str | None:
    """What is wrong in ``edit``'s lines and what they need, in one sentence for the edit's lead-in
    (``None`` when there is no short way to say it: a change across lines, a long span, a change of
    whitespace alone, a backtick or a tag-like ``<`` in the span).

    The span is the smallest run of code tokens the edit changes (the common leading and trailing
    tokens stripped), quoted as it is written: ``In line 7, `//` should be `%`.``, ``In line 3,
    `not` should not be there.``, ``In line 4, `+ 1` is missing after `n`.``, ``After line 9, the
    line `i += 1` is missing.``. A demonstration whose edit is led by it names the bug before it
    writes the fix, so the policy imitates deciding the change and then copying the line with it,
    not copying a line and changing it in the same breath (BC without it at 135M edited the right
    line in 37% of held-out episodes but wrote the right line in 2%).

    ``numbered=False``: the sentence without its line number (```//` should be `%`.``, ``The line
    `i += 1` is missing.``), for an edit that names its place by content (``<replace>``)."""
    old, new = "".join(edit.old), "".join(edit.new)
    a, b = (
        [(m.start(), m.end()) for m in _TOKEN.finditer(old)],
        [(m.start(), m.end()) for m in _TOKEN.finditer(new)],
    )
    ta, tb = [old[i:j] for i, j in a], [new[i:j] for i, j in b]
    p = 0
    while p < min(len(ta), len(tb)) and ta[p] == tb[p]:
        p += 1
    s = 0
    while s < min(len(ta), len(tb)) - p and ta[-1 - s] == tb[-1 - s]:
        s += 1
    wrong = old[a[p][0] : a[len(ta) - s - 1][1]] if p < len(ta) - s else ""
    right = new[b[p][0] : b[len(tb) - s - 1][1]] if p < len(tb) - s else ""
    if not wrong and not right:
        return None
    for span in (wrong, right):
        if "\n" in span or "`" in span or len(span) > MAX_REASON_CHARS or re.search(r"<[/A-Za-z]", span):
            return None
    if wrong:
        where = f"In line {edit.start - 1 + line_number(old, a[p][0])}, " if numbered else ""
        if not right:
            return f"{where}`{wrong}` should not be there."
        return f"{where}`{wrong}` should be `{right}`."
    if p == 0:  # an insertion before the edit's first token
        return None
    line = edit.start - 1 + line_number(old, a[p - 1][0])
    if "\n" in new[b[p - 1][1] : b[p][0]]:  # the inserted tokens start a line of their own
        return (
            f"After line {line}, the line `{right}` is missing."
            if numbered
            else f"The line `{right}` is missing."
        )
    where = f"In line {line}, " if numbered else ""
    return f"{where}`{right}` is missing after `{ta[p - 1]}`."


def reason_lead(edit: LineEdit, explain: bool, numbered: bool = True) -> str:
    """The start of an edit's lead-in: :func:`edit_reason` and a space with ``explain`` (where
    there is a short way to say it), else nothing."""
    reason = edit_reason(edit, numbered) if explain else None
    return f"{reason} " if reason else ""


MAX_QUOTE_LINES = 3
"""Lines a replacement's quoted text may grow to above and below the changed lines to be unique."""


def text_replacement(text: str, edit: LineEdit) -> tuple[str, str] | None:
    """``edit`` (lines of ``text``) as a replacement of text by text: ``(old, new)`` where ``old``
    occurs exactly once in ``text`` and replacing it with ``new`` makes the edit; ``None`` when
    no such quote is short enough (the changed lines and ``MAX_QUOTE_LINES`` more each way).

    ``old`` is the changed lines as an engineer would quote them: from the first changed line's
    first non-blank character (its start, when the change touches its indentation) to the last
    changed line's last non-blank one, grown by whole lines above and below until it is found
    only once. A policy that imitates it names where to edit by copying what is there, never by
    counting lines: BC at 135M named the right change but on a wrong line in 33 of 56 held-out
    episodes where it named the right change (the H200 run of ``scripts/agent_recipe.py``)."""
    lines = python_lines(text, keepends=True)
    if not (1 <= edit.start <= edit.end <= len(lines)) or tuple(lines[edit.start - 1 : edit.end]) != edit.old:
        return None
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    after = "".join(lines[: edit.start - 1]) + "".join(edit.new) + "".join(lines[edit.end :])
    p = 0  # the changed characters: text[p:e_old] becomes after[p:e_new]
    while p < min(len(text), len(after)) and text[p] == after[p]:
        p += 1
    s = 0
    while s < min(len(text), len(after)) - p and text[-1 - s] == after[-1 - s]:
        s += 1
    e_old, delta = len(text) - s, len(after) - len(text)
    if p == e_old == len(after) - s:
        return None  # the edit changes nothing

    def line_of(at: int) -> int:  # 0-based index of the line holding character ``at``
        return min(len(lines) - 1, bisect.bisect_right(starts, at) - 1)

    first, last = line_of(p), line_of(max(p, e_old - 1))
    for grow in range(2 * MAX_QUOTE_LINES + 1):
        lo, hi = max(0, first - (grow + 1) // 2), min(len(lines) - 1, last + grow // 2)
        content_start = starts[lo] + len(lines[lo]) - len(lines[lo].lstrip())
        content_end = starts[hi] + len(lines[hi].rstrip())
        a = content_start if content_start <= p else starts[lo]  # a change in the indentation: all of it
        b = content_end if content_end >= e_old else starts[hi + 1]
        old = text[a:b]
        if found_once(text, old):
            return old, after[a : b + delta]
    return None


_IDENTIFIER = re.compile(r"[A-Za-z_]\w{3,}")
_OPERATOR = re.compile(r"(?<=[\w)\]])(==|!=|<=|>=|//|\*\*|[-+*/%<>=])(?=[\w(\[])")


def _misquotes_of_line(line: str) -> list[str]:
    """``line`` written the ways a quote from memory goes wrong (each kind at most once; the
    indentation kept unless it is the kind): the spaces around its punctuation dropped, spaces put
    around its operators or after its commas, a letter of its longest name lost, its quote marks
    swapped, its indentation changed."""
    body = line.lstrip()
    indent = line[: len(line) - len(body)]
    names = _IDENTIFIER.findall(body)
    kinds = [
        indent + re.sub(r" *([^\w\s]) *", r"\1", body),
        indent + _OPERATOR.sub(r" \1 ", body),
        indent + re.sub(r",(?=\S)", ", ", body),
        indent + body.translate(str.maketrans("'\"", "\"'")),
        "    " + line if body else line,
    ]
    if names:
        name = max(names, key=len)
        kinds.append(indent + body.replace(name, name[: len(name) // 2] + name[len(name) // 2 + 1 :], 1))
    return [k for k in dict.fromkeys(kinds) if k != line]


def misquote(text: str, quote: str, seed: str) -> str | None:
    """``quote`` (found once in ``text``) with one of its lines written wrong the ways a model
    misquotes from memory (:func:`_misquotes_of_line`), chosen in an order seeded by ``seed``:
    the first one ``text`` does not hold whose closest lines (``closest_lines``, what the tools'
    refusal shows) are the quote's own, so the trajectory's next action can quote them as shown;
    ``None`` when there is none, or the quote is longer than the refusal shows.

    BC on fixes alone never sees a refused quote: an agent that misquotes (36 of 81 ``replace``
    commands in the SWE env, 20 of 38 refused ``<replace>`` calls in the debugging gym, on the
    H200 run of ``scripts/agent_recipe.py``) had never seen the quote made again from the hint."""
    at = text.find(quote)
    lines = quote.split("\n")
    if at < 0 or not quote.strip() or len(python_lines(quote.strip("\n"))) > CLOSEST_MAX_LINES:
        return None
    first = line_number(text, at)
    rng = random.Random(hashlib.sha256(f"{seed}:misquote".encode()).hexdigest())
    order = [k for k, line in enumerate(lines) if line.strip()]
    rng.shuffle(order)
    for k in order:
        variants = _misquotes_of_line(lines[k])
        rng.shuffle(variants)
        for variant in variants:
            wrong = "\n".join([*lines[:k], variant, *lines[k + 1 :]])
            if occurrences(text, wrong, 1):
                continue
            shown = len(python_lines(wrong.strip("\n")))
            if closest_lines(text, wrong) == (first, python_lines(text)[first - 1 : first - 1 + shown]):
                return wrong
    return None


def wants_recovery(task_id: str, fraction: float) -> bool:
    """Whether ``task_id`` is among the ``fraction`` of tasks that also get a trajectory of some
    kind (a recovery; a misquote, whose ``task_id`` carries a suffix, so another hash chooses it),
    by a hash of the id: the same tasks in every run and on every rank."""
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) < fraction * 16**8


def ends_at_stop(action: str, stop_strings: Sequence[str]) -> bool:
    """Whether the first stop string in ``action`` ends exactly where the action ends."""
    ends = [action.find(s) + len(s) for s in stop_strings if s in action]
    return bool(ends) and min(ends) == len(action)


def imitable(actions: Sequence[str], stop_strings: Sequence[str]) -> None:
    """Raise ``ValueError`` unless a sampled action would end exactly where each of ``actions``
    does: at its stop string, or (the last one only) at end-of-turn with no stop string in it."""
    for k, action in enumerate(actions):
        last = k == len(actions) - 1
        if ends_at_stop(action, stop_strings) or (last and not any(s in action for s in stop_strings)):
            continue
        raise ValueError(f"action {k + 1} holds a stop string before its end: generation would stop there")


Step = str | Callable[[str], list[str]]
"""A reference action, or a function of the env's last observation that writes the next actions
(the SWE trajectory's first look at the code follows the file the tests' traceback names). Such a
function must not raise: where the observation does not say, it writes what it would otherwise."""


def play_scripts(
    env: Any, problems: Sequence[Problem], scripts: Sequence[Sequence[Step]]
) -> list[ReferenceEpisode]:
    """Play ``scripts[i]`` on ``problems[i]`` through ``env``'s batched interface, all episodes in
    lockstep (the env runs a batch's steps in parallel), as the episode runner would: each action
    is stepped until the env ends the episode; then ``finish_batch`` releases what is left. A step
    that is a function is called with the observation before it and its actions take its place.
    The reward is the sum of the steps' rewards (the env's grade of ``<submit/>``)."""
    starts = env.reset_batch(list(problems))
    episodes = [ReferenceEpisode(p.task_id, s.observation) for p, s in zip(problems, starts, strict=True)]
    pending = [list(script) for script in scripts]
    last = [s.observation for s in starts]
    done = [False] * len(problems)
    infos: list[dict[str, Any]] = [{} for _ in problems]
    while True:
        for i, steps in enumerate(pending):
            while not done[i] and steps and not isinstance(steps[0], str):
                steps[:1] = steps[0](last[i])
        live = [i for i, steps in enumerate(pending) if not done[i] and steps]
        if not live:
            break
        texts = [str(pending[i].pop(0)) for i in live]
        results = env.step_batch([starts[i].state for i in live], [Action(t) for t in texts]).result()
        for i, text, result in zip(live, texts, results, strict=True):
            episode = episodes[i]
            episode.actions.append(text)
            episode.reward += float(result.reward)
            infos[i] = dict(result.info)
            done[i] = bool(result.terminated or result.truncated)
            last[i] = result.observation
            if not done[i] and pending[i]:
                episode.observations.append(result.observation)
    finish = getattr(env, "finish_batch", None)
    if finish is not None:  # closes what is still open (an episode whose script did not submit)
        finish([s.state for s in starts], [False] * len(starts))
    for episode, info, ended in zip(episodes, infos, done, strict=True):
        episode.verdict = str(info.get("verdict", "not_submitted" if not ended else ""))
        episode.resolved = ended and bool(info.get("resolved")) and episode.reward >= 1.0
    return episodes


def play_references(
    env: Any, problems: Sequence[Problem], script_of: Callable[[Problem], list[Step]], parallel: int
) -> list[ReferenceEpisode]:
    """Every problem's reference trajectory (``script_of(problem)``, written ``parallel`` at a
    time: it may prepare the task's repository) played in ``env``, ``parallel`` episodes at a time
    (each episode holds a workspace until it ends). A problem whose script cannot be written (its
    ``script_of`` raises: no fix, an action the env would not read back as written, a task that
    cannot be prepared) gets an unplayed, unresolved episode whose ``verdict`` says why."""

    def write(problem: Problem) -> list[Step] | str:
        try:
            return script_of(problem)
        except Exception as err:  # noqa: BLE001 - one task without a trajectory does not stop the rest
            return f"no trajectory: {type(err).__name__}: {err}"

    with ThreadPoolExecutor(parallel, thread_name_prefix="reference") as pool:
        scripts = list(pool.map(write, problems))
    episodes = [
        ReferenceEpisode(p.task_id, "", verdict=s) if isinstance(s, str) else None
        for p, s in zip(problems, scripts, strict=True)
    ]
    playable = [i for i, s in enumerate(scripts) if not isinstance(s, str)]
    for at in range(0, len(playable), parallel):
        chunk = playable[at : at + parallel]
        played = play_scripts(env, [problems[i] for i in chunk], [scripts[i] for i in chunk])
        for i, episode in zip(chunk, played, strict=True):
            episodes[i] = episode
    return [e for e in episodes if e is not None]


MISQUOTED = "That text is not in the file. "
"""The lead-in of the change a misquote trajectory makes after the tool refused its quote."""


def play_misquotes(
    env: Any,
    problems: Sequence[Problem],
    fraction: float,
    script_of: Callable[[Problem], tuple[list[Step], str]],
    parallel: int,
) -> dict[str, ReferenceEpisode]:
    """The misquote trajectories of the ``fraction`` of ``problems`` :func:`wants_recovery` picks
    (by the id with ``:misquote``), by task id: ``script_of(problem)`` writes the steps and the
    misquoted action (each env's ``misquote_actions``), played as :func:`play_references` plays.
    The misquoted action is context (BC masks it); a trajectory whose refusal of it shows no closest
    lines is unresolved (its next quote would come from nowhere), and an unresolved one's verdict
    starts with ``misquote:``."""
    chosen = [p for p in problems if wants_recovery(f"{p.task_id}:misquote", fraction)]
    misquoted: dict[str, str] = {}

    def script(problem: Problem) -> list[Step]:
        steps, misquoted[problem.task_id] = script_of(problem)
        return steps

    played = {}
    for episode in play_references(env, chosen, script, parallel) if chosen else []:
        wrong = misquoted.get(episode.task_id)
        if wrong is not None and wrong in episode.actions:  # the SWE first look may add a grep
            at = episode.actions.index(wrong)
            episode.context = (at,)
            seen = episode.observations[at] if len(episode.observations) > at else ""
            if "closest text is at" not in seen:
                episode.resolved = False
                episode.verdict = "its misquote was not answered with the closest lines"
        if not episode.resolved:
            episode.verdict = f"misquote: {episode.verdict}"
        played[episode.task_id] = episode
    return played
