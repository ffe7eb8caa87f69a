#!/usr/bin/env bash
# The sandbox (src/hotloop/sandbox, docs/sandbox.md) runs server-run code under bubblewrap: Debian's `bubblewrap`
# package, installed when missing (tests/test_sandbox.py calls this, as CI starts from a machine without it).
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "bwrap is missing: install Debian's 'bubblewrap' package (apt-get install bubblewrap)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
command -v bwrap >/dev/null
