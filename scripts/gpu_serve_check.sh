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
#   device (one machine, calls back to back while it is warm; each call carries under 64 MiB, the tracked
#            tree included: where a part no longer fits, carry .gpukit/chunk.N instead, see reassemble):
#            bash scripts/gpu_serve_check.sh stash      carry .gpukit/part00 .gpukit/tok .gpukit/wheels
#            bash scripts/gpu_serve_check.sh stash      carry .gpukit/part01
#            bash scripts/gpu_serve_check.sh run        carry .gpukit/part02 [.gpukit/wheels after a rebuild]
#            bash scripts/gpu_serve_check.sh parity     (gpu_check.py v1/v2 x eager/compiled; same machine)
#            bash scripts/gpu_serve_check.sh bench plain      (scripts/gpu_serve_bench.py: vllm serve, 8B-shaped
#            bash scripts/gpu_serve_check.sh bench null        dummy model, vllm bench serve; one call each,
#            bash scripts/gpu_serve_check.sh bench guarded     ~7 min; the null server is the control)
#            bash scripts/gpu_serve_check.sh profile "v2:guarded-probe v2:plain-default"
#                     (one round of each under cProfile, engine in-process: $OUT/profile-RUNNER-MODE.txt)
#            DEADLINE=540 bash scripts/gpu_serve_check.sh offline "v2:guarded-default v1:guarded-probe"
#                     (benchmarks/bench_gpu.py paired, plain-default against MODE, one process per RUNNER:MODE,
#                     RUNNER v1 or v2; PAIRS pairs of rounds each; no run starts that could end past DEADLINE
#                     seconds into the call; $OUT/offline_<tag>.tgz is repacked after every run)
#                     BENCH_REQUESTS=640: requests per round (default 256, ~2 s a round on an H100: too noisy)
# Results land in $OUT: serve_check.json, serve_compiled.log, serve_eager.log, setup.log (and parity.json,
# parity.log; serve_bench_SERVER.tgz: the summary, the server log and vllm bench serve's raw results).
set -uo pipefail
SITE=${SITE:-/tmp/site}
STASH=/tmp/gpukit
OUT=${OUT:-/tmp/gpu_serve_out}
mkdir -p "$STASH" "$OUT"
# Whatever this call carried; a later call's copy (a rebuilt wheel) wins.
for item in .gpukit/part0* .gpukit/chunk.* .gpukit/chunks.txt .gpukit/SHA256SUMS.parts .gpukit/tok .gpukit/wheels; do
  [ -e "$item" ] && cp -r "$item" "$STASH"/
done

# With the tracked tree over ~16 MB, a 58 MB part no longer fits a 64 MiB call:
# here the parts are re-cut into chunks (cat part00 part01 part02 | split -b SIZE -d -a 1 - chunk.,
# then "chunk.N bytes" and "partNN bytes" lines in chunks.txt), and once every chunk is on the device the
# parts are cut back out of them. SIZE: under 64 MiB less the tracked tree, tok and wheels (at a 21.6 MiB
# tree, 2026-12-07: 5 chunks of 34,700,000 bytes, one call each; 45,000,000 no longer fits).
reassemble() {
  [ -f "$STASH/chunks.txt" ] && [ ! -f "$STASH/part02" ] || return 0
  local name size offset=0
  while read -r name size; do [ -f "$STASH/$name" ] || return 0; done < <(grep '^chunk' "$STASH/chunks.txt")
  (cd "$STASH" && cat $(grep '^chunk' chunks.txt | cut -d' ' -f1)) > /tmp/kit.all
  while read -r name size; do
    tail -c +$(( offset + 1 )) /tmp/kit.all | head -c "$size" > "$STASH/$name"
    offset=$(( offset + size ))
  done < <(grep '^part' "$STASH/chunks.txt")
  rm -f /tmp/kit.all "$STASH"/chunk.*
  (cd "$STASH" && sha256sum -c SHA256SUMS.parts) || rm -f "$STASH"/part0*
}
reassemble
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

case "${1:?usage: gpu_serve_check.sh stash|run|parity|bench plain|null|guarded|profile SPEC...|offline SPEC...}" in
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
profile)
  # One round of each RUNNER:MODE under cProfile, the engine in this process
  # (bench_gpu.py MODE --profile): where a guarded step's host time goes.
  [ -f "$SITE/.kit-installed" ] || install > "$OUT"/setup.log 2>&1
  unpack_tokenizer
  [ -d /tmp/bg/llama-1.5b-random ] || python3 benchmarks/bench_gpu.py make /tmp/bg --tokenizer "$STASH"/tok > "$OUT"/make.log 2>&1 || exit 1
  failed=0
  for spec in ${2:?profile "RUNNER:MODE ...", RUNNER v1 or v2}; do
    runner=${spec%%:*} mode=${spec#*:}
    case $runner in v1) v2flag=0 ;; v2) v2flag=1 ;; *) echo "bad runner in $spec"; exit 2 ;; esac
    VLLM_USE_V2_MODEL_RUNNER=$v2flag timeout -k 10 ${RUN_TIMEOUT:-240} python3 benchmarks/bench_gpu.py "$mode" /tmp/bg \
        --profile "$OUT"/profile-$runner-$mode.txt > "$OUT"/profile-$runner-$mode.log 2>&1 || failed=1
    echo "[profile] $spec rc=$? $(grep -h RESULT "$OUT"/profile-$runner-$mode.log | cut -c1-300)"
  done
  exit $failed
  ;;
offline)
  t0=$(date +%s)
  deadline=${DEADLINE:-540}
  run_s=${RUN_S:-150}  # one paired run: two engines up, warm-up, eight pairs of rounds (fewer PAIRS: less)
  specs=${2:?offline "RUNNER:MODE ...", RUNNER v1 or v2}
  tag=$(echo "$specs" | tr ' :' '_-')
  [ -f "$SITE/.kit-installed" ] || install > "$OUT"/setup.log 2>&1
  unpack_tokenizer
  # A second call on the same machine repeats specs of the first: its own folder, its own archive.
  rm -rf /tmp/bg-out && mkdir -p /tmp/bg-out
  [ -d /tmp/bg/llama-1.5b-random ] || python3 benchmarks/bench_gpu.py make /tmp/bg --tokenizer "$STASH"/tok > /tmp/bg-out/make.log 2>&1 \
      || { tail -20 /tmp/bg-out/make.log; tar czf "$OUT"/offline_"$tag".tgz -C /tmp/bg-out .; exit 1; }
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
  failed=0
  : > /tmp/bg-out/runs.txt
  for spec in $specs; do
    runner=${spec%%:*} mode=${spec#*:}
    case $runner in v1) v2flag=0 ;; v2) v2flag=1 ;; *) echo "bad runner in $spec"; exit 2 ;; esac
    elapsed=$(( $(date +%s) - t0 ))
    if (( elapsed + run_s > deadline )); then
      echo "[offline] skipped $spec: ${elapsed}s in, a run takes ~${run_s}s, deadline ${deadline}s" | tee -a /tmp/bg-out/runs.txt
      continue
    fi
    log=/tmp/bg-out/paired-$runner-$mode.log
    t1=$(date +%s)
    # A hung engine is cut off before the device's own limit, so the archive is still packed.
    VLLM_USE_V2_MODEL_RUNNER=$v2flag timeout -k 10 $(( ${CALL_LIMIT:-585} - elapsed )) python3 benchmarks/bench_gpu.py paired /tmp/bg --modes plain-default "$mode" \
        --rounds "${PAIRS:-8}" --out /tmp/bg-out > "$log" 2>&1; rc=$?
    (( rc == 0 )) || failed=1
    echo "[offline] $spec rc=$rc $(( $(date +%s) - t1 ))s tracebacks=$(grep -c Traceback "$log")" | tee -a /tmp/bg-out/runs.txt
    grep -h "RESULT" "$log" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()[7:]); print(' ', r['median_ratio'], r['blocked_per_round'])" 2>/dev/null
    (( rc == 0 )) || tail -5 "$log"
    # The packing after every run: a call cut off at its limit still brings back what finished.
    tar czf "$OUT"/offline_"$tag".tgz -C /tmp/bg-out .
  done
  tar czf "$OUT"/offline_"$tag".tgz -C /tmp/bg-out .
  exit $failed
  ;;
esac
