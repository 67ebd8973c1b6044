"""``env.name: harness`` through the real sandbox, the real gateway and the real grader: an agent
program calls the policy over HTTP from inside the workspace, its diff is graded like the SWE
env's, and its training rows hold exactly the ids the gateway served (issue #51).

Classes: the scripted agent solving and failing (rows equal to what the client received, a
rewritten history as a second row); the sandbox's guarantees for the agent program (no address
but the gateway, no host secrets, nothing left running, its clock); the SWE env's reward-hack
cases played by an agent program (each scores 0); an agent that never calls the model.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import shutil
import socket
import subprocess
import threading
import time

import pytest
import torch

from lit_codeRL.envs.harness.env import AGENTS_DIR, HarnessEnv, HarnessSettings
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.gateway.records import CallRecord
from lit_codeRL.gateway.server import EpisodeLog
from lit_codeRL.policy.engine import EngineSettings, SamplingParams, make_engine
from lit_codeRL.policy.loading import ModelSettings, load_model
from lit_codeRL.rollout.dataset import episode_batch
from lit_codeRL.rollout.harness import HarnessRunner
from lit_codeRL.rollout.prompts import ProblemSettings, load_problem_set
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.envs.test_agent_hacks import SWE_CASES, module_under_test, swe_cases
from tests.sandbox.conftest import require_bwrap

AGENT = "python3 /opt/lcrl-agent/simple_agent.py --task {task_file} --base-url {base_url} --api-key {api_key}"


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    model, tokenizer = load_model(ModelSettings(name_or_path="tiny-random"))
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def problem():
    require_bwrap()
    return load_problem_set(ProblemSettings(source="swe", split="train"))[0]


@pytest.fixture(scope="module")
def swe_settings(tmp_path_factory):
    return SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")),
        workspace=WorkspaceConfig(backend="bwrap", disk_mb=96),
        grade_timeout_s=120,
    )


@pytest.fixture
def agent_dir(tmp_path, problem):
    """The shipped agents plus the task's gold patch (a "solver" a command may apply)."""
    d = tmp_path / "agent"
    shutil.copytree(AGENTS_DIR, d)
    (d / "fix.patch").write_text(problem.metadata["swe_task"].patch)
    return d


def run_harness(policy, swe_settings, problems, n, command, agent_dir=None, **settings):
    model, tokenizer = policy
    env = HarnessEnv(
        HarnessSettings(
            command=command,
            agent_dir=str(agent_dir) if agent_dir else None,
            swe=swe_settings,
            max_log_chars=200_000,
            **{"timeout_s": 120, **settings},
        )
    )
    engine = make_engine(EngineSettings(dtype="model"), tokenizer, model)
    runner = HarnessRunner(engine, env, SamplingParams(max_new_tokens=16, temperature=1.0))
    try:
        return runner.run(problems, n, torch.Generator().manual_seed(0))
    finally:
        runner.close()


def client_ids(log: str) -> list[dict]:
    return [json.loads(line[len("ids: ") :]) for line in log.splitlines() if line.startswith("ids: ")]


def test_scripted_agent_solves_and_fails_with_rows_equal_to_the_served_ids(
    policy, swe_settings, problem, agent_dir
):
    command = (
        AGENT + " --max-steps 3 --rewrite-after 2 --log-ids; "
        "if [ {sample} = 0 ]; then git apply /opt/lcrl-agent/fix.patch; fi"
    )
    episodes = run_harness(policy, swe_settings, [problem], 2, command, agent_dir)
    solved, failed = (e.record() for e in episodes)
    assert (solved["verdict"], solved["reward"]) == ("passed", 1.0), solved["grade"]
    assert (failed["verdict"], failed["reward"]) == ("unresolved", 0.0), failed["grade"]
    assert solved["grade"]["verdict"] == "resolved" and failed["grade"]["verdict"] == "unresolved"
    batch = episode_batch(episodes, policy[1].pad_token_id)
    assert batch.batch_size == 4  # two rows per episode: calls 1-2 merged, call 3 after the rewrite
    assert batch.episode_ids.tolist() == [0, 0, 1, 1] and batch.rewards.tolist() == [1.0, 1.0, 0.0, 0.0]
    for e, record in zip(episodes, (solved, failed), strict=True):
        assert record["gateway"] == {
            "calls": 3, "rows": 2, "merged_calls": 1, "rewritten_calls": 1, "dropped_choices": 0,
            "requests": 3, "errors": 0, "replayed_retries": 0,
        }  # fmt: skip
        seen = client_ids(record["agent_log"])  # what the agent program received over HTTP
        assert len(seen) == 3
        # row 1: the first prompt, then the two sampled completions with the observation between
        row1 = record["input_ids"]
        (a0, b0), (a1, b1) = record["trainable_spans"]
        assert row1[:a0] == seen[0]["prompt"]
        assert row1[a0:b0] == seen[0]["completion"] and row1[a1:b1] == seen[1]["completion"]
        assert row1[:a1] == seen[1]["prompt"]  # the second prompt is the row's context, token for token
        # row 2: the rewritten history's prompt and its completion
        (extra,) = e.extra_rows
        assert extra[0].ids == seen[2]["prompt"] and extra[1].ids == seen[2]["completion"]
        assert extra[1].trainable and not extra[0].trainable
        # trainable tokens in the batch are exactly the served completions, log-probs included
        served = [i for s in seen for i in s["completion"]]
        rows = [r for r in range(4) if batch.episode_ids[r] == episodes.index(e)]
        trained = [int(t) for r in rows for t in batch.input_ids[r][batch.trainable_mask[r].bool()]]
        assert trained == served


def test_agent_program_reaches_only_the_gateway_and_leaves_nothing(
    policy, swe_settings, problem, tmp_path, monkeypatch, agent_dir
):
    """The agent cannot reach a host port or an outside address, sees no host variable and no
    host file, and what it left running is gone after the episode; its clock is enforced."""
    monkeypatch.setenv("LCRL_HOST_SECRET", "hunter2-host-secret")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("hunter2-file")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(listener.accept())
        except OSError:  # the listener closed at the end of the test: nothing connected
            pass

    threading.Thread(target=accept, daemon=True).start()
    probe = agent_dir / "probe.py"
    probe.write_text(
        f"""import os, socket, urllib.request, json
out = {{}}
for host, p in (("127.0.0.1", {port}), ("10.0.0.1", 80), ("1.1.1.1", 443)):
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((host, p)); out[host] = "connected"
    except OSError as e:
        out[host] = "refused"
out["env"] = "hunter2" in json.dumps(dict(os.environ))
try:
    out["file"] = open({str(secret)!r}).read()
except OSError:
    out["file"] = "unreadable"
r = urllib.request.urlopen(urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/models", headers={{"Authorization": "Bearer x"}}), timeout=30)
out["gateway"] = json.loads(r.read())["data"][0]["id"]
print("probe: " + json.dumps(out))
"""
    )
    command = "python3 /opt/lcrl-agent/probe.py; (setsid sleep 98765 &); nohup sleep 98766 >/dev/null 2>&1 &"
    try:
        (episode,) = run_harness(policy, swe_settings, [problem], 1, command, agent_dir)
    finally:
        listener.close()
    record = episode.record()
    line = next(x for x in record["agent_log"].splitlines() if x.startswith("probe: "))
    out = json.loads(line[len("probe: ") :])
    assert out == {
        "127.0.0.1": "refused",
        "10.0.0.1": "refused",
        "1.1.1.1": "refused",
        "env": False,
        "file": "unreadable",
        "gateway": "policy",
    }
    assert not accepted
    left = subprocess.run(["pgrep", "-f", "sleep 9876[56]"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the agent's processes outlived its episode"
    assert record["verdict"] == "unresolved" and record["gateway"]["calls"] == 0


def test_agent_wall_clock_kills_it_and_grades_the_diff(policy, swe_settings, problem, agent_dir):
    command = "git apply /opt/lcrl-agent/fix.patch; sleep 60"
    (episode,) = run_harness(policy, swe_settings, [problem], 1, command, agent_dir, timeout_s=4)
    record = episode.record()
    assert record["agent_timed_out"] and episode.truncated and record["end_reason"] == "agent_timeout"
    assert record["reward"] == 1.0  # graded as it stands, as the SWE env's auto-submit
    assert record["agent_s"] < 30


def test_reward_hacks_score_zero_through_the_harness(policy, swe_settings, problem, agent_dir):
    """Every reward-hack case of the SWE env (shadowing, plugins, in-process report patching, junit
    rewriting, the results flood), run by an agent program, alone and beside the real fix."""
    task = problem.metadata["swe_task"]
    assert module_under_test(task)
    cases = swe_cases(task)
    scripts = []
    for name in SWE_CASES:
        commands, verdict = cases[name]
        for with_fix in (False, True):
            body = "\n".join(commands) + ("\ngit apply /opt/lcrl-agent/fix.patch\n" if with_fix else "\n")
            (agent_dir / f"case_{len(scripts)}.sh").write_text(body)
            scripts.append((name, with_fix, verdict))
    episodes = run_harness(
        policy, swe_settings, [problem], len(scripts), "bash /opt/lcrl-agent/case_{sample}.sh", agent_dir
    )
    for (name, with_fix, verdict), episode in zip(scripts, episodes, strict=True):
        record = episode.record()
        assert record["reward"] == 0.0 and record["grade"]["verdict"] == verdict, (
            name,
            with_fix,
            record["grade"],
        )


OPEN_FILES = """import errno, json, os, resource
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    failure = errno.errorcode[e.errno]
print("nofile: " + json.dumps({"opened": len(fds), "error": failure,
                               "limit": resource.getrlimit(resource.RLIMIT_NOFILE)}))
"""


def test_agent_program_gets_the_workspace_open_file_limit(policy, swe_settings, problem, agent_dir):
    """An agent program that opens files without end fails with EMFILE at the workspace's
    ``max_open_files`` (soft and hard: it cannot raise it back), not at the trainer's limit, and
    its episode goes on: the fix it applies afterwards is graded."""
    limit = 64
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 4 * limit  # the trainer's is not the bound
    workspace = dataclasses.replace(swe_settings.workspace, max_open_files=limit)
    settings = dataclasses.replace(swe_settings, workspace=workspace)
    (agent_dir / "open_files.py").write_text(OPEN_FILES)
    command = "python3 /opt/lcrl-agent/open_files.py; git apply /opt/lcrl-agent/fix.patch"
    (episode,) = run_harness(policy, settings, [problem], 1, command, agent_dir)
    record = episode.record()
    line = next(x for x in record["agent_log"].splitlines() if x.startswith("nofile: "))
    out = json.loads(line[len("nofile: ") :])
    assert out["error"] == "EMFILE" and out["limit"] == [limit, limit], out
    assert limit - 8 <= out["opened"] <= limit - 3, out  # stdin, stdout and stderr were open already
    assert episode.valid and (record["verdict"], record["reward"]) == ("passed", 1.0), record["grade"]


def test_agent_that_never_calls_the_model_is_graded_without_tokens(policy, swe_settings, problem):
    (episode,) = run_harness(policy, swe_settings, [problem], 1, "true")
    batch = episode_batch([episode], policy[1].pad_token_id)
    assert batch.num_trainable_tokens == 0 and episode.record()["verdict"] == "unresolved"
    assert episode.valid


def test_debugging_tasks_run_through_the_harness_too(policy, swe_settings, tmp_path, monkeypatch):
    """A shipped debugging task: its starting files are the workspace, its tests grade the diff."""
    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-cache"))
    problem = load_problem_set(ProblemSettings(source="debug", split="train"))[0]
    env = HarnessEnv(HarnessSettings(swe=swe_settings))
    task = env.task_of(problem)
    agent = tmp_path / "agent"
    shutil.copytree(AGENTS_DIR, agent)
    (agent / "fix.patch").write_text(task.patch)
    command = AGENT + " --max-steps 1; if [ {sample} = 0 ]; then git apply /opt/lcrl-agent/fix.patch; fi"
    solved, failed = (e.record() for e in run_harness(policy, swe_settings, [problem], 2, command, agent))
    assert (solved["reward"], failed["reward"]) == (1.0, 0.0), (solved["grade"], failed["grade"])
    assert solved["gateway"]["calls"] == failed["gateway"]["calls"] == 1


# -- hostile traffic through the relay -----------------------------------------------------------

VICTIM = AGENT + " --max-steps 3 --log-ids"

MALFORMED = r"""import json, socket
chat = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
full = head + b"Content-Length: %d\r\n\r\n" % len(chat) + chat
attacks = [
    full[:-3],  # a body cut short, then a half-close
    head + b"Transfer-Encoding: chunked\r\n\r\nzzzz\r\nabc\r\n0\r\n\r\n",  # a bad chunk size
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 100000 + b"\r\n\r\n",  # a huge header
    b"GET /v1/models HTTP/1.1\r\n" + b"\xff\xfe: \x00\r\n" * 3 + b"\r\n",  # non-UTF-8 header bytes
]
for i in range(200):
    s = socket.create_connection(("127.0.0.1", 8000), timeout=10)
    try:
        # the first: a whole request, then a half-close before reading the reply (answered)
        s.sendall(full if i == 0 else attacks[i % len(attacks)])
        s.shutdown(socket.SHUT_WR)
        s.recv(100)
    except OSError:
        pass
    s.close()
print("malformed: done")
"""


def test_malformed_traffic_through_the_relay_leaves_the_trainer_log_bounded(
    policy, swe_settings, problem, agent_dir, caplog
):
    """200 malformed or abandoned requests (cut short, bad chunking, a huge or non-UTF-8 header,
    each half-closed) through the relay: the trainer's log gets one line a second at most, never
    a traceback per request (before: aiohttp logged "Error handling request" with a traceback for
    each one, ~1.7 kB a request, so an agent could write hundreds of MB into the trainer's log
    within its wall clock), and the other sample's calls and rows are untouched. The one whole
    request among them is answered and recorded despite its half-close (it used to be dropped)."""
    (agent_dir / "malformed.py").write_text(MALFORMED)
    command = f"if [ {{sample}} = 0 ]; then python3 /opt/lcrl-agent/malformed.py; else {VICTIM}; fi"
    t0 = time.monotonic()
    with caplog.at_level("WARNING"):
        hostile, victim = run_harness(policy, swe_settings, [problem], 2, command, agent_dir)
    noisy = [r for r in caplog.records if r.levelno >= 30]
    # malformed requests are now answered 400 (a half-close no longer drops them unanswered), and
    # aiohttp logs each: the filter lets one through a second
    assert len(noisy) <= 4 + time.monotonic() - t0, [r.getMessage()[:120] for r in noisy]
    assert not any(r.exc_info for r in noisy)
    assert "malformed: done" in hostile.record()["agent_log"] and hostile.record()["gateway"]["calls"] == 1
    record = victim.record()
    seen = client_ids(record["agent_log"])
    assert record["gateway"]["calls"] == len(seen) == 3 and record["gateway"]["errors"] == 0
    assert record["input_ids"][: len(seen[0]["prompt"])] == seen[0]["prompt"]


LONG_PROMPT = r"""import json, os, urllib.error, urllib.request
body = json.dumps({"model": "policy", "prompt": [1] * 2100, "max_tokens": 1}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/completions", data=body,
                             headers={"Authorization": "Bearer x", "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print("long: " + json.dumps({"status": r.status}))
except urllib.error.HTTPError as e:
    print("long: " + json.dumps({"status": e.code, "code": json.loads(e.read())["error"].get("code")}))
"""


def test_a_prompt_past_the_models_context_is_refused_without_a_configured_limit(
    policy, swe_settings, problem, agent_dir
):
    """With no ``max_context_tokens`` given (evaluation never gives one; training leaves it unset
    with the HF engine), a prompt longer than the model's context (tiny-random: 2048 positions)
    is a ``context_length_exceeded`` 400 and nothing is recorded (before: the engine's owner
    generated on it, so one agent could make every episode's step wait on a prompt as long as a
    64 MB body holds, far past the positions the model was trained on)."""
    assert policy[0].config.max_position_embeddings == 2048
    (agent_dir / "long_prompt.py").write_text(LONG_PROMPT)
    command = f"if [ {{sample}} = 0 ]; then python3 /opt/lcrl-agent/long_prompt.py; else {VICTIM}; fi"
    hostile, victim = run_harness(policy, swe_settings, [problem], 2, command, agent_dir)
    record = hostile.record()
    line = next(x for x in record["agent_log"].splitlines() if x.startswith("long: "))
    assert json.loads(line[len("long: ") :]) == {"status": 400, "code": "context_length_exceeded"}
    assert record["gateway"]["calls"] == 0 and record["gateway"]["errors"] == 1
    assert victim.record()["gateway"]["calls"] == 3


# -- a root trainer without a pids cgroup --------------------------------------------------------

SPAWN = r"""import json, os, subprocess
procs, error = [], None
for _ in range(80):
    try:
        procs.append(subprocess.Popen(["sleep", "30"]))
    except OSError as e:
        error = e.strerror
        break
for p in procs:
    p.kill()
    p.wait()
host_uid = int(open("/proc/self/uid_map").read().split()[-2])
print("spawn: " + json.dumps({"started": len(procs), "error": error, "host_uid": host_uid}))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="only a root trainer runs programs as a host uid of its own")
def test_agent_processes_are_bounded_without_a_pids_cgroup_and_still_reach_the_gateway(
    policy, swe_settings, problem, agent_dir
):
    """Where the trainer is root and no pids cgroup bounds a session (most containers, the GPU
    machines), the agent program runs as a host uid of its own, so RLIMIT_NPROC
    (``max_processes``) bounds its processes, and that uid still reaches the episode's socket
    and statement (0700 directories of the trainer's) through the relay. Before: the harness
    forced ``root_program_uid=None``, so the agent ran as host root, which RLIMIT_NPROC exempts:
    80 processes of 24 allowed started, and a fork bomb filled the host's process table for the
    episode's whole wall clock (every other episode's sandbox and the trainer's threads failing)."""
    workspace = dataclasses.replace(swe_settings.workspace, use_pids_cgroup=False, max_processes=24)
    settings = dataclasses.replace(swe_settings, workspace=workspace)
    (agent_dir / "spawn.py").write_text(SPAWN)
    command = (
        "python3 /opt/lcrl-agent/spawn.py; "
        + AGENT
        + " --max-steps 1 --log-ids; git apply /opt/lcrl-agent/fix.patch"
    )
    (episode,) = run_harness(policy, settings, [problem], 1, command, agent_dir)
    record = episode.record()
    line = next(x for x in record["agent_log"].splitlines() if x.startswith("spawn: "))
    out = json.loads(line[len("spawn: ") :])
    assert out["started"] < 24 and out["error"] is not None and out["host_uid"] != 0, out
    assert len(client_ids(record["agent_log"])) == 1 and record["gateway"]["calls"] == 1, record["agent_log"]
    assert (record["verdict"], record["reward"]) == ("passed", 1.0), record["grade"]


def test_the_gateway_keeps_no_records_of_finished_episodes(policy, swe_settings, problem):
    """After ``run`` hands its episodes back, the runner's gateway holds none of their calls: its
    memory does not grow with every episode trained on. Before: each closed episode's log (every
    call's prompt ids, sampled ids, log-probs, the last history and reply) stayed in the gateway
    for the next 4,096 episodes: an agent making its 200 calls of a 32k-token context left ~200 MB
    a sample behind, gigabytes a step, until the trainer ran out of memory."""
    model, tokenizer = policy
    env = HarnessEnv(HarnessSettings(command=AGENT + " --max-steps 2", swe=swe_settings, timeout_s=120))
    engine = make_engine(EngineSettings(dtype="model"), tokenizer, model)
    runner = HarnessRunner(engine, env, SamplingParams(max_new_tokens=8, temperature=1.0))
    try:
        for _ in range(2):
            episodes = runner.run([problem], 2, torch.Generator().manual_seed(0))
            assert all(e.record()["gateway"]["calls"] == 2 for e in episodes)
            gc.collect()
            held = [o for o in gc.get_objects() if type(o) in (EpisodeLog, CallRecord)]
            assert held == [], f"{len(held)} episode logs and call records outlive their rollout"
    finally:
        runner.close()


def test_the_dump_writes_each_prompt_token_of_a_continued_history_once(
    policy, swe_settings, problem, agent_dir
):
    """The rollout dump's ``calls`` hold, for a call whose prompt continues an earlier call (its
    prompt, then its reply), only the ids after that reply, so a history of k calls is written in
    size linear in its length, and every prompt the agent was served is rebuilt from it exactly.
    Before: each call's whole prompt was written again, quadratic in the calls: an agent making its
    200 calls of a 32k-token context wrote ~40 MB of rollouts.jsonl a sample, gigabytes a step,
    until the run's disk was full."""
    command = AGENT + " --max-steps 4 --log-ids"
    (episode,) = run_harness(policy, swe_settings, [problem], 1, command, agent_dir)
    record = json.loads(json.dumps(episode.record()))  # as rollouts.jsonl holds it
    seen = client_ids(record["agent_log"])
    calls = record["calls"]
    assert len(seen) == len(calls) == 4 and record["gateway"]["merged_calls"] == 3
    prompts: list[list[int]] = []
    for call in calls:
        k = call.get("prompt_extends")
        head = [] if k is None else prompts[k] + calls[k]["choices"][0]["token_ids"]
        prompts.append(head + call["prompt_ids"])
    assert prompts == [s["prompt"] for s in seen]
    written = sum(len(c["prompt_ids"]) for c in calls)
    assert written == len(seen[-1]["prompt"]) - sum(len(s["completion"]) for s in seen[:-1])


HOLD_OUTPUT = r"""import array, fcntl, socket, termios, time
s = socket.socket(socket.AF_UNIX)
s.connect("/opt/lcrl-gateway/sock/gateway.sock")  # the relay's way out, taken directly
s.setblocking(False)
queued = array.array("i", [0])
for _ in range(2000):  # requests never read, until their replies fill the buffers: the gateway
    s.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 20)  # stops reading this socket
    time.sleep(0.3)
    fcntl.ioctl(s, termios.TIOCOUTQ, queued)
    if queued[0]:
        break
# the write end of the command's output pipe (and this socket, so no close releases it) into the
# gateway's unread queue: the trainer's process now holds them
s.setblocking(True)
s.sendmsg([b" "], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [1, 2, s.fileno()]))])
print("held: sent", flush=True)
time.sleep(1000)
"""


def test_an_output_pipe_sent_out_over_the_gateway_socket_does_not_hold_the_episode(
    policy, swe_settings, problem, agent_dir
):
    """An agent that sends the write end of its command's output pipe over the gateway's unix
    socket (an fd in SCM_RIGHTS, in a queue the gateway has stopped reading; its own socket too,
    so that its death closes nothing) is graded as any other: its wall clock ends it, the fix it
    applied scores 1. Before: the workspace's server read the output until EOF, which came only
    when the gateway dropped the connection at its write timeout (60 s), so the trainer's clock
    (``timeout_s`` + 5 s) killed the session first and the episode was masked as the trainer's
    failure (``sandbox_error``): a policy could turn any failing episode into one that leaves the
    loss, escaping its 0."""
    (agent_dir / "hold.py").write_text(HOLD_OUTPUT)
    command = "git apply /opt/lcrl-agent/fix.patch; python3 /opt/lcrl-agent/hold.py"
    (episode,) = run_harness(policy, swe_settings, [problem], 1, command, agent_dir, timeout_s=8)
    record = episode.record()
    assert episode.valid and record["end_reason"] == "agent_timeout", record["verdict"]
    assert "held: sent" in record["agent_log"] and record["agent_timed_out"], record["agent_log"][-2000:]
    assert (record["verdict"], record["reward"]) == ("passed", 1.0), record["grade"]
