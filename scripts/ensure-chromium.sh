#!/usr/bin/env bash
# The console's browser test needs a headless Chromium: Debian's `chromium` package, installed when missing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "chromium is missing: install Debian's 'chromium' package (apt-get install chromium)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
command -v chromium >/dev/null
