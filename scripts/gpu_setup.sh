#!/usr/bin/env bash
# Installs vLLM (the offline kit of ../shared/gpukit) and innerguard on a GPU
# machine with no network, into $SITE (default /tmp/site), through the device
# tool, whose calls carry at most 64 MiB each:
#
#   here:    mkdir -p .gpukit/wheels && cp ../shared/gpukit/* .gpukit/
#            pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                --platform manylinux2014_x86_64 structlog google-re2 -d .gpukit/wheels
#            .venv/bin/pip wheel --no-deps --no-build-isolation . -w .gpukit/wheels
#   device:  bash scripts/gpu_setup.sh stash      (three calls, carrying .gpukit/part00, part01, part02)
#            bash scripts/gpu_setup.sh install    (in the third call, or the next, while the machine is warm)
#   then:    export PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
set -euo pipefail
SITE=${SITE:-/tmp/site}
STASH=/tmp/gpukit
mkdir -p "$STASH"
cp .gpukit/part0* .gpukit/SHA256SUMS.parts "$STASH"/ 2>/dev/null || true
case "${1:?usage: gpu_setup.sh stash|install}" in
stash)
  ls -l "$STASH"
  ;;
install)
  if [ ! -f "$SITE/.kit-installed" ]; then
    (cd "$STASH" && sha256sum -c SHA256SUMS.parts)
    cat "$STASH"/part00 "$STASH"/part01 "$STASH"/part02 > /tmp/kit.tar.xz
    python3 -c "import tarfile; tarfile.open('/tmp/kit.tar.xz').extractall('/tmp', filter='data')"
    SKIP_SMOKE=1 bash /tmp/kit/run_all.sh "$SITE"
    touch "$SITE/.kit-installed"
  fi
  # innerguard and the two dependencies the kit lacks; again after every rebuild of the wheel.
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .gpukit/wheels/*.whl
  PYTHONPATH="$SITE" python3 -c "import innerguard.hooks.plugin, vllm; print('innerguard on vLLM', vllm.__version__)" 2>&1 | tail -1
  ;;
esac
