#!/usr/bin/env bash
# Installs the benchmark baseline, upstream nanobot (`nanobot-ai`, plus aiohttp for
# `nanobot serve`), into its own venv, idempotently. Never fails the caller: when the install
# is impossible the suite runs anyway and reports the baseline as unavailable, with the reason.
#
# Usage: bench/scripts/install_upstream.sh [VENV]   (default: $HOME/.cache/nanobot/upstream-venv)
# Env: UPSTREAM_VERSION (default 0.3.5, the version the issue's figures were taken with).
set -uo pipefail

venv="${1:-${NANOBOT_CACHE_DIR:-$HOME/.cache/nanobot}/upstream-venv}"
version="${UPSTREAM_VERSION:-0.3.5}"
log() { printf 'bench: %s\n' "$*" >&2; }

installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("nanobot-ai"))' 2>/dev/null || true)"
if [ "$installed" = "$version" ] && "$venv/bin/python" -c 'import aiohttp' 2>/dev/null; then
  log "upstream nanobot-ai $installed already in $venv"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  log "python3 not found: the upstream baseline will be reported unavailable"
  exit 0
fi
log "installing upstream nanobot-ai $version into $venv"
if python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q "nanobot-ai==$version" aiohttp >&2; then
  log "upstream nanobot-ai $version installed"
else
  log "installing nanobot-ai failed: the upstream baseline will be reported unavailable"
fi
exit 0
