#!/usr/bin/env bash
# The llama.cpp source that bench/h200_llama_server_build.sh builds on the H200 (CUDA, sm_90) into the
# native `llama-server` (C++, continuous batching over parallel slots: the "CUDA build of llama.cpp" path
# for a GPU LLM where vLLM cannot be installed). Taken from the llama-cpp-python sdist on PyPI (the same
# llama.cpp the embedded CPU server uses), trimmed to what the server build needs, into .llamacpp/src.tar.gz
# (ignored by git; the device call carries ".llamacpp"). Also keeps models/ggml-vocab-llama-bpe.gguf (the
# Llama 3 tokenizer, no weights) for bench/llm_gguf_checkpoint.py, also alone in .llamacpp/gguf-kit.tar.gz
# with gguf-py: a call that carries a prebuilt binary (bench/llama_server_build.sh's PACK_TO) carries
# [".llamacpp/bin", ".llamacpp/gguf-kit.tar.gz"] instead of the whole source.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
exclude="$(git rev-parse --git-common-dir)/info/exclude"
grep -qxF /.llamacpp/ "$exclude" 2>/dev/null || echo /.llamacpp/ >> "$exclude"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$VERSION"
tar xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
# what the server build does not read: docs, sample models, benches, media, the other backends' kernels
rm -rf "$src"/{docs,media,benches,examples/*/,app,pocs,ci,licenses}
find "$src/models" -name '*.gguf' ! -name 'ggml-vocab-llama-bpe.gguf' -delete
rm -rf "$src"/models/templates
for b in cann et hexagon metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn rpc blas; do
  rm -rf "$src/ggml/src/ggml-$b"
done
mkdir -p .llamacpp
tar czf .llamacpp/src.tar.gz -C "$(dirname "$src")" llama.cpp
# what the GGUF writer needs when a prebuilt binary travels instead of the source (.llamacpp/bin)
tar czf .llamacpp/gguf-kit.tar.gz -C "$(dirname "$src")" llama.cpp/gguf-py llama.cpp/models/ggml-vocab-llama-bpe.gguf
echo "$VERSION" > .llamacpp/VERSION
du -h .llamacpp/src.tar.gz
