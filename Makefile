# Two commands matter: `make demo` and `make test` (as root). Both set the machine up first.
VENV := .venv
EDGEBED := $(VENV)/bin/edgebed
SCENARIO ?= topologies/live_edge/demo.yaml

.PHONY: setup demo test unit clean schema dissector bench vm-test

setup:
	@scripts/setup.sh

demo: setup
	$(EDGEBED) run $(SCENARIO)

# The unit tests two at a time (pytest-xdist, one worker a core); the integration tests one at a
# time, as each measures an emulated network that needs the whole machine. Both always run.
test: setup
	$(VENV)/bin/python -m pytest -ra -n 2 tests/unit; unit=$$?; \
	$(VENV)/bin/python -m pytest -ra tests/integration && exit $$unit

# The tests that need a kernel with sch_netem and the openvswitch module, in a Debian VM under
# qemu (scripts/vm.sh; docs/vm-lane.md). setup first: the host's .venv builds the wheelhouse.
vm-test: setup
	scripts/vm.sh

unit: setup
	$(VENV)/bin/python -m pytest -ra -n 2 tests/unit

schema: setup
	$(EDGEBED) schema -o topologies/schema/scenario.schema.json

# The Wireshark dissector from the wire formats (agents/formats.py, agents/<slug>/formats.py);
# commit the result.
dissector: setup
	$(VENV)/bin/python -m agents.dissector

bench: setup
	$(VENV)/bin/python benchmarks/bringup.py
	$(VENV)/bin/python benchmarks/impairment.py
	$(VENV)/bin/python benchmarks/agents.py
	$(VENV)/bin/python benchmarks/controller.py
	$(VENV)/bin/python benchmarks/live_edge.py
	$(VENV)/bin/python benchmarks/sweeps.py
	$(VENV)/bin/python benchmarks/dispatch.py
	$(VENV)/bin/python benchmarks/bloom_cdn.py
	$(VENV)/bin/python benchmarks/ai_access.py
	$(VENV)/bin/python benchmarks/surveillance.py
	$(VENV)/bin/python benchmarks/cost.py
	$(VENV)/bin/python benchmarks/dilation.py

# Removes what crashed runs left behind (by prefix); run directories under runs/ stay.
clean: setup
	$(EDGEBED) clean
