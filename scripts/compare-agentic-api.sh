#!/usr/bin/env bash
# scripts/compare_agentic_api.py with the project's virtualenv (`make install`); the arguments go through as they are.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$root/.venv/bin/python" "$root/scripts/compare_agentic_api.py" "$@"
