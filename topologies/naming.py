"""Names of the kernel and OVS objects one run creates, every one starting with the run's prefix."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from typing import Iterator

PREFIX_PATTERN = re.compile(r"^eb[0-9a-f]{4}$")
OBJECT_PATTERN = re.compile(r"^(eb[0-9a-f]{4})(s\d+(p\d+)?|m\d*|-[A-Za-z][\w-]*)$")
ENVIRONMENT_KEY = "EDGEBED_RUN"
MAX_SWITCHES = 999
MAX_PORT = 4095  # keeps <prefix>s<999>p<4095> within Linux's 15-character interface names
# Every host's end of the management network (the control protocol's, never the data plane's).
MANAGEMENT_INTERFACE = "mgmt0"


@dataclass(frozen=True)
class RunNames:
    """Name factory for one run."""

    prefix: str

    @classmethod
    def fresh(cls, taken: set[str] = frozenset()) -> "RunNames":
        while True:
            prefix = "eb" + secrets.token_hex(2)
            if prefix not in taken:
                return cls(prefix)

    def bridge(self, switch_index: int) -> str:
        return f"{self.prefix}s{switch_index}"

    def port(self, switch_index: int, port: int) -> str:
        return f"{self.prefix}s{switch_index}p{port}"

    def wire(self, link_index: int) -> str:
        """The Mininet node (namespace) spliced into a link for the user-space relay."""
        return f"{self.prefix}w{link_index}"

    def cgroup(self, host: str) -> str:
        """The cgroup of a host with a CPU limit (:mod:`topologies.cpu_limits`)."""
        return f"{self.prefix}-{host}"

    def management_bridge(self) -> str:
        return f"{self.prefix}m"

    def management_port(self, index: int) -> str:
        return f"{self.prefix}m{index}"

    def controller_namespace(self) -> str:
        """The Mininet node holding the controller's management address."""
        return f"{self.prefix}c"


def prefix_of(name: str) -> str | None:
    """The run prefix an object name carries, or None for objects that are not edgebed's."""
    match = OBJECT_PATTERN.match(name)
    return match.group(1) if match else None


@contextlib.contextmanager
def processes_carry(prefix: str) -> Iterator[None]:
    """While building, put the run's prefix in this process's environment, so that every
    process Mininet spawns (host shells, and what they start) inherits it."""
    old = os.environ.get(ENVIRONMENT_KEY)
    os.environ[ENVIRONMENT_KEY] = prefix
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENVIRONMENT_KEY, None)
        else:
            os.environ[ENVIRONMENT_KEY] = old


def host_mac(address: ipaddress.IPv4Interface | ipaddress.IPv4Address | str) -> str:
    """A locally administered MAC that spells the host's IP (02:eb:0a:00:00:05 for 10.0.0.5),
    so captures read naturally; every host interface gets the MAC of its address."""
    ip = address.ip if isinstance(address, ipaddress.IPv4Interface) \
        else ipaddress.IPv4Address(address)
    return "02:eb:" + ":".join(f"{byte:02x}" for byte in ip.packed)


def service_mac(address: ipaddress.IPv4Address | str) -> str:
    """The MAC a service (virtual) address answers ARP with: 0e:eb: and the address."""
    return "0e:eb:" + ":".join(f"{byte:02x}" for byte in ipaddress.IPv4Address(address).packed)
