# nanobot-fleet — the single developer entry point. `make help` lists the targets.
#
#   make run     install what is missing, build, start the local fleet, open a chat
#   make test    install what the tests need, build, run every test
#
# Variables: CONFIG=path (config file, default ~/.nanobot/config.json), RUN_DIR=path (pids,
# logs and data of the local fleet, default ~/.nanobot/run), CARGO_TARGET_DIR (shared build
# cache, default ~/.cache/nanobot/target).
SHELL := /bin/bash
.DEFAULT_GOAL := help

export CARGO_TARGET_DIR ?= $(HOME)/.cache/nanobot/target
export NANOBOT_CACHE_DIR ?= $(HOME)/.cache/nanobot
BIN_CACHE := $(NANOBOT_CACHE_DIR)/bin
export PATH := $(BIN_CACHE):$(HOME)/.cargo/bin:$(PATH)
DEBUG_BIN := $(CARGO_TARGET_DIR)/debug

CONFIG ?=
RUN_DIR ?=
NANOBOT := $(DEBUG_BIN)/nanobot$(if $(CONFIG), --config $(CONFIG))
RUN_FLAGS := $(if $(RUN_DIR),--run-dir $(RUN_DIR))
# The roles find the builtin skills of this checkout (the binaries live outside it).
# UNCONFINED=1: one login every role shares, exec without the sandbox (`nanobot up --unconfined`).
UP := NANOBOT_SKILLS_DIR="$${NANOBOT_SKILLS_DIR:-$(CURDIR)/skills}" $(NANOBOT) up $(RUN_FLAGS)$(if $(UNCONFINED), --unconfined)
LINK := $(HOME)/.cargo/bin/nanobot

.PHONY: help deps deps-model deps-test build dist link run up down status logs test test-unit lint \
	fmt proto compose-check compose-env clean-run image compose-smoke

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

deps: ## Install nats-server and redis-server if missing (into ~/.cache/nanobot)
	@scripts/deps.sh core >/dev/null

deps-model: ## Install the local default model (SmolLM2-135M served by xllamacpp)
	@scripts/deps.sh model >/dev/null

deps-test: ## Install what the tests need: nats-server, redis-server, the MCP servers, the local model, docker-compose, kubectl, kubernetes-validate, dovecot and aiosmtpd, chromium, Phoenix (trace store), promtool, and podman, runc, mmdebstrap (the compose smoke test)
	@scripts/deps.sh core compose model k8s email browser traces monitoring containers >/dev/null

build: ## Build every binary (debug)
	cargo build --workspace --bins

dist: ## Build the binaries the container image ships (fat LTO: smaller, slower to build)
	cargo build --profile dist --workspace --bins

link: ## Put `nanobot` on PATH (a symlink in ~/.cargo/bin)
	@mkdir -p $(dir $(LINK)) && ln -sf $(DEBUG_BIN)/nanobot $(LINK)
	@echo "linked $(LINK) -> $(DEBUG_BIN)/nanobot"

run: deps deps-model build ## Start NATS, Redis, the local model and every role on 127.0.0.1, then chat
	@$(NANOBOT) onboard >/dev/null
	$(UP)
	@$(MAKE) --no-print-directory link
	@echo "the fleet keeps running in the background; stop it with 'make down'"
	@if [ -t 0 ]; then $(NANOBOT) agent; \
	else echo "stdin is not a terminal, so no chat; try: nanobot agent -m hello"; fi

up: deps deps-model build ## Start the local fleet in the background (no chat)
	@$(NANOBOT) onboard >/dev/null
	$(UP)
	@$(MAKE) --no-print-directory link

down: ## Stop what `make run` / `make up` started, by pid
	@if [ -x $(DEBUG_BIN)/nanobot ]; then $(NANOBOT) down $(RUN_FLAGS); \
	else echo "nanobot is not built; nothing to stop"; fi

status: ## Show the live replicas of every role
	$(NANOBOT) status

logs: ## Show the last lines of every local fleet log
	@tail -n 15 $(or $(RUN_DIR),$(HOME)/.nanobot/run)/logs/*.log

test: deps-test build compose-check ## Run every test (unit, integration, end to end) against real NATS and Redis
	@if cargo nextest --version >/dev/null 2>&1; then \
		cargo nextest run --workspace --no-fail-fast --no-tests=pass; \
	else \
		echo "cargo-nextest not found; using cargo test"; \
		cargo test --workspace --no-fail-fast; \
	fi

test-unit: ## Unit tests only (no spawned processes)
	cargo test --workspace --lib --bins -- --skip e2e

lint: ## rustfmt check, clippy -D warnings, log-message style
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	python3 scripts/check_log_format.py

fmt: ## Format the code
	cargo fmt --all

proto: ## Regenerate proto/src/gen from the .proto files (fails if it changed)
	cargo test -p nanobot-proto --test bootstrap

compose-check: ## Validate docker-compose.yml with generated credentials (make deps-test installs docker-compose)
	@scripts/deps.sh compose >/dev/null
	@creds=$$(mktemp) && trap 'rm -f "$$creds"' EXIT && scripts/credentials-env.sh "$$creds" >/dev/null && \
		docker-compose -f docker-compose.yml --env-file "$$creds" config -q && echo "docker-compose.yml is valid"

image: ## Build the container image nanobot-fleet:latest (deploy/Dockerfile; docker if its daemon answers, else podman; CONTAINER_ENGINE=… to choose)
	@engine=$${CONTAINER_ENGINE:-$$(if docker info >/dev/null 2>&1; then echo docker; \
		elif command -v podman >/dev/null; then echo podman; else echo docker; fi)}; \
	ignore=$$([ "$$engine" = podman ] && echo "--ignorefile deploy/Dockerfile.dockerignore"); \
	echo "$$engine build -f deploy/Dockerfile $$ignore -t nanobot-fleet:latest ."; \
	$$engine build -f deploy/Dockerfile $$ignore -t nanobot-fleet:latest .

compose-smoke: build ## Build the image from the debug binaries and start docker-compose.yml for real under podman (not in `make test`: root, minutes, ~3 GB)
	@scripts/deps.sh core compose traces containers >/dev/null
	scripts/compose-smoke.sh

compose-env: ## Generate ./.env (mode 0600) with every credential docker-compose.yml requires: per-role NATS and Redis passwords, the API key (kept if present)
	@scripts/credentials-env.sh

clean-run: down ## Stop the local fleet and delete its data, logs and pids
	rm -rf $(or $(RUN_DIR),$(HOME)/.nanobot/run)

# === benchmarks (issue 6) — figures, not pass/fail; not part of `make test` =================
RELEASE_BIN := $(CARGO_TARGET_DIR)/release
UPSTREAM_VENV ?= $(HOME)/.cache/nanobot/upstream-venv

.PHONY: bench bench-smoke bench-build bench-upstream

bench-build: ## Build the release binaries the benchmarks run (and install NATS, Redis)
	@scripts/deps.sh core >/dev/null
	cargo build --release --workspace --bins

bench-upstream: ## Install the baseline, upstream nanobot-ai, into $(UPSTREAM_VENV)
	@bench/scripts/install_upstream.sh $(UPSTREAM_VENV)

bench: bench-build bench-upstream ## Full suite, fleet vs upstream: table + bench/results/latest.json
	$(RELEASE_BIN)/nanobot-bench --upstream-venv $(UPSTREAM_VENV)

bench-smoke: bench-build ## Seconds-long fleet-only variant: table + bench/results/smoke.json
	$(RELEASE_BIN)/nanobot-bench --smoke
