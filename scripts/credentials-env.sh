#!/usr/bin/env bash
# Writes the credentials deployment files require into an env file (mode 0600): a random
# 64-hex-digit value for every NANOBOT_NATS_<ROLE>_PASSWORD, NANOBOT_REDIS_<ROLE>_PASSWORD and
# NANOBOT_API_KEY the files name. Values already in the env file are kept, so running it again
# only fills in what is missing: delete a line to rotate that credential. A password the files
# also name as <VAR>_SHA256 (docker-compose.yml gives Redis its users as `#<sha256>`, so no
# password shows in the server's command line or `docker inspect`) gets that line too,
# recomputed from the password on every run.
#
#   scripts/credentials-env.sh                                  # ./.env for docker-compose.yml
#   scripts/credentials-env.sh creds.env deploy/k8s/base/*.yaml  # the Kubernetes Secret's keys
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/.env}"
if [ $# -gt 1 ]; then files=("${@:2}"); else files=("$root/docker-compose.yml"); fi
vars=$(grep -ohE 'NANOBOT_(NATS|REDIS)_[A-Z]+_PASSWORD|NANOBOT_API_KEY' "${files[@]}" | sort -u)
# Files that name no hashed password (the Kubernetes manifests) are fine: grep finds none.
hashed=$({ grep -ohE 'NANOBOT_(NATS|REDIS)_[A-Z]+_PASSWORD_SHA256' "${files[@]}" || true; } | sort -u)
if [ -z "$vars" ]; then
  echo "credentials-env: ${files[*]} name no credentials" >&2
  exit 1
fi
umask 077
touch "$out"
chmod 600 "$out"
for var in $vars; do
  if ! grep -q "^${var}=" "$out"; then
    echo "${var}=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >> "$out"
    echo "credentials-env: generated ${var} in ${out}"
  fi
done
if [ -n "$hashed" ]; then
  kept=$(grep -vE '^NANOBOT_[A-Z_]+_SHA256=' "$out" || true)
  {
    [ -z "$kept" ] || printf '%s\n' "$kept"
    for hash_var in $hashed; do
      var="${hash_var%_SHA256}"
      value=$(grep -m1 "^${var}=" "$out" | cut -d= -f2-)
      echo "${hash_var}=$(printf '%s' "$value" | sha256sum | cut -d' ' -f1)"
    done
  } > "$out.tmp"
  mv "$out.tmp" "$out"
fi
