#!/usr/bin/env bash
# Unpack llama.cpp's source (.llamacpp/src.tar.gz) into DIR, or, where only a prebuilt binary travelled,
# the GGUF writer's part of it (.llamacpp/gguf-kit.tar.gz: gguf-py and the Llama 3 vocabulary).
set -eu
cd "$(dirname "$0")/.."
dir=$1
mkdir -p "$dir"
for kit in .llamacpp/src.tar.gz .llamacpp/gguf-kit.tar.gz; do
  [ -f "$kit" ] && { tar xzf "$kit" -C "$dir"; exit 0; }
done
echo "no .llamacpp/src.tar.gz or .llamacpp/gguf-kit.tar.gz: run bench/llama_server_src.sh here first" >&2
exit 2
