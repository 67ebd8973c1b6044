"""Grading's pytest child reads bytecode only from the toolchain's trusted tree: pytest's and the
standard library's modules load compiled (compiled once, outside every session), the
repository's compile from source, and no process of the run can add bytecode anywhere it reads."""

from __future__ import annotations

from pathlib import Path

from lit_codeRL.grading import _runner
from lit_codeRL.sandbox.workspace_argv import TOOLS_IN
from lit_codeRL.sandbox.workspace_toolchain import BYTECODE_DIR
from tests.grading.repo_tasks import BUGGY, F2P, FIXED, P2P, TESTS, validated_task
from tests.sandbox.conftest import require_bwrap

# run by the grading child, beside the calculator's tests: a P2P test that passes only if all holds
CHECKS = '''
import importlib.util
import json
import os
import subprocess
import sys

import _pytest.python

import calc


def _fresh(source):
    """Its compiled file under the prefix exists and records the source's mtime and size."""
    cached = importlib.util.cache_from_source(source)
    with open(cached, "rb") as f:
        header = f.read(16)
    st = os.stat(source)
    flags = int.from_bytes(header[4:8], "little")
    mtime, size = (int.from_bytes(header[i : i + 4], "little") for i in (8, 12))
    return flags == 0 and mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF


def test_bytecode_comes_from_the_toolchains_tree_alone():
    assert sys.pycache_prefix == "/opt/lcrl/tools/bytecode"
    # the processes a test starts read the same tree
    out = subprocess.run([sys.executable, "-c", "import sys; print(sys.pycache_prefix)"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == sys.pycache_prefix, out
    # pytest's and the standard library's modules: compiled, current
    assert _fresh(_pytest.python.__file__) and _fresh(json.__file__) and _fresh(subprocess.__file__)
    # the repository's modules and this test module: none, and none can be made
    for source in (calc.__file__, __file__):
        cached = importlib.util.cache_from_source(source)
        assert cached.startswith(sys.pycache_prefix + "/") and not os.path.exists(cached)
        try:
            os.makedirs(os.path.dirname(cached))
        except OSError:
            pass
        else:
            raise AssertionError(f"made {os.path.dirname(cached)}")
    # nor written over a trusted one
    target = importlib.util.cache_from_source(json.__file__)
    try:
        with open(target, "ab"):
            pass
    except OSError:
        pass
    else:
        raise AssertionError(f"opened {target} for writing")
'''
CHECK = "test_bytecode.py::test_bytecode_comes_from_the_toolchains_tree_alone"


def test_the_runners_trusted_tree_is_where_the_toolchain_puts_it():
    assert _runner.TRUSTED_BYTECODE == f"{TOOLS_IN}/{BYTECODE_DIR}"


def test_grading_loads_the_toolchain_compiled_and_the_repository_from_source(tmp_path):
    require_bwrap()
    files = {"calc.py": BUGGY, "test_calc.py": TESTS, "test_bytecode.py": CHECKS}
    task, grader = validated_task(tmp_path, "bytecode", files, {"calc.py": FIXED}, F2P, [*P2P, CHECK])
    grade = grader.grade(task, task.patch)
    assert grade.resolved, grade.to_dict()
    assert grade.pass_to_pass[CHECK] == "passed", grade.to_dict()


def test_the_tree_holds_the_toolchain_and_the_standard_library_at_their_session_paths(tmp_path):
    """Laid out as ``sys.pycache_prefix`` looks things up: a module's path in the session, under
    the tree; the standard library's test suite and installed packages left out."""
    import importlib.util
    import sys
    import sysconfig

    from lit_codeRL.sandbox.workspace_toolchain import _trusted_bytecode

    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    import compileall

    assert compileall.compile_dir(str(site), quiet=1)
    out = tmp_path / "tree"
    _trusted_bytecode(sys.executable, site, out)
    tag = sys.implementation.cache_tag
    assert (out / TOOLS_IN.lstrip("/") / "site" / "pkg" / f"__init__.{tag}.pyc").is_file()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    sys.pycache_prefix, before = str(out), sys.pycache_prefix
    try:
        assert Path(importlib.util.cache_from_source(str(stdlib / "json" / "__init__.py"))).is_file()
    finally:
        sys.pycache_prefix = before
    stdlib_tree = out / str(stdlib).lstrip("/")
    assert not (stdlib_tree / "test").exists() and not (stdlib_tree / "site-packages").exists()
