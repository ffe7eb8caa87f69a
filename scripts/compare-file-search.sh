#!/usr/bin/env bash
# scripts/bench_file_search.py with the project's virtualenv (`make install`); the arguments go through as they are.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$root/.venv/bin/python" "$root/scripts/bench_file_search.py" "$@"
