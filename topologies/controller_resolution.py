"""The controller section of a scenario checked: its apps, services, policy and policy
parameters, the labels the policy reads and the control network."""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import re

from pydantic import ValidationError

from edgebed import units

from . import model
from .document_checks import DocumentChecks
from .problems import did_you_mean, fields_at, validation_problems
from .resolved import Node, Service, app_file

# OVS's active TCP controller target: an IPv4 address or a host name, and a port.
REMOTE_TARGET = re.compile(r"^tcp:[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]{1,5}$")
DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
APP_FORMS = ("an app is edgebed, none, a Python file (.py, relative to the scenario's "
             "directory) or an importable module name")


def _importable(module: str) -> bool:
    """Whether ``module`` is a module name Python finds (its parent packages are imported to
    look)."""
    if not DOTTED_NAME.match(module):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


class ControllerResolution(DocumentChecks):
    """Resolves the controller's services and checks its apps, policy and control network."""

    def _check_controller_apps(self) -> None:
        """Each app is edgebed, an existing Python file or a module name, named once; none
        stands alone."""
        app = self.document.controller.app
        apps = [app] if isinstance(app, str) else app
        paths = [("controller", "app")] if isinstance(app, str) else [
            ("controller", "app", index) for index in range(len(app))]
        if not apps:
            self.problem(("controller", "app"), "no app listed",
                         "write app: none for standalone switches")
        for name, path in zip(apps, paths):
            if name == model.NO_APP and len(apps) > 1:
                self.problem(path, "none cannot run beside other apps",
                             "remove none from the list")
            elif apps.count(name) > 1 and path != paths[apps.index(name)]:
                self.problem(path, f"app {name!r} is listed twice", "list each app once")
            elif name in (model.NO_APP, model.EDGEBED_APP):
                continue
            elif (file := app_file(name, self.source_map.file)) is not None:
                if not file.is_file():
                    self.problem(path, f"controller app file {name!r} not found ({file})",
                                 APP_FORMS)
            elif not _importable(name):
                self.problem(path, f"controller app {name!r} is not an importable module",
                             APP_FORMS)

    def _check_controller_remote(self) -> None:
        """Each remote target is ``tcp:HOST:PORT``, named once, and no app runs beside them
        (edgebed starts no controller for a remote one)."""
        controller = self.document.controller
        remote = controller.remote
        paths = [("controller", "remote")] if isinstance(remote, str) else [
            ("controller", "remote", index) for index in range(len(remote))]
        targets = controller.remotes
        for target, path in zip(targets, paths):
            if not REMOTE_TARGET.match(target) or not 1 <= int(target.rsplit(":", 1)[1]) <= 65535:
                self.problem(path, f"remote controller {target!r} is not tcp:HOST:PORT",
                             "e.g. tcp:127.0.0.1:6653 (port 1-65535)")
            elif targets.count(target) > 1 and path != paths[targets.index(target)]:
                self.problem(path, f"remote controller {target!r} is listed twice",
                             "list each controller once")
        if targets and controller.apps:
            self.problem(("controller", "app"), "app is set beside a remote controller",
                         "edgebed starts no controller when remote is set: write app: none "
                         "(or leave it out), or drop remote", key=True)

    def _resolve_controller(self) -> dict[str, Service]:
        """Services, the policy and the management network, checked against the nodes."""
        controller = self.document.controller
        path = ("controller",)
        self._check_controller_apps()
        self._check_controller_remote()
        if not controller.runs_edgebed:
            for name in ("services", "policy", "policy_params", "period", "control_network",
                         "control_host"):
                if name in controller.model_fields_set:
                    self.problem(path + (name,),
                                 f"{name} is set but edgebed's controller app does not run",
                                 "set controller: {app: edgebed} (or add edgebed to a list of "
                                 "apps)", key=True)
            return {}
        if controller.policy not in self.policies.available():
            self.problem(path + ("policy",), f"unknown policy {controller.policy!r}; valid "
                                             f"policies: {', '.join(self.policies.available())}",
                         did_you_mean(controller.policy, self.policies.available()))
        else:
            self._check_policy_params(controller.policy, controller.policy_params)
        host_addresses = {address.ip: node.name for node in self.hosts_in_order()
                          for address in node.interfaces.values() if address is not None}
        self._check_control_network(controller)
        management = controller.management_subnet
        if controller.builds_management:
            if management.overlaps(self.topology.subnet):
                self.problem(path + ("management_subnet",),
                             f"{management} overlaps the topology subnet {self.topology.subnet}",
                             "choose another management_subnet, e.g. 172.30.0.0/16")
            elif management.num_addresses - 2 < len(host_addresses) + 1:
                self.problem(path + ("management_subnet",), f"{management} has too few "
                                                            "addresses for every host",
                             "use a larger prefix")
        services = {}
        addresses: dict[ipaddress.IPv4Address, str] = {}
        for name, spec in controller.services.items():
            where = path + ("services", name)
            if spec.address in host_addresses:
                self.problem(where + ("address",), f"{spec.address} is also host "
                                                   f"{host_addresses[spec.address]}'s address",
                             "a service address belongs to no host")
            elif spec.address in addresses:
                self.problem(where + ("address",), f"{spec.address} is also service "
                                                   f"{addresses[spec.address]}'s address")
            elif controller.builds_management and spec.address in management:
                self.problem(where + ("address",), f"{spec.address} is inside the management "
                                                   f"subnet {management}")
            addresses[spec.address] = name
            servers = {}
            for server in self._select(spec.servers, where + ("servers",)):
                capacity = self.nodes[server].labels.get(spec.capacity_label)
                try:
                    servers[server] = float("inf") if capacity is None else (
                        units.parse_rate(capacity) if isinstance(capacity, str)
                        else float(capacity))
                except ValueError as error:
                    self.problem(self.origin[server], f"label {spec.capacity_label} of "
                                                      f"{server}: {error}", key=True)
            services[name] = Service(name, spec.address, spec.protocol, spec.port, spec.demand,
                                     servers)
        if controller.policy in self.policies.available():
            self._check_policy_labels(controller.policy, services)
            self._check_policy_scenario(controller.policy, controller.policy_params, services)
        return services

    def _check_policy_scenario(self, policy: str, params: dict,
                               services: dict[str, Service]) -> None:
        """The policy's own checks of the scenario (``scenario_problems``), once its
        parameters are valid, each problem at the parameter or host it is about."""
        try:
            validated = self.policies.params_model(policy).model_validate(params)
        except ValidationError:
            return  # reported by _check_policy_params
        hosts = {node.name: (node.role or "", dict(node.labels))
                 for node in self.hosts_in_order()}
        servers = {name: tuple(service.servers) for name, service in services.items()}
        for found in self.policies.scenario_problems(policy, validated, hosts, servers):
            # A parameter the file leaves at its default is reported at the nearest key the
            # file writes (the source map's nearest ancestor).
            where = self.origin[found.node] if found.node is not None else (
                "controller", "policy_params", *found.param)
            self.problem(where, found.message, found.hint, key=found.node is not None)

    def _check_policy_params(self, policy: str, params: dict) -> None:
        """``params`` against the policy's ``Params``, each problem at the key it is about: an
        unknown key with the closest valid one, a value of the wrong type with what the policy
        reads it as."""
        model = self.policies.params_model(policy)
        try:
            model.model_validate(params)
        except ValidationError as error:
            self.problems.extend(validation_problems(
                error, params, self.source_map, at=("controller", "policy_params"),
                fields=lambda path: fields_at(path, model), subject=f"policy {policy}"))

    def _check_control_network(self, controller: model.Controller) -> None:
        """In-band control needs a host to listen at, with an address on the data network;
        out-of-band control has no use for one."""
        path = ("controller",)
        if controller.control_network == "out-of-band":
            if controller.control_host is not None:
                self.problem(path + ("control_host",), "control_host is only for in-band "
                                                       "control", "set control_network: in-band "
                                                                  "or drop control_host")
            return
        if controller.control_host is None:
            self.problem(path + ("control_network",), "in-band control needs control_host",
                         "name the host the controller listens at, e.g. control_host: dc1")
            return
        node = self.nodes.get(controller.control_host)
        hosts = [n.name for n in self.hosts_in_order()]
        if node is None or node.is_switch:
            self.problem(path + ("control_host",),
                         f"{controller.control_host!r} is not a host of the topology"
                         + (" (it is a switch)" if node is not None else ""),
                         did_you_mean(controller.control_host, hosts))
        elif node.ip is None:
            self.problem(path + ("control_host",), f"{node.name} has no data-plane address",
                         "give its first interface an address")

    def _check_policy_labels(self, policy: str, services: dict[str, Service]) -> None:
        """The labels ``policy`` reads, typed by its label models: the servers' by
        ``ServerLabels``, every other host's by ``ClientLabels``; a label one or two letters
        off a declared one is refused as a misspelling."""
        client_labels, server_labels = self.policies.label_models(policy)
        servers = {server for service in services.values() for server in service.servers}
        # A label set on a kind, group or the defaults is wrong once, not once per host.
        reported: set[tuple] = set()
        for node in self.hosts_in_order():
            model = server_labels if node.name in servers else client_labels
            try:
                model.model_validate(node.labels)
            except ValidationError as error:
                for problem in error.errors():
                    label = str(problem["loc"][0])
                    described = model.model_fields[label].description
                    origin = self._label_origin(node, label)
                    if origin in reported:
                        continue
                    reported.add(origin)
                    self.problem(origin,
                                 f"label {label} of {node.name}: {problem['msg']}",
                                 f"policy {policy} reads it as {described}" if described
                                 else "")
            for label in node.labels:
                close = difflib.get_close_matches(label, model.model_fields, n=1, cutoff=0.85)
                if label not in model.model_fields and close:
                    self.problem(self._label_origin(node, label),
                                 f"label {label} of {node.name} is not one policy {policy} "
                                 f"reads", f"did you mean {close[0]!r}?", key=True)

    def _label_origin(self, node: Node, label: str) -> tuple:
        """Where ``label`` of ``node`` was set: the innermost of node, group, kind and defaults
        that sets it."""
        topology = self.topology
        spec_path = self.origin[node.name]
        for path, layer in ((spec_path, topology.nodes.get(spec_path[-1])),
                            (("topology", "groups", node.group), topology.groups.get(node.group)),
                            (("topology", "kinds", node.kind), topology.kinds.get(node.kind)),
                            (("topology", "defaults"), topology.defaults)):
            if layer is not None and label in layer.labels:
                return path + ("labels", label)
        return spec_path
