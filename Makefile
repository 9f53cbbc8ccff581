# llm-bringup developer entry points. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export LANG := C.UTF-8
export LC_ALL := C.UTF-8
export ANSIBLE_FORCE_COLOR := 0
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)

# Molecule scenarios `make molecule` / `make test` run (all of molecule/ that are proven green).
SCENARIOS ?= harness verify ssh_mesh ssh_mesh_port engine_host engine_image engine_image_airgap weights weights-faults

.PHONY: help venv docker-engine sim-stub image lint unit units-verify molecule e2e e2e-own e2e-ctr perf perf-smoke test demo clean engine-check

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

venv: ## controller venv with the pinned toolchain (idempotent)
	@scripts/bootstrap-venv

docker-engine: ## make sure a Docker engine answers (installs docker.io as root on Debian/Ubuntu)
	@scripts/ensure-docker

sim-stub: ## compile the simulator's libcuda.so.1 stand-in (needs gcc; rebuilt only when changed)
	@tests/sim/build-libcuda-stub.sh >/dev/null

image: docker-engine sim-stub ## build (or reuse the cached) node image
	@scripts/build-node-image >/dev/null

lint: venv ## ruff + ansible-lint (production profile)
	ruff check .
	ansible-lint --offline -q

unit: venv sim-stub ## pytest: parsers, planner, patcher, simulator, engine double; stage 0's driver refusal
	pytest -q -p no:cacheprovider tests/unit tests/integration/test_preflight_engine_driver.py

units-verify: venv image ## every sample inventory's systemd units: systemd-analyze verify + started in one node
	pytest -q -p no:cacheprovider tests/integration/test_units_verify.py

molecule: venv image ## every Molecule scenario, one after another
	tests/run-molecule $(SCENARIOS)

# The suites that bring up their own clusters (an engine upgrade and rollback: five bring-ups; the PD
# router on a control node: 3 nodes) run beside the rest as e2e-own, so `make test` spreads them.
E2E_OWN := tests/e2e/test_upgrade.py tests/e2e/test_disagg_control.py tests/e2e/test_drain_bench.py

e2e: venv image ## site.yml end to end on a simulated 2-node cluster (and, in e2e-own, the suites with their own clusters)
	pytest -q -p no:cacheprovider tests/e2e $(addprefix --ignore=,$(E2E_OWN))

e2e-own: venv image ## the e2e suites with their own clusters: engine upgrade / rollback, PD router on a control node, a decode group stopped under the bench
	LLMB_E2E_CLUSTER=e2eown pytest -q -p no:cacheprovider $(E2E_OWN)

# e2e-ctr: the container serve path's three recipes and their faults (`make e2e-ctr E2E_CTR_SELECT=a3` runs
# one recipe's); root login (the container path was proven with it).
E2E_CTR_SELECT ?=

e2e-ctr: venv image ## container serve path (a3, mi300x 2x8, h200-trtllm) on one 2-node cluster with dockerd in the nodes
	LLMB_SIM_LOGIN=root pytest -q -p no:cacheprovider tests/e2e_ctr $(if $(E2E_CTR_SELECT),-k "$(E2E_CTR_SELECT)")

perf: venv image ## benchmarks (print ratios measured side by side); bench_scale: docs/scale.md, 2-32 nodes
	uv pip install -q -r pyproject.toml --extra perf
	tests/perf/run

perf-smoke: venv image ## every benchmark in a tiny configuration (one shared 2-node cluster): runs, prints its figures
	tests/perf/smoke

engine-check: venv ## NOT in CI: each shipped engine release installed in turn, sample plans through its parser
	scripts/engine-catalog check --write docs/engines.md $(ENGINE_CHECK_ARGS)

# The cluster suites run TEST_JOBS at a time (each on its own simulated cluster; most of their time is
# spent waiting on SSH round trips and service starts, so two share 2 cores well), longest first;
# each suite's output is printed whole when it ends.
TEST_JOBS ?= 2
CLUSTER_SUITES := e2e e2e-own molecule e2e-ctr perf-smoke units-verify

test: lint unit ## everything CI runs
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(CLUSTER_SUITES)

demo: venv image ## bring up a 2-node simulated cluster and run site.yml against it
	scripts/demo

clean: ## remove simulated clusters, molecule leftovers and artifacts
	-for n in $$(ls .cache/sim 2>/dev/null); do scripts/sim-cluster down --name $$n; done
	rm -rf artifacts .cache/facts
