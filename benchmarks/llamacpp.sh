#!/usr/bin/env bash
# Build llama.cpp's CLI tools (CPU only, GGML_NATIVE) from the PyPI llama-cpp-python sdist, which vendors
# llama.cpp under vendor/llama.cpp, and make the BF16 GGUF of the main model for llama.cpp's BF16 row.
#
#   bash benchmarks/llamacpp.sh   # build (skipped when the binaries exist) + BF16 GGUF; last line: the bin dir
#   BF16 file: $TREESPEC_CACHE/llamacpp/qwen2.5-coder-1.5b-instruct.bf16.gguf (python -m treespec.bench_llamacpp
#   looks there by default)
#
# Idempotent: a second run only checks that the binaries and the BF16 file exist. Progress goes to stderr;
# stdout is the bin dir alone.
# Env: LLAMACPP_PY_VERSION (sdist version, pinned below), LLAMACPP_AMX (auto / on / off, see build()),
#      TREESPEC_CACHE (default ~/.cache/treespec),
#      BUILD_JOBS (default 2), PIP (default .venv/bin/pip, else pip).
# Build time: 16 min 42 s on an idle 2-core Intel Xeon with AMX (2026-12-06: download, native build, the
# one-prompt check that failed, rebuild without AMX, BF16 file); on the shared 2-core dev machine (load 10-20,
# nice -n 19) it ran over 70 minutes without finishing. Objects stay in the build dir, so an interrupted build
# resumes.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
CACHE="${TREESPEC_CACHE:-$HOME/.cache/treespec}"
ROOT="$CACHE/llamacpp/$VERSION"
SRC="$ROOT/src"
BUILD="$ROOT/build"
BIN="$BUILD/bin"
JOBS="${BUILD_JOBS:-2}"
PIP="${PIP:-$([ -x .venv/bin/pip ] && echo .venv/bin/pip || echo pip)}"
TARGETS=(llama-bench llama-completion llama-speculative-simple llama-speculative llama-quantize)
MODELS="$CACHE/models"
MAIN_GGUF="$MODELS/qwen2.5-coder-1.5b-instruct.gguf"
BF16_GGUF="$CACHE/llamacpp/qwen2.5-coder-1.5b-instruct.bf16.gguf"  # version-independent

have_all() {
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}

fetch_source() {
  [ -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ] && return 0
  mkdir -p "$ROOT/dl"
  nice -n 19 "$PIP" download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$ROOT/dl" >&2
  local tmp="$ROOT/src.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar xzf "$ROOT/dl/llama_cpp_python-$VERSION.tar.gz" -C "$tmp" --strip-components=1
  # The vendored checkout's commit, recorded for the result JSON (the sdist keeps the submodule's git dir).
  cat "$tmp/.git/modules/vendor/llama.cpp/HEAD" > "$tmp/LLAMACPP_COMMIT" 2>/dev/null || echo unknown > "$tmp/LLAMACPP_COMMIT"
  rm -rf "$SRC" && mv "$tmp" "$SRC"
}

# AMX. With GGML_NATIVE, ggml compiles its AMX kernels when the CPU lists AMX. On an Intel Xeon VM
# (2026-12-02) those kernels died with a general-protection fault at `ldtilecfg` in ggml_backend_amx_mul_mat,
# although AMX itself works there (a minimal tile program that asks the kernel for AMX permission runs). So
# after a native build on a CPU that lists amx_tile, one prompt goes through llama-completion, and if that
# dies by a signal the tools are rebuilt without AMX (-mno-amx-*); the result JSON's llama.cpp source line
# says which build ran. LLAMACPP_AMX=off forces the build without AMX, =on keeps the native one.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

compile() {  # $1: native | no-amx
  local flags=(-DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS=)
  [ "$1" = no-amx ] && flags=(-DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX")
  rm -f "${TARGETS[@]/#/$BIN/}"
  nice -n 19 cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -G "Unix Makefiles" "${flags[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
  nice -n 19 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" >&2
  have_all || { echo "llamacpp.sh: build finished but a binary is missing in $BIN" >&2; exit 1; }
  echo "$1" > "$BUILD/MODE"
}

runs_one_prompt() {  # false only when llama-completion dies by a signal on a short prompt of the main model
  local rc=0
  [ -f "$MAIN_GGUF" ] || return 0
  "$BIN/llama-completion" -m "$MAIN_GGUF" -p "def fib(n):" -n 1 -t 1 -no-cnv --temp 0 >/dev/null 2>&1 || rc=$?
  [ "$rc" -lt 128 ]
}

build() {
  local want="${LLAMACPP_AMX:-auto}" mode
  mode="$(cat "$BUILD/MODE" 2>/dev/null || echo native)"  # builds before this stamp were native
  case "$want" in
    off) [ "$mode" = no-amx ] && have_all || compile no-amx ;;
    on) [ "$mode" = native ] && have_all || compile native ;;
    *) have_all || compile native ;;
  esac
  mode="$(cat "$BUILD/MODE" 2>/dev/null || echo native)"
  if [ "$want" = auto ] && [ "$mode" = native ] && grep -qw amx_tile /proc/cpuinfo 2>/dev/null && ! runs_one_prompt; then
    echo "llamacpp.sh: the native build died on one prompt (ggml's AMX kernels); rebuilding without AMX" >&2
    compile no-amx
    mode=no-amx
  fi
  # Read by python -m treespec.bench_llamacpp into its result JSON.
  echo "llama-cpp-python $VERSION sdist, vendored llama.cpp commit $(cat "$SRC/LLAMACPP_COMMIT"), build $mode" > "$BUILD/SOURCE"
}

# BF16 copy of the main model. The shipped file is 4-bit (Q4_K_M), so this is a requantization: the BF16
# weights carry the 4-bit rounding of the file (dequantized Q4_K_M, not the original bf16 checkpoint).
# Same weights as treespec serves, which dequantizes the same file.
make_bf16() {
  [ -s "$BF16_GGUF" ] && return 0
  [ -f "$MAIN_GGUF" ] || { echo "llamacpp.sh: $MAIN_GGUF missing (run: treespec models fetch)" >&2; exit 1; }
  nice -n 19 "$BIN/llama-quantize" --allow-requantize "$MAIN_GGUF" "$BF16_GGUF.tmp" BF16 2 >&2
  mv "$BF16_GGUF.tmp" "$BF16_GGUF"
}

fetch_source
build
make_bf16
echo "$BIN"
