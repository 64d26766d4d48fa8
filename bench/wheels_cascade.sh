#!/usr/bin/env bash
# Bring along what bench/h200_cascade.sh needs on the H200 machine, which has python 3.12, torch,
# transformers and onnxruntime but no pipecat and nothing can be fetched there:
#   .whl/      wheels (python 3.12, manylinux x86_64) for `cadence serve` on the phone path (pipecat-ai
#              1.14 and what it imports there), `transformers serve` (fastapi, uvicorn, pydantic) and
#              the capacity callers (websockets); packages the H200 image already has are dropped;
#   .cascade/  the phone prompts (Debian's Asterisk recordings, 8 kHz mu-law, one .npz) and COMMIT.
# WebRTC (aiortc, av) is not carried: `cadence serve` runs the phone line without it.
# Extra wheels (e.g. the Kokoro engine's dependencies): EXTRA_WHEELS="pkg==1.2 other" bench/wheels_cascade.sh
# Run here, in the repository root; then the device call carries [".whl", ".cascade"].
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-common-dir)/info/exclude"
for d in /.whl/ /.cascade/; do grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
rm -rf .whl && mkdir -p .whl .cascade

PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
          --platform manylinux1_x86_64)
# pipecat itself without its dependency tree (onnxruntime, numba, numpy... are on the H200), and
# libespeak-ng with its data for the Kokoro engine's phonemizer (the image has no espeak-ng)
python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d .whl "pipecat-ai==1.14.0" "espeakng-loader==0.2.4"
# what pipecat and Cadence import on the phone path, the LLM server's web stack and the callers, with
# their dependencies resolved together (one consistent version of each)
python3 -m pip download -q "${PLATFORM[@]}" -d .whl \
  loguru "docstring_parser<1" "sentencex==1.0.32" "loudness<1" "python-dotenv<2" "num2words" \
  "soxr~=1.0.0" "soundfile~=0.13.1" "websockets>=13.1" "pydantic>=2.10.6,<3" \
  "openai>=1.74,<2" "fastapi<0.120" "starlette<0.49" uvicorn \
  "aiohttp>=3.14.4,<4" ${EXTRA_WHEELS:-}
# drop what the H200 image has (KINDS.md, 2026-11-17); aiohttp travels with its own multidict, yarl,
# propcache, frozenlist, aiosignal and aiohappyeyeballs, pydantic-core with a new typing_extensions
H200_HAS="absl_py accelerate aiofiles annotated_doc anyio attrs certifi
charset_normalizer click cloudpickle colorama filelock fsspec h11 hf_xet httpcore httpx
huggingface_hub idna jinja2 markupsafe markdown numba llvmlite numpy onnxruntime packaging pillow
prometheus_client protobuf psutil pyyaml regex requests rich safetensors scipy sentencepiece six
sympy mpmath tokenizers torch tqdm transformers triton urllib3 uvloop pygments mdurl markdown_it_py
typer shellingham flatbuffers coloredlogs humanfriendly"
for w in .whl/*.whl; do
  name=$(basename "$w" | cut -d- -f1 | tr 'A-Z-' 'a-z_')
  for has in $H200_HAS; do [ "$name" = "$has" ] && rm -f "$w"; done
done
# one version of each (two stop the install)
dups=$(ls .whl | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "two versions of: $dups" >&2; exit 1; }

python3 - <<'P'
import sys
sys.path.insert(0, ".")
from pathlib import Path
from agent.capacity.corpus import recorded_prompts, write_ulaw_pack
paths = recorded_prompts()
if not paths:
    sys.exit("no Asterisk prompts: apt-get install asterisk-core-sounds-en-wav")
write_ulaw_pack(Path(".cascade/prompts.npz"), paths)
print(f"{len(paths)} prompts -> .cascade/prompts.npz")
P
"${PY:-.venv/bin/python}" -m agent.smart_turn.onnx_weights .cascade/smart_turn_v3.npz  # TURN_MODEL=engine: 7.5 MB (int8 + scales)
git rev-parse HEAD > .cascade/COMMIT
git diff --quiet HEAD || echo "dirty" >> .cascade/COMMIT
ls .whl | sed 's/-py.*//;s/-cp3.*//' | tr '\n' ' '; echo
du -ch .whl .cascade | tail -1
