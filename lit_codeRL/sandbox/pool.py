"""The worker pool: N fork-server workers kept busy by a thread per worker, with bounded queueing;
and which backend works here (:func:`resolve_backend`), decided by starting one of those workers."""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from lit_codeRL.sandbox import backends, cgroups, grading, userns
from lit_codeRL.sandbox.backends import FIX, SandboxUnavailable
from lit_codeRL.sandbox.config import SandboxConfig
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

logger = logging.getLogger(__name__)

_HDR = struct.Struct(">I")
_ANNOUNCED: set[tuple] = set()  # sandbox settings and degraded modes already logged in this process
_START_TIMEOUT_S = 60.0


class WorkerDied(RuntimeError):
    """The fork server stopped answering (killed by a program, crashed, or too slow)."""


class WorkerStartError(RuntimeError):
    """A worker could not be started (or reported itself unhealthy right away): never the program's
    fault."""


class _Worker:
    """One fork server process (maybe inside a container) and the pipes to it."""

    def __init__(self, cfg: SandboxConfig, backend: str, own_userns: bool = False) -> None:
        self.cfg = cfg
        self.backend = backend
        self.own_userns = own_userns
        """bwrap in a user namespace of its own, as a host uid that is not root (``userns.py``)."""
        self.proc: subprocess.Popen | None = None
        self.cgroups: list[cgroups.Cgroup] = []
        """Its pids and cpu cgroups (those that could be made)."""
        self.work_root: str | None = None
        self.jobs = 0

    def _argv(self, userns_fd: int | None) -> list[str]:
        if self.backend == "local":
            self.work_root = tempfile.mkdtemp(prefix="lcrl-sandbox-")
            return backends.local_argv(self.cfg, self.work_root)
        if self.backend == "bwrap":
            return backends.bwrap_argv(self.cfg, userns_fd=userns_fd)
        if self.backend == "apptainer":
            image = backends.apptainer_image(self.cfg)
            if image is None:
                raise RuntimeError("apptainer backend needs SandboxConfig.apptainer_image (a .sif file)")
            return backends.apptainer_argv(self.cfg, image)
        raise ValueError(f"unknown sandbox backend {self.backend!r}")

    def start(self) -> None:
        userns_fd = None
        if self.own_userns:
            assert self.cfg.root_program_uid is not None
            try:
                userns_fd = userns.make(userns.host_uid(self.cfg.root_program_uid))
            except OSError as e:
                raise WorkerStartError(f"no user namespace for a bwrap worker: {e}") from e
        try:
            self._spawn(self._argv(userns_fd), () if userns_fd is None else (userns_fd,))
        finally:
            if userns_fd is not None:
                os.close(userns_fd)  # bwrap holds the namespace from here on
        try:
            reply = self._recv(time.monotonic() + _START_TIMEOUT_S)
        except (WorkerDied, ValueError) as e:
            self.stop()
            raise WorkerStartError(f"{self.backend} worker did not start: {e}") from e
        if not reply.get("ready"):
            self.stop()
            raise WorkerStartError(f"{self.backend} worker did not start: {reply}")

    def _spawn(self, argv: list[str], pass_fds: tuple[int, ...]) -> None:
        # +8: the server itself, bwrap's two processes, slack for a child being reaped
        self.cgroups = cgroups.sandbox_cgroups(
            pids=self.cfg.max_processes + 8 if self.cfg.use_pids_cgroup else None, cpu=self.cfg.use_cpu_cgroup
        )
        # join the cgroups before exec so everything the wrapper forks is inside them
        argv = cgroups.join_cgroups_argv([cg.procs for cg in self.cgroups], argv)
        env = {"PATH": backends.SANDBOX_PATH, "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("LCRL_SANDBOX_DEBUG") else subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            close_fds=True,
            pass_fds=pass_fds,
            cwd="/",  # the repo path must not leak into the sandbox's environment
        )

    def _recv(self, deadline: float) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()

        def read_exact(n: int) -> bytes:
            buf = bytearray()
            while len(buf) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                    raise WorkerDied("worker reply timed out")
                chunk = os.read(fd, n - len(buf))
                if not chunk:
                    raise WorkerDied("worker exited")
                buf += chunk
            return bytes(buf)

        (n,) = _HDR.unpack(read_exact(_HDR.size))
        return json.loads(read_exact(n))

    def run(self, job: dict) -> dict:
        """One program on this worker. Raises :class:`WorkerStartError` when a (re)start fails and
        :class:`WorkerDied` when the server dies or stops answering during the program."""
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            try:
                self.start()
            except WorkerStartError:
                raise
            except Exception as e:  # noqa: BLE001 - e.g. exec failed, argv could not be built
                self.stop()
                raise WorkerStartError(f"{self.backend} worker did not start: {type(e).__name__}: {e}") from e
        assert self.proc is not None and self.proc.stdin is not None
        data = json.dumps(job).encode()
        try:
            self.proc.stdin.write(_HDR.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(f"worker pipe closed: {e}") from e
        self.jobs += 1
        return self._recv(time.monotonic() + float(job["timeout_s"]) + self.cfg.grace_s)

    def stop(self) -> None:
        """Kill the worker and everything it started; safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:
            # the server is a subreaper, so its descendants are its tree (bwrap/apptainer also take
            # their whole PID namespace down with them); the cgroup holds any escaped stragglers
            backends.kill_sandbox(proc, self.cgroups)
            for cg in self.cgroups:
                cg.kill_stragglers(200)
        for cg in self.cgroups:
            cg.remove()
        self.cgroups = []
        if self.work_root:
            shutil.rmtree(self.work_root, ignore_errors=True)
            self.work_root = None


def _to_result(d: dict, backend: str) -> ExecutionResult:
    return ExecutionResult(
        verdict=Verdict(d.get("verdict", "sandbox_error")),
        test_passed=list(d.get("test_passed", [])),
        failed_test=d.get("failed_test"),
        exception_type=d.get("exception_type"),
        exception_message=d.get("exception_message"),
        stdout=d.get("stdout", ""),
        stderr=d.get("stderr", ""),
        wall_time_s=float(d.get("wall_time_s", 0.0)),
        backend=backend,
        signal=d.get("signal"),
    )


def _job(program: Program, config: SandboxConfig) -> tuple[dict, dict[int, object]]:
    """What the sandbox gets for ``program``, and what stays here: what the value of every test
    of a trusted shape must be (``grading.split_trusted_test``: only its expression is sent) and
    the expected stdout."""
    timeout = program.timeout_s if program.timeout_s is not None else config.timeout_s
    tests, expected = [], {}
    for i, test in enumerate(program.tests):
        split = grading.split_trusted_test(test) if config.trusted_comparison else None
        if split is None:
            tests.append(test)
        else:
            tests.append(split[0])
            expected[i] = split[1]
    job = {
        "code": program.code,
        "tests": tests,
        "value_tests": sorted(expected),
        "max_value_bytes": int(config.max_value_bytes),
        "setup_code": program.setup_code,
        "stdin": program.stdin,
        "full_stdout": program.expected_stdout is not None,
        "timeout_s": float(timeout),
    }
    return job, expected


def _grade(
    res: ExecutionResult, reply: dict, program: Program, expected: dict[int, object]
) -> ExecutionResult:
    """Finish what the sandbox could not judge: compare the returned values and the output with
    the expected ones it never saw."""
    values = reply.get("values") or {}
    mismatched = []
    for i, want in expected.items():
        if i < len(res.test_passed) and res.test_passed[i]:
            if not grading.value_matches(values.get(str(i)), want):
                res.test_passed[i] = False
                mismatched.append(i)
    if mismatched:
        first = mismatched[0]
        if res.verdict is Verdict.PASSED or (
            res.verdict is Verdict.FAILED and (res.failed_test is None or first < res.failed_test)
        ):
            # what the in-process ``assert`` would have raised (no expected value in the message:
            # messages may be shown to the policy as feedback)
            res.verdict, res.failed_test = Verdict.FAILED, first
            res.exception_type, res.exception_message = "AssertionError", ""
    if res.verdict is Verdict.PASSED and program.expected_stdout is not None:
        if not grading.stdout_matches(reply.get("full_stdout", res.stdout), program.expected_stdout):
            res.verdict = Verdict.FAILED
            res.exception_type, res.exception_message = (
                "WrongOutput",
                "stdout differs from the expected output",
            )
    return res


def probe_backend(config: SandboxConfig, backend: str, own_userns: bool = False) -> str | None:
    """Start one real worker of ``backend`` with ``config`` (the pool's own command line and start
    path; ``own_userns``: a bwrap one in a user namespace of its own) and grade one program
    through it. ``None`` when it works, else why not. Cached."""
    key = (replace(config, workers=1, backend=backend), backend, own_userns)
    with _PROBE_LOCK:
        if key not in _PROBED:
            _PROBED[key] = _probe(*key)
        return _PROBED[key]


def _probe(config: SandboxConfig, backend: str, own_userns: bool) -> str | None:
    worker = _Worker(config, backend, own_userns)
    try:
        worker.start()
        job, expected = _job(
            Program(code="def f(x):\n    return 6 * x\n", tests=("assert f(7) == 42",)), config
        )
        reply = worker.run(job)
        res = _grade(_to_result(reply, backend), reply, Program(code=""), expected)
        if res.verdict is not Verdict.PASSED or reply.get("health"):
            return (
                f"a probe program came back {res.verdict.value}: {res.exception_type} {res.exception_message}"
            )
        return None
    except Exception as e:  # noqa: BLE001 - any failure means: this backend does not work here
        return f"{type(e).__name__}: {e}"
    finally:
        worker.stop()


_PROBED: dict[tuple, str | None] = {}
_PROBE_LOCK = threading.Lock()


# -- which backend works here: decided by starting one of the pool's own workers -----------------


def bwrap_problem(cfg: SandboxConfig) -> str | None:
    """Why a bwrap worker cannot run here with ``cfg`` (``None``: it works). The probe starts a real
    worker with the very command line the pool uses and grades one program through it."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    return probe_backend(cfg, "bwrap")


def apptainer_problem(cfg: SandboxConfig) -> str | None:
    """Why an apptainer worker cannot run here with ``cfg`` (``None``: it works)."""
    if shutil.which("apptainer") is None:
        return "apptainer is not installed"
    if backends.apptainer_image(cfg) is None:
        return "no image (set SandboxConfig.apptainer_image or $LIT_CODERL_SANDBOX_SIF)"
    return probe_backend(cfg, "apptainer")


def bwrap_works(python: str = sys.executable) -> bool:
    """Does a bwrap worker for ``python`` start and grade a program here (cached per setting)?"""
    return bwrap_problem(SandboxConfig(python=python)) is None


def own_user_namespaces(cfg: SandboxConfig) -> bool:
    """Do ``cfg``'s bwrap workers get a user namespace of their own (``userns.py``)? Where the
    trainer is root and no pids cgroup bounds a worker, ``root_program_uid`` is set, and a probe
    worker started that way grades a program; a probe that fails is warned about once."""
    if cfg.root_program_uid is None or cgroups.unbounded_processes(cfg) is None:
        return False
    problem = probe_backend(cfg, "bwrap", own_userns=True)
    if problem is not None and ("userns", problem) not in _ANNOUNCED:
        logger.warning("sandbox: programs cannot run as a uid that is not root here: %s", problem)
        _ANNOUNCED.add(("userns", problem))
    return problem is None


def resolve_backend(cfg: SandboxConfig) -> str:
    """The backend ``cfg.backend`` means on this machine, checked to work.

    ``auto`` is the safest that works (apptainer with an image, else bwrap) and never silently
    ``local``: with no isolating backend it raises :class:`SandboxUnavailable` naming the fixes.
    An explicitly requested container backend that cannot run raises too (it would otherwise fail
    every program).
    """
    if cfg.backend == "local":
        return "local"
    if cfg.backend == "bwrap":
        problem = bwrap_problem(cfg)
        if problem:
            raise SandboxUnavailable(f"sandbox backend 'bwrap' does not work here ({problem}); {FIX}")
        return "bwrap"
    if cfg.backend == "apptainer":
        problem = apptainer_problem(cfg)
        if problem:
            raise SandboxUnavailable(f"sandbox backend 'apptainer' does not work here ({problem}); {FIX}")
        return "apptainer"
    if cfg.backend != "auto":
        raise SandboxUnavailable(f"unknown sandbox backend {cfg.backend!r} (auto, bwrap, apptainer, local)")
    problems = {}
    for name, check in (("apptainer", apptainer_problem), ("bwrap", bwrap_problem)):
        problems[name] = check(cfg)
        if problems[name] is None:
            return name
    why = "; ".join(f"{k}: {v}" for k, v in problems.items())
    raise SandboxUnavailable(f"no isolating sandbox backend works here ({why}). Fix: {FIX}")


class Sandbox:
    """Runs untrusted programs on a pool of isolated fork-server workers.

    Thread-safe. ``submit`` returns a future and blocks once ``max_pending`` programs are in
    flight; ``run_batch`` keeps every worker busy and returns results in input order. A stuck
    program holds only its own worker, and only until its timeout. A worker that reports damage
    after a program is replaced before the next one; an infrastructure fault (a worker that cannot
    start, a server error) is retried on a fresh worker up to ``config.retries`` times and only
    then comes back as ``SANDBOX_ERROR``, which is never the program's verdict.
    """

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.backend = resolve_backend(config)  # raises SandboxUnavailable
        self.own_userns = self.backend == "bwrap" and own_user_namespaces(config)
        """Programs run as a host uid that is not root though the trainer is root (``userns.py``)."""
        self.workers = config.worker_count()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all = [_Worker(config, self.backend, self.own_userns) for _ in range(self.workers)]
        self._pending = threading.BoundedSemaphore(config.max_pending or 64 * self.workers)
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox")
        self._closed = False
        self.replaced = 0
        """Workers replaced after a program damaged them or they died (for logs and tests)."""
        # Start workers from the executor's own (long-lived) threads: bwrap --die-with-parent is
        # PR_SET_PDEATHSIG, which fires when the *thread* that spawned it exits.
        barrier = threading.Barrier(self.workers)

        def start(w: _Worker) -> None:
            barrier.wait()  # one worker per executor thread
            w.start()

        starts = [self._executor.submit(start, w) for w in self._all]
        for w, fut in zip(self._all, starts, strict=True):
            try:
                fut.result()
            except Exception as e:  # noqa: BLE001 - retried on first use; logged here
                logger.warning("sandbox worker failed to start: %s", e)
                w.stop()
            self._idle.put(w)
        setting = (self.backend, config.backend, self.workers, config.timeout_s, config.memory_mb)
        if self.backend == "local":
            # said loudly, every time a pool opens: nothing isolates the programs
            logger.warning(
                "sandbox: backend=local (requested %s): model-written code runs UNISOLATED as uid %d, "
                "with this machine's files and network; use bwrap or apptainer for untrusted code",
                config.backend,
                os.getuid(),
            )
        # Evaluations open a pool each time; say which isolation is in force once per setting.
        logger.log(
            logging.DEBUG if setting in _ANNOUNCED else logging.INFO,
            "sandbox: backend=%s (requested %s), workers=%d, timeout=%.1fs, memory=%dMB",
            *setting,
        )
        _ANNOUNCED.add(setting)
        if self.own_userns and ("userns", True) not in _ANNOUNCED:
            logger.info(
                "sandbox: root without a pids cgroup: each bwrap worker has a user namespace of its "
                "own and runs its programs as a host uid from %d, bounded to %d processes",
                config.root_program_uid,
                config.max_processes,
            )
            _ANNOUNCED.add(("userns", True))
        gap = None if self.own_userns else cgroups.unbounded_processes(config)
        if gap is not None and ("unbounded", gap) not in _ANNOUNCED:
            # a degraded mode of the machine, not of this pool: said once per process
            logger.warning(
                "sandbox: running as root with %s: nothing bounds the processes a program forks "
                "(RLIMIT_NPROC does not apply to root), so a fork bomb runs until its timeout kills "
                "its process tree; run as a non-root user or give this process a writable pids cgroup",
                gap,
            )
            _ANNOUNCED.add(("unbounded", gap))
        cgroups.warn_unshared_cpu(config.use_cpu_cgroup)

    # -- execution -----------------------------------------------------------------------------

    def _execute(self, program: Program) -> ExecutionResult:
        job, expected = _job(program, self.config)
        timeout = job["timeout_s"]
        worker = self._idle.get()
        t0 = time.monotonic()
        retries, deaths = 0, 0
        try:
            while True:
                t_try = time.monotonic()
                try:
                    reply = worker.run(job)
                except WorkerStartError as e:
                    fault = ("WorkerStartError", str(e))
                except WorkerDied as e:
                    worker.stop()
                    self.replaced += 1
                    if time.monotonic() - t_try >= timeout:
                        # the server stopped answering while the program ran past its time (e.g.
                        # the program SIGSTOPped it): the program's timeout
                        return self._error(program, Verdict.TIMEOUT, "TimeoutError", f"{e}", t0, retries)
                    deaths += 1
                    if deaths >= 2:
                        # the same program ended its fresh server again: the program, not us
                        return self._error(
                            program,
                            Verdict.RUNTIME_ERROR,
                            "WorkerKilled",
                            f"the program ended its server: {e}",
                            t0,
                            retries,
                        )
                    fault = ("WorkerDied", str(e))
                else:
                    if reply.get("health"):
                        # the server is sound enough to have graded this program, but it cannot
                        # promise the next one an intact environment: replace it
                        logger.debug("sandbox worker replaced: %s", reply["health"])
                        worker.stop()
                        self.replaced += 1
                    if not reply.get("infra"):
                        res = _grade(_to_result(reply, self.backend), reply, program, expected)
                        res.retries = retries
                        return res
                    worker.stop()
                    fault = (
                        reply.get("exception_type") or "SandboxError",
                        reply.get("exception_message") or "",
                    )
                if retries >= self.config.retries:
                    logger.warning(
                        "sandbox: giving up on a program after %d retries: %s: %s", retries, *fault
                    )
                    return self._error(program, Verdict.SANDBOX_ERROR, fault[0], fault[1], t0, retries)
                retries += 1
        finally:
            self._idle.put(worker)

    def _error(
        self, program: Program, verdict: Verdict, etype: str, msg: str, t0: float, retries: int
    ) -> ExecutionResult:
        return ExecutionResult(
            verdict=verdict,
            test_passed=[False] * len(program.tests),
            failed_test=0 if program.tests else None,
            exception_type=etype,
            exception_message=msg,
            wall_time_s=time.monotonic() - t0,
            backend=self.backend,
            retries=retries,
        )

    def submit(self, program: Program) -> Future[ExecutionResult]:
        """Queue one program; blocks while ``max_pending`` programs are already in flight."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        self._pending.acquire()
        try:
            fut = self._executor.submit(self._execute, program)
        except BaseException:
            self._pending.release()
            raise
        fut.add_done_callback(lambda _: self._pending.release())
        return fut

    def run(self, program: Program) -> ExecutionResult:
        return self.submit(program).result()

    def run_batch(self, programs: Iterable[Program]) -> list[ExecutionResult]:
        """Run all programs in parallel; results in input order."""
        futures = [self.submit(p) for p in programs]
        return [f.result() for f in futures]

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        for w in self._all:
            w.stop()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; close() is the contract
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
