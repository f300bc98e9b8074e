"""What a run's controller process is told: :class:`ControllerConfig`, the one contract between
the runner that writes it and the app that reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller import policies
from edgebed.files import atomic_write
from topologies.model import EDGEBED_APP_MODULE


class ControlEndpoint(BaseModel):
    """Where hosts reach the controller's control protocol: an address and a process in the
    namespace that holds it (the socket is opened inside it). Out-of-band, the controller's
    address on the management network in the management namespace; in-band, the control
    host's data-plane address in that host's namespace, so control messages cross the
    switches and impaired links."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field(description="the address hosts send control messages to, dotted IPv4")
    netns_pid: int | None = Field(gt=0, description="a process whose network namespace holds "
                                                    "the address (None: the controller's own, "
                                                    "as in a container)")


class ControllerConfig(BaseModel):
    """One controller process's configuration (docs/concepts/internals.md)."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(description="the controller's directory: state, status, log")
    apps: list[str] = Field([EDGEBED_APP_MODULE], min_length=1,
                            description="the apps os-ken runs: module names or Python files "
                                        "(controller.app is edgebed's)")
    view: dict[str, Any] = Field(description="the network as controller.view.NetworkView.to_json "
                                             "writes it")
    policy: str = Field(description="the scheduling policy's name")
    policy_params: dict[str, Any] = Field(default_factory=dict,
                                          description="the policy's parameters, as the scenario "
                                                      "gives them")
    fast_failover: bool = True
    period: float | None = Field(None, gt=0, description="seconds between periods (none: no "
                                                         "periods)")
    control_port: int = Field(ge=1, le=65535, description="UDP port of the control protocol "
                                                          "at the control endpoint")
    loopback_control_port: int = Field(ge=1, le=65535, description="UDP port of the control "
                                                                   "protocol on loopback")
    openflow_port: int = Field(0, ge=0, le=65535, description="TCP port switches connect to "
                                                              "(0 until the process starts)")
    openflow_host: str = Field("127.0.0.1", description="address switches connect to (a "
                                                        "container's: 0.0.0.0)")
    control_endpoint: ControlEndpoint | None = Field(
        None, description="where hosts reach the control protocol (none: only loopback)")

    @model_validator(mode="after")
    def _policy_takes_its_params(self) -> ControllerConfig:
        policies.params_model(self.policy).model_validate(self.policy_params)
        return self

    @classmethod
    def read(cls, path: Path) -> ControllerConfig:
        return cls.model_validate_json(Path(path).read_text())

    def write(self, path: Path) -> None:
        atomic_write(Path(path), self.model_dump_json(indent=1))
