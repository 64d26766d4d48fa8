# Sourced by the H200 scripts: torch.compile's caches carried between device calls (asr/compile_cache.py).
#
# On the device: `compile_cache_on` points $CADENCE_COMPILE_CACHE at the carried .compile_cache/ (every
# compiling process loads its files and adds what it built; `compile_cache_status` says what was carried),
# `compile_cache_back` packs the folder into
# $OUT/compile_cache.tar when it is under the 16 MiB a returned file may have.
# Here, after a call that returned one:  bash bench/compile_cache.sh FILES_AT/compile_cache.tar
# replaces .compile_cache/ with it; the next call carries ".compile_cache" (ignored by git).

compile_cache_on() {  # call it directly, not in $(...): the export must reach this shell
  export CADENCE_COMPILE_CACHE="$PWD/.compile_cache"
  mkdir -p "$CADENCE_COMPILE_CACHE"
}

compile_cache_status() {
  echo "compile cache: $(find "$CADENCE_COMPILE_CACHE" -name '*.bin' | wc -l) file(s)," \
    "$(du -sm "$CADENCE_COMPILE_CACHE" | cut -f1) MB carried"
}

compile_cache_back() {  # compile_cache_back OUTDIR
  local dir=${CADENCE_COMPILE_CACHE:-} out=$1 mb
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  mb=$(du -sm "$dir" | cut -f1)
  if [ "$mb" -lt 16 ]; then
    tar -cf "$out/compile_cache.tar" -C "$(dirname "$dir")" "$(basename "$dir")" \
      && echo "compile cache: $(find "$dir" -name '*.bin' | wc -l) file(s), $mb MB -> $out/compile_cache.tar"
  else
    echo "compile cache: $mb MB, over the 16 MiB a returned file may have: not returned"
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run here: unpack a returned cache
  set -euo pipefail
  cd "$(dirname "$0")/.."
  [ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: bash bench/compile_cache.sh PATH/compile_cache.tar" >&2; exit 2; }
  tar -tf "$1" | grep -qv '^\.compile_cache/' && { echo "$1 holds more than .compile_cache/" >&2; exit 1; }
  rm -rf .compile_cache && tar -xf "$1" -C .
  echo "$(find .compile_cache -name '*.bin' | wc -l) file(s), $(du -sm .compile_cache | cut -f1) MB in .compile_cache/"
fi
