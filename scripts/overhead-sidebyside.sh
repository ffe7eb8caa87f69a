#!/bin/bash
# Per-turn overhead of an earlier commit's server and the current one, side by side in one run (docs/benchmarks-history.md,
# "A resent history"): two rounds of before, now; each a `hotloop serve --workers 1` process of that code, driven by
# the current bench client from its own process, for every history shape.
#   scripts/overhead-sidebyside.sh BEFORE_REV [SIZES]
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${1:?usage: scripts/overhead-sidebyside.sh BEFORE_REV [SIZES]}
SIZES=${2:-1000,100000}
TREE=$(mktemp -d)/before
git worktree add -q --detach "$TREE" "$BEFORE"
trap 'git worktree remove --force "$TREE"' EXIT
PY=.venv/bin/python
for round in 1 2; do
  for code in before now; do
    if [ "$code" = before ]; then SRC="$TREE/src"; else SRC="$PWD/src"; fi
    DATA=$(mktemp -d)
    PORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    PYTHONPATH="$SRC" $PY -m hotloop serve --port "$PORT" --workers 1 --models hotloop-sim \
      --default-model hotloop-sim --data-dir "$DATA" --log-level warning --ws-ping-interval-s 0 >/dev/null 2>&1 &
    PID=$!
    for _ in $(seq 200); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
    for shape in tools message items; do
      echo "round $round, $code ($([ "$code" = before ] && echo "$BEFORE" || git rev-parse --short HEAD)), history $shape, load $(cut -d' ' -f1 /proc/loadavg)"
      .venv/bin/hotloop bench overhead --base-url "http://127.0.0.1:$PORT/v1" --context-tokens "$SIZES" \
        --history "$shape" --samples 30 --quiet
    done
    kill "$PID"; wait "$PID" 2>/dev/null || true; rm -rf "$DATA"
  done
done
