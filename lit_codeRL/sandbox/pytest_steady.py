"""The pytest plugin of every workspace session (``lcrl_steady``): tests that draw random numbers or
Hypothesis examples draw the same ones in every run.

Every pytest the agent runs in its workspace loads it (``PYTEST_PLUGINS``, from a read-only bind:
``workspace_argv.STEADY_PLUGIN_IN``), and so does grading's pytest child (``grading/_runner.py``),
so that a test behaves in the agent's own runs as in every grading run of the same diff:

- ``random`` (and NumPy's global generator, when it is loaded) is seeded before each test's setup,
  call and teardown and before each collector (what a module draws when it is imported), as
  ``pytest-randomly`` does. A test that draws unseeded numbers then draws the same ones whichever
  other tests ran before it (grading runs the task's test files, the clean measurement the whole
  suite, the agent one test); otherwise it passes some runs and fails others.
- Hypothesis (when it is installed outside the repository) draws its examples from a fixed seed
  (``--hypothesis-seed``, unless the command line gives one) and runs under a profile with no
  deadline and no example database, as its own CI profile does: by default one example slower than
  200 ms on a loaded machine fails the test (``DeadlineExceeded``, or ``Flaky`` when the rerun is
  quicker). The profile is loaded once pytest knows the repository's root and before any conftest,
  so a profile the repository loads itself still wins, and its deadline with it; the seed holds
  over it.
- The warnings a run gives only because the sandbox's plugins are not the repository's own (an
  unknown option of a plugin it lacks, pytest-asyncio's request to set its fixture loop scope) are
  ignored (:data:`SANDBOX_WARNINGS`): under the repository's ``filterwarnings = error`` they stopped
  pytest before any test ran.

Standard library and pytest only: it runs inside the sandbox, with the sandbox's interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys

import pytest

SEED = 0
"""The seed of ``random``, NumPy and Hypothesis (the workspace's ``PYTHONHASHSEED`` is 0 too)."""
PROFILE = "lit-coderl-steady"
"""The Hypothesis settings profile this plugin loads."""
SANDBOX_WARNINGS = (
    "ignore:Unknown config option:pytest.PytestConfigWarning",
    'ignore:The configuration option "asyncio_default_fixture_loop_scope" is unset:DeprecationWarning',
)
"""``-W`` filters of the warnings that say how the sandbox's plugins differ from the ones the
repository was written against, not what its code does: an option of a plugin the sandbox lacks
(``timeout = 10``, pytest-timeout's) is unknown here, and pytest-asyncio since 0.24 asks every
repository that does not set ``asyncio_default_fixture_loop_scope`` to set it. Each warns while
pytest configures itself, where a repository's ``filterwarnings = error`` turned it into a run that
never started (every task of such a repository lost, the agent's own test runs too)."""


def _hypothesis_outside_repository(root: str) -> bool:
    """Is Hypothesis installed (the toolchain's), not a directory of the repository at ``root``
    (pytest's rootdir, not the working directory: a run from ``/`` has every file under it)?"""
    try:
        spec = importlib.util.find_spec("hypothesis")
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec is not None else None
    if not origin:
        return False
    root = os.path.realpath(root)
    return os.path.commonpath([root, os.path.realpath(origin)]) != root


def _steady_property_tests(root: str) -> None:
    if not _hypothesis_outside_repository(root):
        return
    try:
        from hypothesis import HealthCheck, settings  # noqa: PLC0415

        settings.register_profile(
            PROFILE, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
        )
        settings.load_profile(PROFILE)
    except Exception:  # noqa: BLE001, S110 - a Hypothesis without these settings runs as it is
        pass


def reseed() -> None:
    random.seed(SEED)
    numpy = sys.modules.get("numpy")
    try:
        numpy.random.seed(SEED)
    except Exception:  # noqa: BLE001, S110 - not loaded, or not NumPy's API
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # the rootdir is known here, and no conftest of the repository is loaded yet
    _steady_property_tests(str(early_config.rootpath))
    # as if given first on the command line (``-W``): the repository's ``filterwarnings``, even
    # ``error``, and a later ``-W`` still win over them for every other warning
    namespace = early_config.known_args_namespace
    namespace.pythonwarnings = [*SANDBOX_WARNINGS, *(getattr(namespace, "pythonwarnings", None) or [])]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # before Hypothesis's own pytest_configure reads it; absent when its plugin is not loaded
    if getattr(config.option, "hypothesis_seed", SEED) is None:
        config.option.hypothesis_seed = str(SEED)


@pytest.hookimpl(tryfirst=True)
def pytest_collectstart(collector: pytest.Collector) -> None:  # noqa: ARG001
    reseed()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:  # noqa: ARG001
    reseed()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:  # noqa: ARG001
    reseed()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:  # noqa: ARG001
    reseed()
