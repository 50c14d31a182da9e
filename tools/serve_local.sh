#!/usr/bin/env bash
# The README's main job: a real vLLM engine (CPU-friendly settings) on the
# tiny test model, and our frontend on http://127.0.0.1:${PORT:-8000}.
# Ctrl-C (or SIGTERM) stops both. Override MODEL=dir to serve another model.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${PORT:-8000}
ENGINE_PORT=${ENGINE_PORT:-29550}
MODEL=${MODEL:-build/tiny-model}
SERVED_NAME=${SERVED_NAME:-tiny}
BIN=.venv/bin

if [ "$MODEL" = build/tiny-model ] && [ ! -f "$MODEL/model.safetensors" ]; then
    echo "serve: building the tiny test model into $MODEL" >&2
    "$BIN/python" -m tools.make_tiny_model "$MODEL"
fi
mkdir -p build
echo "serve: starting the engine (log: build/engine.log)" >&2
"$BIN/engine-core" --model "$MODEL" --frontend-addr "tcp://127.0.0.1:$ENGINE_PORT" \
    --max-model-len 1024 --dtype float32 --served-model-name "$SERVED_NAME" \
    > build/engine.log 2>&1 &
engine_pid=$!
stop_engine() { kill -TERM "$engine_pid" 2>/dev/null || true; wait "$engine_pid" 2>/dev/null || true; }
trap stop_engine EXIT

# Not exec: the trap must stop the engine when the frontend exits.
"$BIN/frontend" --engine-addr "tcp://127.0.0.1:$ENGINE_PORT" --model "$MODEL" \
    --served-model-name "$SERVED_NAME" --host 127.0.0.1 --port "$PORT" &
frontend_pid=$!
trap 'kill -TERM $frontend_pid 2>/dev/null || true' INT TERM
wait "$frontend_pid" || true
wait "$frontend_pid" 2>/dev/null || true
