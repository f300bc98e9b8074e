# The image of an exported containerlab lab (edgebed export FILE --to containerlab): every host
# container runs edgebed's agents from it, the controller container edgebed's controller.
#   docker build -t edgebed-agents -f docker/agents.Dockerfile .
# Not built by the tests (the machine that runs them has no Docker); the exported topology
# that uses it is validated against containerlab's schema instead.
FROM debian:bookworm-slim

# tc (iproute2) applies the links' impairments inside the containers; tcpdump takes captures;
# timeout (coreutils) ends the agents at the scenario's duration.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv iproute2 tcpdump \
        iputils-ping procps ethtool ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/edgebed
COPY pyproject.toml README.md ./
COPY topologies topologies
COPY controller controller
COPY agents agents
COPY experiments experiments
# The project's dependencies as pyproject.toml lists them (Mininet is not one: the containers
# are the hosts, containerlab builds the network).
RUN python3 -m venv /opt/edgebed/.venv && /opt/edgebed/.venv/bin/pip install --no-cache-dir .
ENV PATH=/opt/edgebed/.venv/bin:$PATH

# Agents and captures are started by the lab's exec commands; the container only has to live.
CMD ["sleep", "infinity"]
