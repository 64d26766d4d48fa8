#!/usr/bin/env bash
# Build llama.cpp's native `llama-server` with CUDA for the H200 (sm_90), from .llamacpp/src.tar.gz
# (bench/llama_server_src.sh), on the device machine (its image has nvcc 13.0, CMake and ninja).
#   BUILD_DIR (default .llamacpp-build, ignored by git and not carried, so a warm machine keeps it between
#   calls) gets bin/llama-server; a build already there is reused. A prebuilt binary carried in
#   .llamacpp/bin/llama-server.xz (or its parts llama-server.xz.00, .01, ...) is used instead when it runs.
#   PACK_TO=DIR (e.g. $OUT) writes the binary there as llama-server.xz.00, .01, ... (15 MiB parts: the
#   device returns files of up to 16 MiB); here, copy them into .llamacpp/bin/ and carry ".llamacpp/bin"
#   instead of ".llamacpp" (the source is not needed then), which saves the ~270 s build on a fresh loan.
# Static (no libllama/libggml .so beside it): one file, linked to the image's CUDA runtime and cuBLAS.
# FlashAttention kernels for f16 only (GGML_CUDA_FA_ALL_QUANTS off); no NCCL, no web UI, no curl.
# Prints the binary's path on its last line; exits non-zero when no binary could be had.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-.llamacpp-build}
SRC_DIR=${SRC_DIR:-/tmp/llama.cpp-src}
JOBS=${JOBS:-$(nproc)}
BIN="$BUILD_DIR/bin/llama-server"
runs() { "$1" --version > /dev/null 2>&1; }
mkdir -p "$BUILD_DIR/bin"
PARTS=(.llamacpp/bin/llama-server.xz .llamacpp/bin/llama-server.xz.[0-9][0-9])
PARTS=($(ls "${PARTS[@]}" 2>/dev/null))
if [ ! -x "$BIN" ] && [ ${#PARTS[@]} -gt 0 ]; then
  cat "${PARTS[@]}" | xz -dc > "$BIN" && chmod +x "$BIN"
  runs "$BIN" && echo "prebuilt llama-server from .llamacpp/bin" >&2 || rm -f "$BIN"
fi
if [ ! -x "$BIN" ]; then
  [ -f .llamacpp/src.tar.gz ] || { echo "no .llamacpp/src.tar.gz: run bench/llama_server_src.sh here first" >&2; exit 2; }
  [ -d "$SRC_DIR/llama.cpp" ] || { mkdir -p "$SRC_DIR" && tar xzf .llamacpp/src.tar.gz -C "$SRC_DIR"; }
  t0=$(date +%s)
  cmake -S "$SRC_DIR/llama.cpp" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2 || exit 3
  cmake --build "$BUILD_DIR" --target llama-server -j "$JOBS" >&2 || exit 4
  echo "built llama-server in $(( $(date +%s) - t0 )) s" >&2
fi
runs "$BIN" || { "$BIN" --version >&2; exit 5; }
"$BIN" --version 2>&1 | head -2 >&2
if [ -n "${PACK_TO:-}" ]; then
  mkdir -p "$PACK_TO" && xz -T0 -6 -c "$BIN" | split -b 15M -d - "$PACK_TO/llama-server.xz."
  echo "packed into $PACK_TO: $(ls "$PACK_TO" | grep -c '^llama-server.xz.') part(s)" >&2
fi
realpath "$BIN"  # BUILD_DIR may be relative (to the repo root) or absolute
