#!/usr/bin/env bash
# `make compose-smoke`: builds the image and starts docker-compose.yml for real, under
# Debian's podman (runc, cgroupfs) driven by Debian's docker-compose v1 through podman's
# Docker-compatible socket, then: a message through the API gets the scripted model's reply;
# one agent runner is SIGKILLed and messages still get replies; `docker-compose down` stops
# everything cleanly. Prints a timing per step.
#
# Public registries are out of reach here, so the images docker-compose.yml names are made
# locally: a Debian rootfs (mmdebstrap) imported as debian:bookworm-slim; nanobot-fleet from
# deploy/Dockerfile's `prebuilt` target with the suite's debug binaries (the `image` target
# needs rust:1.95-bookworm); nats, redis and the trace backend (Phoenix for Jaeger) from the
# binaries the suite installs (deploy/smoke/Containerfile.*). deploy/smoke/compose.smoke.yml
# adds the scripted model and gives config-scope a config that uses it.
#
# Needs root (podman's default network), ports 127.0.0.1:4222, 6379, 8900, 16686 free, and
# about 3 GB in podman's storage. Everything it starts is stopped on exit, by pid or by
# compose project (nanobot-smoke); its images stay for the next run (SMOKE_REBUILD=1 redoes
# them). Killed mid-way (SIGKILL), it leaves the project's containers and its podman service
# running: the next run ends that service (by its recorded pid) and removes the old project
# before starting.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${SMOKE_DIR:-/tmp/nanobot-compose-smoke}"
project=nanobot-smoke
bins="${CARGO_TARGET_DIR:-$HOME/.cache/nanobot/target}/debug"
mkdir -p "$work"
started=$(date +%s)
step() { printf '[smoke %4ss] %s\n' "$(($(date +%s) - started))" "$*"; }
fail() { printf '[smoke] FAILED: %s\n' "$*" >&2; exit 1; }

# Podman as this machine runs it: runc (crun fails on its hybrid cgroups), cgroupfs, and
# ulimits below the host's (equal ones fail with EPERM).
export CONTAINERS_CONF="$work/containers.conf"
cat > "$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
init_path = "/usr/bin/catatonit"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF


image_missing() { [ -n "${SMOKE_REBUILD:-}" ] || ! podman image exists "$1"; }

# --- images ---------------------------------------------------------------------------------
if image_missing docker.io/library/debian:bookworm-slim; then
  step "debian:bookworm-slim from mmdebstrap"
  mmdebstrap --quiet --variant=minbase bookworm "$work/rootfs.tar"
  podman import -q "$work/rootfs.tar" docker.io/library/debian:bookworm-slim >/dev/null
  rm -f "$work/rootfs.tar"
fi
build() { # tag, containerfile, context
  podman build -q -f "$2" -t "$1" "$3" >/dev/null
}
ctx="$work/ctx"
rm -rf "$ctx" && mkdir -p "$ctx"
if image_missing docker.io/library/nats:2.11-alpine; then
  step "nats:2.11-alpine (stand-in)"
  cp "$(readlink -f "$(command -v nats-server)")" "$ctx/nats-server"
  build docker.io/library/nats:2.11-alpine "$root/deploy/smoke/Containerfile.nats" "$ctx"
fi
if image_missing docker.io/library/redis:7-alpine; then
  step "redis:7-alpine (stand-in)"
  cp "$root/deploy/smoke/redis-entrypoint.sh" "$ctx/"
  build docker.io/library/redis:7-alpine "$root/deploy/smoke/Containerfile.redis" "$ctx"
fi
if image_missing docker.io/jaegertracing/all-in-one:1.62.0; then
  step "jaegertracing/all-in-one:1.62.0 (stand-in: Phoenix)"
  cp -al "${NANOBOT_CACHE_DIR:-$HOME/.cache/nanobot}/phoenix-venv" "$ctx/phoenix-venv"
  build docker.io/jaegertracing/all-in-one:1.62.0 "$root/deploy/smoke/Containerfile.jaeger" "$ctx"
fi
if image_missing docker.io/prom/prometheus:v2.53.2; then
  step "prom/prometheus:v2.53.2 (stand-in: Debian's prometheus)"
  build docker.io/prom/prometheus:v2.53.2 "$root/deploy/smoke/Containerfile.prometheus" "$ctx"
fi
step "nanobot-smoke-llm (scripted model and Telegram fake)"
cp "$root/deploy/smoke/fake_llm.py" "$root/deploy/smoke/fake_telegram.py" "$ctx/"
build localhost/nanobot-smoke-llm:latest "$root/deploy/smoke/Containerfile.llm" "$ctx"
step "nanobot-fleet:latest (deploy/Dockerfile, target prebuilt, the debug binaries)"
rm -rf "$ctx" && mkdir -p "$ctx/bin"
cp -r "$root/skills" "$ctx/skills"
for b in nanobot nanobot-gateway nanobot-agent nanobot-tools nanobot-memory nanobot-cron; do
  objcopy --strip-debug "$bins/$b" "$ctx/bin/$b"
done
podman build -q -f "$root/deploy/Dockerfile" --target prebuilt \
  -t docker.io/library/nanobot-fleet:latest "$ctx" >/dev/null
rm -rf "$ctx"

# --- podman's Docker API for docker-compose --------------------------------------------------
sock="$work/podman.sock"
# A service left by a run that was SIGKILLed: end it (by its recorded pid, if it still is one).
if [ -f "$work/podman-service.pid" ]; then
  old=$(cat "$work/podman-service.pid")
  if tr '\0' ' ' < "/proc/$old/cmdline" 2>/dev/null | grep -qF "system service --time=0 unix://$sock"; then
    kill "$old" 2>/dev/null || true
  fi
fi
rm -f "$sock"
podman system service --time=0 "unix://$sock" >"$work/podman-service.log" 2>&1 &
service_pid=$!
echo "$service_pid" > "$work/podman-service.pid"
health_pid=""
compose() {
  DOCKER_HOST="unix://$sock" COMPOSE_PROJECT_NAME="$project" docker-compose \
    -f "$root/docker-compose.yml" -f "$root/deploy/smoke/compose.smoke.yml" \
    --env-file "$work/smoke.env" --compatibility "$@"
}
cleanup() {
  local rc=$?
  [ -z "$health_pid" ] || kill "$health_pid" 2>/dev/null || true
  if [ -S "$sock" ] && [ -z "${SMOKE_KEEP:-}" ]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  kill "$service_pid" 2>/dev/null || true
  wait "$service_pid" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || fail "podman system service did not listen on $sock"

# Podman schedules health checks with systemd timers, and there is no systemd here: run each
# container's check every 2 s ourselves, so compose's `condition: service_healthy` works.
(
  while sleep 2; do
    for id in $(podman ps -q --filter "label=com.docker.compose.project=$project"); do
      podman healthcheck run "$id" >/dev/null 2>&1 || true
    done
  done
) &
health_pid=$!

# --- credentials, config, up --------------------------------------------------------------------
rm -f "$work/smoke.env"
"$root/scripts/credentials-env.sh" "$work/smoke.env" "$root/docker-compose.yml" >/dev/null
mkdir -p "$work/config"
cat > "$work/config/config.json" <<'EOF'
{
  "agents": {"defaults": {"workspace": "/workspace", "model": "smoke-model"}},
  "providers": {"custom": {"apiBase": "http://llm:8080/v1", "apiKey": "smoke-key"}},
  "channels": {"telegram": {"enabled": true, "token": "123456:SMOKE-token", "allowFrom": ["42"],
    "apiBase": "http://telegram:8081"}},
  "api": {"port": 8900}
}
EOF
chmod 644 "$work/config/config.json"
echo "NANOBOT_SMOKE_CONFIG=$work/config" >> "$work/smoke.env"
api_key=$(grep '^NANOBOT_API_KEY=' "$work/smoke.env" | cut -d= -f2-)

# What a killed run left (its containers hold the ports), then the ports compose publishes.
compose down -v --remove-orphans >/dev/null 2>&1 || true
for port in 4222 6379 8900 9090 16686; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    fail "127.0.0.1:$port is taken (docker-compose.yml publishes it)"
  fi
done
step "docker-compose up"
compose up -d --no-build >"$work/compose-up.log" 2>&1 || { cat "$work/compose-up.log"; fail "docker-compose up"; }
step "up returned; running: $(podman ps --filter "label=com.docker.compose.project=$project" --format '{{.Names}}' | tr '\n' ' ')"

ask() { # session, text -> reply text
  curl -sf --max-time 60 http://127.0.0.1:8900/v1/chat/completions \
    -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' \
    -d "{\"model\": \"smoke-model\", \"session_id\": \"$1\", \"messages\": [{\"role\": \"user\", \"content\": \"$2\"}]}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'
}
expect_reply() { # session, text
  local reply
  reply=$(ask "$1" "$2") || { compose logs --tail 30 >&2 || true; fail "no reply to '$2'"; }
  [ "$reply" = "smoke-reply: $2" ] || fail "reply to '$2' was '$reply'"
  step "reply: $reply"
}
for _ in $(seq 120); do
  curl -sf --max-time 2 http://127.0.0.1:8900/v1/models -H "Authorization: Bearer $api_key" >/dev/null && break
  sleep 1
done
# The trace backend (Phoenix, tens of seconds to start) must be listening before the turns
# whose spans are checked: an export that finds no collector drops its batch.
for _ in $(seq 120); do
  curl -sf --max-time 2 -o /dev/null http://127.0.0.1:16686/ && break
  sleep 1
done
step "gateway and trace backend answer"
expect_reply smoke-1 "hello from compose 你好 🚀"

# A Telegram message (the fake's user 42) is answered in that chat.
telegram=$(podman ps -q --filter "label=com.docker.compose.project=$project" \
  --filter "label=com.docker.compose.service=telegram")
tg() { # path [json body] -> the control endpoint's answer
  podman exec "$telegram" python3 -c 'import sys, urllib.request as u
body = sys.argv[2].encode() if len(sys.argv) > 2 else None
req = u.Request("http://127.0.0.1:8082" + sys.argv[1], data=body, headers={"Content-Type": "application/json"})
print(u.urlopen(req).read().decode())' "$@"
}
tg /inject '{"text": "hello from telegram 你好 🤖"}' >/dev/null
# The reply streams (a preview edited in place): wait for its whole text, emoji included.
tg_has() { # text -> whether the fake was sent (or edited a message to) exactly that text
  tg /sent | python3 -c 'import json, sys; sys.exit(0 if any(m["text"] == sys.argv[1] for m in json.load(sys.stdin)) else 1)' "$1"
}
tg_reply='smoke-reply: hello from telegram 你好 🤖'
for _ in $(seq 60); do
  tg_has "$tg_reply" && break
  sleep 1
done
tg_has "$tg_reply" \
  || { compose logs --tail 30 nanobot-gateway >&2 || true; fail "no Telegram reply: $(tg /sent)"; }
step "telegram reply: $tg_reply"

agents=$(podman ps -q --filter "label=com.docker.compose.project=$project" \
  --filter "label=com.docker.compose.service=nanobot-agent")
[ "$(echo "$agents" | wc -w)" = 2 ] || fail "expected 2 agent containers, found: $agents"
agent=${agents%%$'\n'*}
llm=$(podman ps -q --filter "label=com.docker.compose.project=$project" \
  --filter "label=com.docker.compose.service=llm")
# A turn in flight (the model answers in 8 s) when one of the two runners is SIGKILLed: if
# that runner held the turn, the other takes the session over and redoes it (the model is
# asked twice); either way the reply arrives once.
slow="slow turn 慢 🐢"
expect_reply smoke-slow "$slow" > "$work/slow.out" 2>&1 &
asker=$!
for _ in $(seq 100); do
  podman logs "$llm" 2>/dev/null | grep -qF "request: $slow" && break
  sleep 0.1
done
step "SIGKILL agent container $agent mid-turn"
podman kill -s KILL "$agent" >/dev/null
wait "$asker" || { cat "$work/slow.out"; fail "the turn in flight was not answered"; }
cat "$work/slow.out"
asked=$(podman logs "$llm" 2>/dev/null | grep -cF "request: $slow" || true)
step "the model was asked $asked time(s) for the turn in flight (2: the killed runner held it)"
for i in 1 2 3; do
  expect_reply "smoke-after-kill-$i" "after the kill $i"
done
expect_reply smoke-1 "again in the first session"

# The roles export their spans to the trace backend (the `jaeger` service): the API turns
# are there, gateway and agent spans.
traces=""
for _ in $(seq 60); do
  traces=$(curl -sf --max-time 5 "http://127.0.0.1:16686/v1/projects/default/spans?limit=1000" || true)
  grep -q '"name":"api_completion"' <<<"$traces" && grep -q '"name":"turn"' <<<"$traces" && break
  sleep 1
done
grep -q '"name":"api_completion"' <<<"$traces" && grep -q '"name":"turn"' <<<"$traces" \
  || fail "no api_completion and turn spans in the trace backend"
step "trace backend holds $(grep -o '"span_id"' <<<"$traces" | wc -l) spans, api_completion and turn among them"

# The monitoring profile's Prometheus (started by name: Grafana has no stand-in) finds every
# replica by DNS, labels it with its role, scrapes its /metrics, and loads the alert rules.
compose up -d --no-deps prometheus >>"$work/compose-up.log" 2>&1 || { cat "$work/compose-up.log"; fail "prometheus up"; }
prom() { curl -sf --max-time 5 "http://127.0.0.1:9090/api/v1/$1"; }
scraped() {
  prom 'query?query=count%20by%20(role)%20(up%7Bjob%3D%22nanobot%22%7D%20%3D%3D%201)' \
    | python3 -c 'import json,sys; print(" ".join(sorted(r["metric"]["role"] + "=" + r["value"][1] for r in json.load(sys.stdin)["data"]["result"])))'
}
want="agent=1 cron=1 gateway=1 memory=1 tools=2"
for _ in $(seq 90); do
  [ "$(scraped 2>/dev/null)" = "$want" ] && break
  sleep 1
done
[ "$(scraped)" = "$want" ] || fail "Prometheus scrapes '$(scraped)', want '$want'"
rules=$(prom rules | python3 -c 'import json,sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
[ "$rules" -ge 9 ] || fail "Prometheus loaded $rules rules"
turns=$(prom 'query?query=sum(nanobot_turns_total)' | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
step "Prometheus scrapes the roles up ($want; one agent was killed), $rules alert rules, $turns turns counted"

# Stop: every role exits on SIGTERM within compose's 10 s (exit 0), then the stack is removed.
step "docker-compose stop"
compose stop >"$work/compose-stop.log" 2>&1 || { cat "$work/compose-stop.log"; fail "docker-compose stop"; }
for id in $(podman ps -aq --filter "label=com.docker.compose.project=$project"); do
  [ "$id" = "$agent" ] && continue
  name=$(podman inspect -f '{{.Name}}' "$id")
  code=$(podman inspect -f '{{.State.ExitCode}}' "$id")
  case "$name" in
    *_nanobot-*) [ "$code" = 0 ] || { podman logs --tail 15 "$id" >&2 || true
                   fail "$name exited $code on SIGTERM"; } ;;
  esac
done
step "every role exited 0 on SIGTERM"
step "docker-compose down"
compose down -v --remove-orphans >"$work/compose-down.log" 2>&1 || { cat "$work/compose-down.log"; fail "docker-compose down"; }
left=$(podman ps -aq --filter "label=com.docker.compose.project=$project" | wc -l)
[ "$left" = 0 ] || fail "$left containers left after down"
step "PASSED: stack built, answered, survived a SIGKILLed runner, stopped cleanly"
