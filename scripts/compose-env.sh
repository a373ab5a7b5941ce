#!/usr/bin/env bash
# Writes ./.env for docker-compose.yml with generated NATS and Redis passwords (mode 0600).
# An existing .env that already sets them is left alone, so volumes keep working across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077
touch .env
chmod 600 .env
for var in NANOBOT_NATS_PASSWORD NANOBOT_REDIS_PASSWORD; do
  if ! grep -q "^${var}=" .env; then
    echo "${var}=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >> .env
    echo "compose-env: generated ${var} in .env"
  fi
done
