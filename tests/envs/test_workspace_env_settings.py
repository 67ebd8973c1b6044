"""The knobs both agent envs on workspace sessions share (``WorkspaceEnvSettings``): one
declaration, each env's own defaults, and checks that name the env's config key."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.debug.env import DebugSettings
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.envs.workspace_episodes import WorkspaceEnvSettings
from lit_codeRL.grading import SWEGrader
from lit_codeRL.sandbox.workspace import WorkspaceConfig

ENVS = [(SWESettings, "env.swe"), (DebugSettings, "env.debug")]


@pytest.mark.parametrize(
    "bad",
    [
        {"grade_timeout_s": 0},
        {"grade_timeout_factor": -1},
        {"grade_min_timeout_s": 0},
        {"grade_min_cpu_s": -1},
        {"parallel": 0},
    ],
)
@pytest.mark.parametrize(("settings", "key"), ENVS)
def test_a_bad_shared_knob_is_refused_under_the_envs_own_key(settings, key, bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=rf"^{key}\.{name}"):
        settings(**bad)


@pytest.mark.parametrize(("settings", "key"), ENVS)
def test_the_shared_knobs_reach_the_grader_with_each_envs_defaults(settings, key):
    assert issubclass(settings, WorkspaceEnvSettings)
    s = settings(
        workspace={"backend": "bwrap"},  # a YAML block without a class path
        grade_timeout_factor=3.0,
        grade_min_timeout_s=7.0,
        grade_min_cpu_s=2.5,
        tamper_reward=-1.0,
        partial_credit=True,
    )
    assert isinstance(s.workspace, WorkspaceConfig) and s.workspace.backend == "bwrap"
    grader = SWEGrader.from_settings(s, repos=None)
    assert (grader.timeout_factor, grader.min_timeout_s, grader.tamper_reward, grader.partial_credit) == (
        3.0,
        7.0,
        -1.0,
        True,
    )
    assert grader.min_cpu_s == 2.5 and settings().grade_min_cpu_s == 5.0
    # a debugging program's tests run in seconds; a repository's suite gets longer
    assert grader.timeout_s == {"env.swe": 300.0, "env.debug": 120.0}[key]
