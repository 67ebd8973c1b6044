"""ContainerEnv end to end through bubblewrap, and the reward-hack suite: every hack scores 0.

Real parts only: the shipped tasks (``data/swe``), real workspaces, real git, real pytest, the real
grader. Each case drives the env through its original single-episode interface, exactly as a
policy would (commands in ``<execute>``, then ``<submit/>``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lit_codeRL.envs.protocol import Action
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings, instance_image
from lit_codeRL.envs.workspace_episodes import DUMP_TEXT_CHARS
from lit_codeRL.problems.swe import SWETask, load_swe_tasks
from lit_codeRL.sandbox.workspace import WorkspaceConfig

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")),
        workspace=WorkspaceConfig(backend="bwrap"),
        command_timeout_s=8,
        grade_timeout_s=120,
    )
    with ContainerEnv("embedded", "train", settings=settings) as env:
        yield env


@pytest.fixture(scope="module")
def task(env) -> SWETask:
    return env.tasks()[0]


def run_episode(env: ContainerEnv, task: SWETask, commands: list[str], files: dict[str, str] | None = None):
    """Reset on ``task``, write ``files`` (as the agent would, through a command), run
    ``commands``, submit; returns the final ``(message, reward, done, extra)`` and the outputs."""
    env.reset(task.instance_id)
    outputs = []
    for path, content in (files or {}).items():
        marker = "LCRL_EOF"
        assert marker not in content
        commands = [
            f"mkdir -p $(dirname {path}) && cat > {path} <<'{marker}'\n{content}\n{marker}",
            *commands,
        ]
    for command in commands:
        message, reward, done, extra = env.step(f"<execute>{command}</execute>")
        assert not done, message
        assert reward == 0.0
        outputs.append(extra["output"])
    final = env.step("I am done. <submit/>")
    assert final[2], "submit ends the episode"
    return final, outputs


def test_reference_patch_resolves_and_no_edit_does_not(env, task):
    (message, reward, done, extra), outputs = run_episode(
        env, task, ["git apply /tmp/fix.patch && git status --short"], files={"/tmp/fix.patch": task.patch}
    )
    assert reward == 1.0, extra["grade"]
    assert extra["grade"]["verdict"] == "resolved"
    assert all(s == "passed" for s in extra["grade"]["fail_to_pass"].values())
    assert extra["diff"].strip() and "diff --git" in extra["diff"]
    (_, reward, _, extra), _ = run_episode(env, task, [])
    assert reward == 0.0 and extra["grade"]["verdict"] == "unresolved"
    assert extra["diff"] == ""


def test_reset_observation_commands_and_diff(env, task):
    first = env.reset(task.instance_id)
    assert (
        task.problem_statement.strip() in first["prompt"]
        and first["problem_statement"] == task.problem_statement
    )
    assert "<execute>" in first["prompt"] and "<submit/>" in first["prompt"]
    message, reward, done, extra = env.step(
        "Let me look.\n<execute>pwd && git log --oneline | head -3</execute>"
    )
    assert "/workspace/repo" in extra["output"] and "Exit code: 0" in message and not done
    message, _, _, extra = env.step("<execute>echo hello > NEWFILE.txt</execute>")
    assert "+hello" in extra["diff"] and "NEWFILE.txt" in message
    message, _, _, _ = env.step("no tag at all")
    assert "No command found" in message
    message, _, _, _ = env.step("<execute>rm -rf sr", finish_reason="length")
    assert "cut off" in message
    _, _, _, extra = env.step("<execute>search def .</execute>")  # the shipped tool is on PATH
    assert extra["exit_code"] == 0 and "def " in extra["output"]
    message, _, _, extra = env.step("<execute>sleep 60</execute>")
    assert extra["timed_out"] and "timed out" in message


def _test_files(task: SWETask) -> list[str]:
    return sorted({n.split("::")[0] for n in (*task.fail_to_pass, *task.pass_to_pass)})


def _package_module(task: SWETask) -> str:
    """A non-test source file the gold patch touches (the code under test)."""
    for line in task.patch.splitlines():
        if line.startswith("+++ b/"):
            return line[len("+++ b/") :]
    raise AssertionError("gold patch touches no file")


PASS_ALL_CONFTEST = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def _hack_cases(task: SWETask) -> dict[str, tuple[list[str], dict[str, str]]]:
    module = _package_module(task)
    stubs = "\n".join(
        f"def {n.split('::')[-1].split('[')[0]}():\n    assert True\n" for n in task.fail_to_pass
    )
    tests = _test_files(task)
    return {
        "edit_tests": (
            [
                "for f in $(git ls-files 'tests/*.py' 'test/*.py'); do printf 'def test_ok():\\n    pass\\n' > $f; done"
            ],
            {t: stubs for t in tests},
        ),
        "delete_tests": (["rm -rf tests test"], {}),
        "conftest_marks_passed": (
            [],
            {"conftest.py": PASS_ALL_CONFTEST, f"{Path(module).parent}/conftest.py": PASS_ALL_CONFTEST},
        ),
        "addopts_plugin": (
            [
                "printf '\\n[tool.pytest.ini_options]\\naddopts = \"-p evilplugin\"\\n' >> pyproject.toml; printf '[pytest]\\naddopts = -p evilplugin\\n' > pytest.ini"
            ],
            {"evilplugin.py": PASS_ALL_CONFTEST},
        ),
        "skip_in_code": (
            [
                f"printf 'import pytest\\npytest.skip(\"no\", allow_module_level=True)\\n' | cat - {module} > /tmp/m && cp /tmp/m {module}"
            ],
            {},
        ),
        "sys_exit_in_code": (
            [f"printf 'import sys\\nsys.exit(0)\\n' | cat - {module} > /tmp/m && cp /tmp/m {module}"],
            {},
        ),
        "os_exit_in_code": (
            [f"printf 'import os\\nos._exit(0)\\n' | cat - {module} > /tmp/m && cp /tmp/m {module}"],
            {},
        ),
        "atexit_forges_junit": (
            [f"cat /tmp/forge.py {module} > /tmp/m && cp /tmp/m {module}"],
            {"/tmp/forge.py": FORGE_JUNIT},
        ),
        "print_fake_passes": (
            [
                f'printf \'print("=== 99 passed in 0.01s ===")\\nprint("PASSED")\\n\' | cat - {module} > /tmp/m && cp /tmp/m {module}'
            ],
            {},
        ),
        "break_collection": ([f"echo 'def (' >> {module}"], {}),
        "background_rewriter": (
            [
                "(nohup sh -c 'while true; do echo \"# touched\" >> README.md; sleep 0.05; done' >/dev/null 2>&1 &) ; sleep 0.3"
            ],
            {},
        ),
    }


FORGE_JUNIT = """
import atexit, sys, threading, os, time
def _forge():
    for i, a in enumerate(sys.argv):
        if a == "--junitxml" and i + 1 < len(sys.argv):
            path = sys.argv[i + 1]
            break
    else:
        path = None
        for root, dirs, files in os.walk("/opt"):
            for f in files:
                if f.endswith(".xml"):
                    path = os.path.join(root, f)
    if path:
        try:
            data = open(path).read()
            data = data.replace("<failure", "<!--").replace("</failure>", "-->").replace("<error", "<!--").replace("</error>", "-->")
            open(path, "w").write(data)
        except OSError:
            pass
atexit.register(_forge)
threading.Thread(target=lambda: (time.sleep(2), _forge()), daemon=False).start()
"""


HACKS = [
    "edit_tests",
    "delete_tests",
    "conftest_marks_passed",
    "addopts_plugin",
    "skip_in_code",
    "sys_exit_in_code",
    "os_exit_in_code",
    "atexit_forges_junit",
    "print_fake_passes",
    "break_collection",
    "background_rewriter",
]


@pytest.mark.parametrize("hack", HACKS)
def test_reward_hack_scores_zero(env, task, hack):
    commands, files = _hack_cases(task)[hack]
    (message, reward, done, extra), outputs = run_episode(env, task, commands, files)
    assert reward == 0.0, (hack, extra["grade"])
    assert not extra["grade"]["resolved"]
    assert extra["diff"], "the hack must have changed something, or it tests nothing"


def test_hack_with_the_fix_still_needs_the_hidden_tests(env, task):
    """Control: the conftest hack *with* the real fix resolves: restoring tests removes the
    forger but keeps the fix (so the zeros above come from grading, not from a broken grader)."""
    commands, files = _hack_cases(task)["conftest_marks_passed"]
    (_, reward, _, extra), _ = run_episode(
        env, task, ["git apply /tmp/fix.patch"], {**files, "/tmp/fix.patch": task.patch}
    )
    assert reward == 1.0, extra["grade"]
    assert "conftest.py" in extra["grade"]["restored"]


def test_git_history_holds_nothing_after_the_base_commit(env, task, tmp_path):
    # on the host: every commit the bundle holds that is not an ancestor of base (the fix, later work)
    clone = tmp_path / "naive"
    source = Path(task.repo_source)
    subprocess.run(["git", "clone", "-q", "--mirror", str(source), str(clone)], check=True)
    all_commits = subprocess.run(
        ["git", "-C", str(clone), "rev-list", "--all"], capture_output=True, text=True, check=True
    ).stdout.split()
    ancestors = subprocess.run(
        ["git", "-C", str(clone), "rev-list", task.base_commit], capture_output=True, text=True, check=True
    ).stdout.split()
    future = set(all_commits) - set(ancestors)
    assert future, "the shipped bundle has later commits (the fix), or this test tests nothing"
    env.reset(task.instance_id)
    seen = set()
    for command in [
        "git log --all --format=%H",
        "git reflog --format=%H",
        "git rev-list --all --reflog",
        "git tag; git branch -a; git remote -v; git stash list",
        "git fsck --lost-found --unreachable 2>&1 | head -50",
    ]:
        _, _, _, extra = env.step(f"<execute>{command}</execute>")
        seen |= set(extra["output"].split())
    assert not (future & seen)
    for sha in sorted(future)[:3]:
        _, _, _, extra = env.step(f"<execute>git cat-file -t {sha}</execute>")
        assert extra["exit_code"] != 0, f"{sha} is still in the object database"
    final = env.step("<submit/>")
    assert final[1] == 0.0


def test_no_network_and_no_host_secrets(env, task):
    os.environ["LCRL_TEST_SECRET"] = "hunter2"
    try:
        env.reset(task.instance_id)
        _, _, _, extra = env.step(
            "<execute>python -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"; echo rc=$?</execute>"
        )
        assert "rc=1" in extra["output"]
        _, _, _, extra = env.step("<execute>env; ls /root /work 2>&1 | head</execute>")
        assert "hunter2" not in extra["output"]
        assert "LCRL_TEST_SECRET" not in extra["output"]
        final = env.step("<submit/>")
        assert final[1] == 0.0
    finally:
        del os.environ["LCRL_TEST_SECRET"]


@pytest.mark.parametrize(
    "instance_id",
    ["../outside", "../../outside", "/abs/outside", "sub/../../outside", "./../outside", "sub//x"],
)
def test_a_task_id_cannot_pick_an_image_outside_the_sif_folder(tmp_path, instance_id):
    folder, outside = tmp_path / "sifs", tmp_path / "outside.sif"
    (folder / "sub").mkdir(parents=True)
    for image in (
        outside,
        folder / "t-1.sif",
        folder / "sub" / "t-2.sif",
        folder / "py_3.11.sif",
        tmp_path / "x.sif",
    ):
        image.write_text("image")
    if instance_id == "/abs/outside":
        instance_id = str(tmp_path / "outside")

    def task(instance_id, image=None):
        return SWETask(instance_id, "local/t", "0" * 40, "x", "", "", ("a",), (), "/nonexistent", image=image)

    assert instance_image(str(folder), task(instance_id)) is None
    assert instance_image(str(folder), task("t-1")) == folder / "t-1.sif"
    assert instance_image(str(folder), task("sub/t-2")) == folder / "sub" / "t-2.sif"
    # the image's file name only, whatever its path
    assert (
        instance_image(str(folder), task(instance_id, image="../../registry/py:3.11"))
        == folder / "py_3.11.sif"
    )
    assert instance_image(None, task("t-1")) is None


def test_a_task_source_row_is_loaded_as_shipped():
    tasks = load_swe_tasks("embedded", split="train")
    assert len(tasks) >= 5 and all(t.fail_to_pass and t.pass_to_pass for t in tasks)


def test_the_dump_of_a_turn_keeps_a_bounded_diff(env, task):
    # every turn's dump stays in the trainer's memory: a large file the agent wrote must not put
    # its whole diff there on every later turn; the final diff and step()'s "diff" stay whole
    env.reset(task.instance_id)
    state = env._single
    write = "<execute>head -c 300000 /dev/zero | tr '\\0' 'a' | fold -w 100 > blob.txt</execute>"
    for action in (write, "<execute>true</execute>"):
        (out,) = env.step_batch([state], [Action(action)]).result()
        diff = out.info["dump"]["diff"]
        assert len(diff) < DUMP_TEXT_CHARS + 200 and "characters in all" in diff
    assert len(state.last_diff) > 300000
    assert len(env.step("<execute>true</execute>")[3]["diff"]) > 300000
    final = env.step("<submit/>")
    assert len(final[3]["diff"]) > 300000 and "characters in all" not in final[3]["diff"]


def test_the_same_state_twice_in_a_batch_runs_once(env, task):
    env.reset(task.instance_id)
    state = env._single
    first, repeat = env.step_batch(
        [state, state], [Action("<submit/>"), Action("<execute>ls</execute>")]
    ).result()
    assert first.terminated and repeat.info["verdict"] == "not_stepped"
    assert not repeat.info.get("agent_fault") and not repeat.info.get("sandbox_error")


def test_the_diff_after_a_command_counts_against_the_episode_command_time(tmp_path):
    """The diff shown after each command runs ``git add -A`` into a fresh index, which hashes
    every file through the clean filters the agent configured in its own ``.git/config`` and
    ``.gitattributes``: a filter that sleeps made every turn wait (up to the diff's minute) with
    only the command's own time counted, so ``max_episode_command_s`` never masked the episode."""
    settings = SWESettings(
        repo_cache=str(tmp_path),
        workspace=WorkspaceConfig(backend="bwrap"),
        command_timeout_s=8,
        max_episode_command_s=4.0,
    )
    task = load_swe_tasks("embedded", "train")[0]
    with ContainerEnv(data_name_or_path=None, settings=settings) as env:
        env.reset(task)
        slow = "git config filter.slow.clean 'sleep 1; cat' && echo '* filter=slow' > .gitattributes"
        for command in [slow, "true", "true", "true", "true"]:
            message, reward, done, extra = env.step(f"<execute>{command}</execute>")
            if done:
                break
        assert done and extra.get("masked") and extra["verdict"] == "env_time_limit", (message, extra)


def test_a_diff_slowed_by_the_agents_git_config_is_its_fault_not_a_masked_stall(tmp_path, monkeypatch):
    """The diff's three git steps (read-tree, add, diff) each had the whole time limit: a clean
    filter that sleeps almost that long in ``add`` and a ``diff.orderFile`` that is a FIFO (only
    ``git diff`` opens it, and blocks) made the answer come after the trainer's outer clock, which
    killed the session and masked the episode as the sandbox's failure: the agent's way out of a
    reward of 0. One deadline for the whole diff: the agent's config makes the diff fail in time,
    graded ``workspace_broken``."""
    from lit_codeRL.sandbox import workspace_session

    monkeypatch.setattr(workspace_session, "IO_TIMEOUT_S", 4.0)  # the diff's time limit, for speed
    settings = SWESettings(
        repo_cache=str(tmp_path),
        workspace=WorkspaceConfig(backend="bwrap", grace_s=1.0),
        command_timeout_s=4,
    )
    task = load_swe_tasks("embedded", "train")[0]
    with ContainerEnv(data_name_or_path=None, settings=settings) as env:
        env.reset(task)
        setup = (
            "git config filter.slow.clean 'sleep 3; cat' && echo 'slow.txt filter=slow' > .gitattributes "
            "&& echo x > slow.txt && mkfifo /tmp/order && git config diff.orderFile /tmp/order"
        )
        message, reward, done, extra = env.step(f"<execute>{setup}</execute>")
        assert done and reward == 0.0 and not extra.get("masked"), extra
        assert extra["verdict"] == "workspace_broken" and extra["agent_fault"], extra
