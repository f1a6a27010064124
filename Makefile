# rmqstore — every target sets itself up from nothing: venv, packages, protos, system packages.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STORE ?= ./data/store
PROTOS := $(wildcard protos/rmqstore/v1/*.proto)
# RocketMQ 5's protocol (package apache.rocketmq.v2), for the proxy
RMQ_PROTOS := $(wildcard protos/rmqstore/rocketmq/*.proto)
PB2 := $(patsubst protos/%.proto,%_pb2.py,$(PROTOS) $(RMQ_PROTOS))
PYTEST_ARGS ?=
# two workers (2 cores); a test file stays on one worker, so its module fixtures start once
PYTEST_PARALLEL ?= -n 2 --dist loadfile --no-loadscope-reorder
CONSOLE_TESTS := tests/services/console
AXE := $(CONSOLE_TESTS)/node_modules/axe-core/axe.min.js
# `make run`'s demo store: 64 MiB commitlog segments, 8.4 MB index files (100,000 slots,
# 400,000 entries), 200 KB consume-queue files (10,000 entries); `rmqstore serve` alone
# defaults to RocketMQ's sizes (1 GiB segments, 420 MB index files, 6 MB queue files).
RUN_SIZES ?= --commitlog-segment-size 67108864 --index-slots 100000 --index-entries 400000 \
             --cq-entries-per-file 10000

.DEFAULT_GOAL := help
.PHONY: help setup protos apt-deps system-deps test-deps run test soak bench lint fmt clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,spark]'
	touch $@

rmqstore/v1/%_pb2.py: protos/rmqstore/v1/%.proto $(VENV)/.installed
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. $<

rmqstore/rocketmq/%_pb2.py: protos/rmqstore/rocketmq/%.proto $(VENV)/.installed
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. $<

protos: $(PB2) ## generate Python code from protos/

system-deps: apt-deps $(AXE) ## install what Debian and npm must provide for the tests

apt-deps: ## apt-get what Debian must provide (Java for Spark, Prometheus, Chromium, Node.js)
	@missing=""; \
	command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$( [ "$$(id -u)" = 0 ] || echo sudo ) \
	    apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(AXE): $(CONSOLE_TESTS)/package.json | apt-deps  # axe-core for the console's accessibility test
	npm install --prefix $(CONSOLE_TESTS) --no-audit --no-fund --no-save --silent
	touch $@

# RocketMQ's official clients, run by the proxy's tests in processes of their own (never
# installed into .venv: a client library is not a dependency of served code)
CLIENTS := tests/clients

$(CLIENTS)/.venv/.installed: $(CLIENTS)/requirements.txt
	$(PY) -m venv $(CLIENTS)/.venv
	$(CLIENTS)/.venv/bin/pip install -q -r $(CLIENTS)/requirements.txt
	touch $@

$(CLIENTS)/node_modules/.installed: $(CLIENTS)/package.json $(CLIENTS)/package-lock.json | apt-deps
	cd $(CLIENTS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# ali-ons, a RocketMQ 4.x client in pure JavaScript, for the remoting tests (its own folder:
# its dependencies must not mix with the RocketMQ 5 client's)
$(CLIENTS)/remoting/node_modules/.installed: $(CLIENTS)/remoting/package.json $(CLIENTS)/remoting/package-lock.json | apt-deps
	cd $(CLIENTS)/remoting && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test-deps: system-deps $(CLIENTS)/.venv/.installed $(CLIENTS)/node_modules/.installed $(CLIENTS)/remoting/node_modules/.installed ## the official RocketMQ 5 clients (Python, Node.js) and ali-ons (4.x) for the tests

setup: $(VENV)/.installed protos ## create .venv, install packages, generate protos

run: setup ## start every service on ./data/store, small files (Ctrl-C stops them)
	$(BIN)/rmqstore serve --store $(STORE) $(RUN_SIZES)

test: setup system-deps test-deps ## the whole test suite (about 12 minutes on 2 cores, set-up apart)
	$(BIN)/python -m pytest -q -m "not soak" $(PYTEST_PARALLEL) --durations=25 $(PYTEST_ARGS)

soak: setup system-deps ## long reliability suites
	$(BIN)/python -m pytest -q -m soak $(PYTEST_ARGS)

bench: setup system-deps test-deps ## benchmarks; writes benchmarks/results/*.json and prints tables
	$(BIN)/python -m benchmarks

lint: setup ## ruff and mypy
	$(BIN)/ruff check rmqstore services pipelines tests benchmarks
	$(BIN)/mypy rmqstore services pipelines benchmarks

fmt: setup ## ruff format FILES='a.py ...' (the tree is laid out by hand: not all of it)
	@test -n "$(FILES)" || { echo "make fmt: name the files: make fmt FILES='path/a.py ...'" \
		"(the tree is laid out by hand within 100 columns; formatting all of it would" \
		"rewrite most files)" >&2; exit 2; }
	$(BIN)/ruff format $(FILES)

clean: ## remove the venv and generated code
	rm -rf $(VENV) rmqstore/v1/*_pb2*.py rmqstore/v1/*_pb2*.pyi rmqstore/rocketmq/*_pb2*.py \
	  rmqstore/rocketmq/*_pb2*.pyi
