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
# Env: LLAMACPP_PY_VERSION (sdist version, pinned below), TREESPEC_CACHE (default ~/.cache/treespec),
#      BUILD_JOBS (default 2), PIP (default .venv/bin/pip, else pip).
# Build time: not yet timed on an idle host; on the shared 2-core dev machine (load 10-20, nice -n 19) it ran
# over 70 minutes without finishing. Objects stay in the build dir, so an interrupted build resumes.
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

# AMX usable? Some VMs advertise amx_tile/amx_bf16/amx_int8 in CPUID while the kernel leaves AMX tile data
# (XSAVE feature 18) out of what a process may enable; `-march=native` then compiles ggml's AMX kernels and the
# first `ldtilecfg` dies with a general-protection fault (seen on an Intel Xeon VM, 2026-12-02). Prints
# "on" or "off"; off also on CPUs without AMX (nothing changes for them: native has no AMX to drop).
amx_mode() {
  python3 - <<'PY'
import ctypes, platform
try:
    bits = ctypes.c_ulong(0)  # arch_prctl(ARCH_GET_XCOMP_SUPP): XSAVE features the kernel lets a process use
    ok = platform.machine() == "x86_64" and ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(bits)) == 0
    print("on" if ok and bits.value >> 18 & 1 else "off")
except OSError:
    print("off")
PY
}

build() {
  local amx flags=()
  amx="$(amx_mode)"
  # A build made under the other AMX mode, or before this stamp existed, is rebuilt (cmake reconfigures).
  [ "$(cat "$BUILD/AMX" 2>/dev/null)" = "$amx" ] || rm -f "${TARGETS[@]/#/$BIN/}"
  if [ "$amx" = off ]; then
    flags=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
  else
    flags=(-DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS=)
  fi
  if ! have_all; then
    nice -n 19 cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -G "Unix Makefiles" "${flags[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
    nice -n 19 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" >&2
    have_all || { echo "llamacpp.sh: build finished but a binary is missing in $BIN" >&2; exit 1; }
  fi
  # Read by python -m treespec.bench_llamacpp into its result JSON.
  echo "$amx" > "$BUILD/AMX"
  echo "llama-cpp-python $VERSION sdist, vendored llama.cpp commit $(cat "$SRC/LLAMACPP_COMMIT"), AMX $amx" > "$BUILD/SOURCE"
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
