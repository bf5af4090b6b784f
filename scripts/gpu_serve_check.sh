#!/usr/bin/env bash
# The device side of scripts/gpu_serve_check.py: vLLM 0.24 from the offline
# kit (../shared/gpukit), innerguard from a freshly built wheel, then the
# serve check and, if asked, scripts/gpu_check.py's parity runs.
#
#   here:    mkdir -p .gpukit/wheels .gpukit/tok && cp ../shared/gpukit/* .gpukit/
#            .venv/bin/pip wheel --no-deps --no-build-isolation . -w .gpukit/wheels   (after every code change)
#            pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                --platform manylinux_2_28_x86_64 structlog google-re2 -d .gpukit/wheels
#            cp ~/.cache/innerguard/models/smollm2-135m-instruct/{config.json,tokenizer_config.json,chat_template.jinja} .gpukit/tok/
#            xz -9c ~/.cache/innerguard/models/smollm2-135m-instruct/tokenizer.json > .gpukit/tok/tokenizer.json.xz
#   device (one machine, calls back to back while it is warm; each call carries under 64 MiB):
#            bash scripts/gpu_serve_check.sh stash      carry .gpukit/part00 .gpukit/tok .gpukit/wheels
#            bash scripts/gpu_serve_check.sh stash      carry .gpukit/part01
#            bash scripts/gpu_serve_check.sh run        carry .gpukit/part02 [.gpukit/wheels after a rebuild]
#            bash scripts/gpu_serve_check.sh parity     (gpu_check.py v1/v2 x eager/compiled; same machine)
#            bash scripts/gpu_serve_check.sh bench plain      (scripts/gpu_serve_bench.py: vllm serve, 8B-shaped
#            bash scripts/gpu_serve_check.sh bench null        dummy model, vllm bench serve; one call each,
#            bash scripts/gpu_serve_check.sh bench guarded     ~7 min; the null server is the control)
# Results land in $OUT: serve_check.json, serve_compiled.log, serve_eager.log, setup.log (and parity.json,
# parity.log; serve_bench_SERVER.tgz: the summary, the server log and vllm bench serve's raw results).
set -uo pipefail
SITE=${SITE:-/tmp/site}
STASH=/tmp/gpukit
OUT=${OUT:-/tmp/gpu_serve_out}
mkdir -p "$STASH" "$OUT"
# Whatever this call carried; a later call's copy (a rebuilt wheel) wins.
for item in .gpukit/part0* .gpukit/SHA256SUMS.parts .gpukit/tok .gpukit/wheels; do
  [ -e "$item" ] && cp -r "$item" "$STASH"/
done
export PYTHONPATH="$SITE" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1

install() {
  # gpu_setup.sh installs the kit once and then the wheels of .gpukit/wheels.
  mkdir -p .gpukit && rm -rf .gpukit/wheels && cp -r "$STASH"/wheels .gpukit/wheels
  bash scripts/gpu_setup.sh install
}

unpack_tokenizer() {
  [ -f "$STASH/tok/tokenizer.json" ] || python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.decompress(open(sys.argv[1],'rb').read()))" \
      "$STASH"/tok/tokenizer.json.xz "$STASH"/tok/tokenizer.json
}

case "${1:?usage: gpu_serve_check.sh stash|run|parity|bench plain|null|guarded}" in
stash)
  ls -l "$STASH" "$STASH"/wheels "$STASH"/tok 2>/dev/null
  ;;
run)
  t0=$(date +%s)
  install > "$OUT"/setup.log 2>&1; rc=$?
  tail -3 "$OUT"/setup.log
  echo "[gpu_serve_check] install rc=$rc in $(( $(date +%s) - t0 ))s"
  [ $rc = 0 ] || exit $rc
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
  python3 -m innerguard.engine.cli serve --help > "$OUT"/serve_help.txt 2>&1
  echo "[gpu_serve_check] innerguard serve --help rc=$? ($(wc -l < "$OUT"/serve_help.txt) lines)"
  python3 scripts/gpu_serve_check.py /tmp/sc --tokenizer "$STASH"/tok --out "$OUT" --modes ${MODES:-compiled eager}
  ;;
parity)
  [ -f "$SITE/.kit-installed" ] || install > "$OUT"/setup.log 2>&1
  unpack_tokenizer
  python3 scripts/gpu_check.py all /tmp/gc --tokenizer "$STASH"/tok --only ${RUNS:-v1_eager v2_eager v1_compiled v2_compiled} \
      --timeout ${RUN_TIMEOUT:-120} > "$OUT"/parity.log 2>&1; rc=$?
  cp /tmp/gc/summary.json "$OUT"/parity.json 2>/dev/null
  grep -h "ok\|RESULT" "$OUT"/parity.log | cut -c1-400 | tail -8
  exit $rc
  ;;
bench)
  [ -f "$SITE/.kit-installed" ] || install > "$OUT"/setup.log 2>&1
  unpack_tokenizer
  [ -d /tmp/sb/llama-8b-dummy ] || python3 scripts/gpu_serve_bench.py make /tmp/sb --tokenizer "$STASH"/tok
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
  # The device returns only a few files a call: the run's files come back as one archive.
  python3 scripts/gpu_serve_bench.py run /tmp/sb --server "${2:?plain, null or guarded}" --out /tmp/sb-out ${BENCH_ARGS:-}; rc=$?
  tar czf "$OUT"/serve_bench_"$2".tgz -C /tmp/sb-out .
  exit $rc
  ;;
esac
