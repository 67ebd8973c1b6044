"""``available_cpu_memory``: what the automatic micro-batch size reads on a CPU. ``MemAvailable``
(page cache counts as free), capped by the process's memory cgroup (v1 or v2), where the cgroup's
reclaimable page cache counts as free too."""

from __future__ import annotations

from pathlib import Path

from lit_codeRL.policy.precision import available_cpu_memory

GIB = 2**30
MEMINFO = "MemTotal: 25165824 kB\nMemFree: 409600 kB\nMemAvailable: 20971520 kB\nCached: 19922944 kB\n"
"""A machine after a long test session: 400 MB free, 20 GiB available (the page cache)."""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def measure(tmp_path: Path, cgroup: str, files: dict[str, str]) -> int:
    for name, text in files.items():
        write(tmp_path / "cgroup" / name, text)
    return available_cpu_memory(
        str(write(tmp_path / "meminfo", MEMINFO)),
        str(tmp_path / "cgroup"),
        str(write(tmp_path / "self_cgroup", cgroup)),
    )


def test_page_cache_counts_as_available_without_a_cgroup_limit(tmp_path):
    # v1 "unlimited" is a huge number; MemFree (400 MB) would have made every hint tiny
    v1 = {"memory/job/memory.limit_in_bytes": "9223372036854771712", "memory/job/memory.usage_in_bytes": "0"}
    v1["memory/job/memory.stat"] = "total_inactive_file 0\n"
    assert measure(tmp_path, "4:memory:/job\n0::/\n", v1) == 20 * GIB


def test_a_v1_limit_caps_it_less_the_groups_usage_but_not_its_reclaimable_cache(tmp_path):
    files = {
        "memory/job/memory.limit_in_bytes": str(8 * GIB),
        "memory/job/memory.usage_in_bytes": str(7 * GIB),
        "memory/job/memory.stat": f"cache {4 * GIB}\ntotal_inactive_file {3 * GIB}\n",
    }
    assert measure(tmp_path, "12:cpu:/\n4:memory:/job\n", files) == 4 * GIB  # 8 - (7 - 3)


def test_a_v2_limit_caps_it(tmp_path):
    files = {
        "job/memory.max": str(2 * GIB),
        "job/memory.current": str(GIB),
        "job/memory.stat": "inactive_file 0\n",
    }
    assert measure(tmp_path, "0::/job\n", files) == GIB
    unlimited = {"job/memory.max": "max\n", "job/memory.current": str(GIB), "job/memory.stat": "anon 1\n"}
    assert measure(tmp_path, "0::/job\n", unlimited) == 20 * GIB


def test_a_group_not_mounted_at_its_path_is_read_at_the_mount_root(tmp_path):
    # a container without a cgroup namespace: /proc/self/cgroup names the host's path
    files = {
        "memory/memory.limit_in_bytes": str(3 * GIB),
        "memory/memory.usage_in_bytes": str(GIB),
        "memory/memory.stat": "total_inactive_file 0\n",
    }
    assert measure(tmp_path, "4:memory:/docker/abc\n", files) == 2 * GIB


def test_unreadable_files_fall_back_to_what_can_be_read(tmp_path):
    assert available_cpu_memory(str(tmp_path / "none"), str(tmp_path), str(tmp_path / "none")) > 0
    assert measure(tmp_path, "garbage\n", {}) == 20 * GIB
