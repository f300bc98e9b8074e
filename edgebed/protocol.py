"""The control protocol: JSON messages over UDP between hosts and the controller."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Collection, Iterable
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter,
                      ValidationError, model_validator)

VERSION = 1
PORT = 6650
MAX_DATAGRAM = 16 * 1024
MAX_ID = 2**32 - 1
MAX_REASON = 200

Name = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# Long enough for the default ``node/service``.
Flow = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/@#+=-]{0,159}$")]
# Free text that may end up in logs and terminals: no control characters.
Text = Annotated[str, Field(strict=True, max_length=MAX_REASON, pattern=r"^[^\x00-\x1f\x7f]*$")]
Amount = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Fraction = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, ge=0, le=MAX_ID)]
RequestId = Annotated[int, Field(strict=True, ge=1, le=MAX_ID)]
ReplyId = Annotated[int, Field(strict=True, ge=0, le=MAX_ID)]  # 0: pushed, not a reply
Route = Annotated[tuple[Name, ...], Field(min_length=1, max_length=32)]
TransportPort = Annotated[int, Field(strict=True, ge=1, le=65535)]
MAX_CANDIDATES = 16
MAX_VIA = 16
MAX_ATTRIBUTES = 16


def _address(value: str) -> str:
    return str(ipaddress.ip_address(value))


Address = Annotated[str, Field(strict=True, max_length=45), AfterValidator(_address)]
Scalar = Union[None, Annotated[bool, Field(strict=True)], Annotated[int, Field(strict=True)],
               Finite, Text]
Entry = Annotated[dict[Annotated[str, Field(strict=True, min_length=1, max_length=32)],
                       Union[Scalar, Annotated[list[Scalar], Field(max_length=32)]]],
                  Field(max_length=32)]
# No count limit: a datagram's size bounds the entries of a part, and a client's merged state
# holds them all.
Entries = tuple[Entry, ...]


AttributeName = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$")]
Attributes = Annotated[dict[AttributeName, Scalar], Field(max_length=MAX_ATTRIBUTES)]


class Hop(BaseModel):
    """A host a decision names (a candidate server, a relay), with its address, so the agent
    following the decision needs no map of the network."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    address: Address


class Message(BaseModel):
    """Base of every message: unknown keys are errors, and messages are immutable (a server
    compares a retransmitted request with the one it answered)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = VERSION


# A metric's name: dot-separated segments, the last saying what it is (``cpu``, ``bw_in``), the
# ones before what it is about (``port.eth1.bw_in``: interface eth1's incoming bandwidth).
MetricName = Annotated[str, Field(strict=True, max_length=64,
                                  pattern=r"^[A-Za-z0-9_-]{1,32}(\.[A-Za-z0-9_-]{1,32}){0,3}$")]
MAX_METRICS = 64
# What the metrics every scheme shares mean, by the last segment of their name: "fraction" is 0
# to 1, "amount" at least 0, "count" a whole number at least 0. Any other name is a finite
# number the sender and the policy agree on.
METRIC_KINDS = {
    "cpu": "fraction",  # compute in use as a share of what the node may use
    "process_cpu": "amount",  # CPU cores the reporting process used (CPU s per s, from /proc)
    "memory": "amount",  # bytes resident
    "bw_in": "amount", "bw_out": "amount",  # bit/s received and sent
    "packets_in": "amount", "packets_out": "amount",  # packets/s received and sent
    "sessions": "count", "streams": "count",
    # A path to a peer as the sender probes it (``path.<peer>.rtt`` ...): round trip and
    # jitter in seconds, loss 0 to 1 (dispatch's relay choice reads them).
    "rtt": "amount", "jitter": "amount", "loss": "fraction",
}


def path_metric(address: str, figure: str) -> str:
    """The metric of ``figure`` (rtt, loss, jitter) of the sender's path to ``address``:
    ``path.10-0-0-2.loss`` (a segment of a metric name has no dots)."""
    return f"path.{address.replace('.', '-')}.{figure}"


def _metrics(values: dict[str, float]) -> dict[str, float]:
    for name, value in values.items():
        kind = METRIC_KINDS.get(name.rsplit(".", 1)[-1])
        if kind == "fraction" and not 0 <= value <= 1:
            raise ValueError(f"metric {name} is a fraction, 0 to 1, not {value!r}")
        if kind in ("amount", "count") and value < 0:
            raise ValueError(f"metric {name} must be at least 0, not {value!r}")
        if kind == "count" and value != int(value):
            raise ValueError(f"metric {name} is a count, not {value!r}")
    return values


Metrics = Annotated[dict[MetricName, Finite], Field(max_length=MAX_METRICS),
                    AfterValidator(_metrics)]


class Load(Message):
    """A host's load report (no reply): ``load`` in the service's demand unit, named
    ``metrics`` (METRIC_KINDS), the sender's clock ``ts`` and its report counter ``seq``;
    ``urgent`` when sent at once because a metric crossed a threshold, not on the period."""

    type: Literal["load"] = "load"
    node: Name
    service: Name | None = None
    load: Amount
    metrics: Metrics = {}
    ts: Amount
    seq: Count = 0
    urgent: Annotated[bool, Field(strict=True)] = False


class Join(Message):
    """A client asks for ``service``: answered by ``decision`` or ``rejected``."""

    type: Literal["join"] = "join"
    id: RequestId
    node: Name
    service: Name
    port: TransportPort | None = None
    flow: Flow
    demand: Amount = 0.0
    bitrates: Annotated[tuple[Amount, ...], Field(max_length=16)] = ()

    @model_validator(mode="before")
    @classmethod
    def _default_flow(cls, data: Any) -> Any:
        if (isinstance(data, dict) and data.get("flow") is None
                and isinstance(data.get("node"), str) and isinstance(data.get("service"), str)):
            port = data.get("port")
            suffix = f":{port}" if type(port) is int else ""
            return {**data, "flow": f"{data['node']}/{data['service']}{suffix}"}
        return data


class Leave(Message):
    """A client's flow ends: answered by ``ack`` or ``rejected``."""

    type: Literal["leave"] = "leave"
    id: RequestId
    node: Name
    flow: Flow


class Steer(Message):
    """Move a placed flow to ``server`` by hand: answered by ``decision`` (migrated) or
    ``rejected``."""

    type: Literal["steer"] = "steer"
    id: RequestId
    flow: Flow
    server: Name


Delay = Annotated[float, Field(strict=True, ge=0, le=3600, allow_inf_nan=False)]


class Link(Message):
    """A link's one-way delay changed, per direction (``forward`` from the link's first
    endpoint to its second; null: that direction is unchanged), as a network event the sender
    knows of (the runner announces the scenario's scheduled impairments as it applies them):
    answered by ``ack`` or ``error``."""

    type: Literal["link"] = "link"
    id: RequestId
    link: Count
    delay_forward: Delay | None = None
    delay_reverse: Delay | None = None


class Path(Message):
    """Route a flow along ``via`` (node names from client to server, switches included):
    answered by ``ack`` or ``rejected``."""

    type: Literal["path"] = "path"
    id: RequestId
    flow: Flow
    via: Route


class Subscribe(Message):
    """Ask for decisions about ``node``'s flows, and flows on servers it runs, to be pushed to
    the sender's address: answered by ``ack``."""

    type: Literal["subscribe"] = "subscribe"
    id: RequestId
    node: Name


class Query(Message):
    """Ask for the controller's state: answered by ``state`` (one or more parts)."""

    type: Literal["query"] = "query"
    id: RequestId


class Decision(Message):
    """Where a flow goes: the reply to ``join`` or ``steer``, or pushed (``id`` 0). Beside the
    server, the decision's terms (:class:`controller.policy.Terms`): ``bitrate``, ranked
    ``candidates`` to probe before confirming one with ``steer``, the ``via`` chain of relay
    hosts from the client's side, and ``attributes``. ``port`` is the client's transport port
    of the flow (null: all its traffic to the service); ``path`` the pinned switches;
    ``version`` counts the flow's decisions (1 when placed, one more at every change), so a
    push that arrives late, after a newer decision, can be told apart and ignored."""

    type: Literal["decision"] = "decision"
    id: ReplyId
    flow: Flow
    client: Name
    service: Name
    port: TransportPort | None = None
    server: Name
    address: Address
    bitrate: Amount | None = None
    candidates: Annotated[tuple[Hop, ...], Field(max_length=MAX_CANDIDATES)] = ()
    via: Annotated[tuple[Hop, ...], Field(max_length=MAX_VIA)] = ()
    attributes: Attributes = {}
    path: Route | None = None
    migrated: Annotated[bool, Field(strict=True)] = False
    version: Count = 0


class Rejected(Message):
    """A request the controller turned down (``id`` 0 when pushed)."""

    type: Literal["rejected"] = "rejected"
    id: ReplyId
    flow: Flow
    reason: Text


class Ack(Message):
    """A request done."""

    type: Literal["ack"] = "ack"
    id: RequestId


class Error(Message):
    """A message the controller could not take: invalid, or its handler failed."""

    type: Literal["error"] = "error"
    id: RequestId | None = None
    reason: Text


class State(Message):
    """Part ``part`` of ``parts`` of the controller's state: placed flows and servers, one
    flat object each (values are null, booleans, finite numbers, strings of up to MAX_REASON
    characters, or lists of them; an unlimited capacity goes as null)."""

    type: Literal["state"] = "state"
    id: RequestId
    placements: Entries = ()
    servers: Entries = ()
    part: Annotated[int, Field(strict=True, ge=0, le=255)] = 0
    parts: Annotated[int, Field(strict=True, ge=1, le=256)] = 1

    @model_validator(mode="after")
    def _part_in_range(self) -> State:
        if self.part >= self.parts:
            raise ValueError(f"part {self.part} of {self.parts} parts")
        return self


TYPES: dict[str, type[Message]] = {
    cls.model_fields["type"].default: cls
    for cls in (Load, Join, Leave, Steer, Link, Path, Subscribe, Query,
                Decision, Rejected, Ack, Error, State)}
TO_CONTROLLER = frozenset({"load", "join", "leave", "steer", "link", "path", "subscribe",
                           "query"})
TO_HOST = frozenset(TYPES) - TO_CONTROLLER
AnyMessage = Annotated[Union[tuple(TYPES.values())], Field(discriminator="type")]
_ADAPTER: TypeAdapter[Message] = TypeAdapter(AnyMessage)


class ProtocolError(ValueError):
    """A datagram or message that is not valid control protocol. ``reason`` is short and safe
    to log or send back; ``answerable`` says the datagram was a JSON object, the only kind an
    ``error`` reply goes back for (answering garbage would make the controller an amplifier);
    ``request_id`` is the valid id it carried, if any."""

    def __init__(self, reason: str, *, answerable: bool = False,
                 request_id: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.answerable = answerable
        self.request_id = request_id


def clip(text: str, limit: int = 40) -> str:
    """``text`` as printable text of at most ``limit`` characters."""
    text = "".join(c if c.isprintable() else "?" for c in text[:limit + 1])
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _no_constant(name: str) -> Any:
    raise ProtocolError(f"not JSON: {name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        # Parsers disagree on which copy wins; a controller must not guess differently from
        # the host's logs.
        raise ProtocolError("not JSON: duplicate key")
    return result


def encode(message: Message) -> bytes:
    """The datagram for ``message``; ProtocolError if it exceeds MAX_DATAGRAM."""
    data = message.model_dump_json().encode()
    if len(data) > MAX_DATAGRAM:
        raise ProtocolError(f"{message.type} message of {len(data)} bytes exceeds "
                            f"{MAX_DATAGRAM}")
    return data


def decode(data: bytes, accept: Collection[str] = TYPES.keys()) -> Message:
    """The message in one datagram, of a type in ``accept`` (a server passes TO_CONTROLLER,
    a client TO_HOST); ProtocolError for anything else."""
    if len(data) > MAX_DATAGRAM:
        raise ProtocolError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    if not data:
        raise ProtocolError("empty datagram")
    try:
        text = bytes(data).decode()
    except UnicodeDecodeError as error:
        raise ProtocolError(f"not UTF-8 (byte {error.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except ProtocolError:
        raise
    except RecursionError:
        raise ProtocolError("not JSON: nested too deeply") from None
    except json.JSONDecodeError as error:
        raise ProtocolError(f"not JSON: {error.msg} at character {error.pos}") from None
    except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits
        raise ProtocolError("not JSON: number too long") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"not a JSON object but {type(value).__name__}")
    request_id = value.get("id")
    if type(request_id) is not int or not 1 <= request_id <= MAX_ID:
        request_id = None

    def refuse(reason: str) -> ProtocolError:
        return ProtocolError(clip(reason, MAX_REASON), answerable=True, request_id=request_id)

    version, kind = value.get("v"), value.get("type")
    if type(version) is not int or version != VERSION:
        raise refuse("missing v (protocol version)" if version is None else
                     f"unsupported protocol version {clip(repr(version))} (this side speaks "
                     f"{VERSION})")
    if type(kind) is not str or kind not in TYPES:
        raise refuse("missing type" if kind is None else f"unknown type {clip(repr(kind))}")
    if kind not in accept:
        raise refuse(f"{kind} messages do not go this way")
    try:
        return _ADAPTER.validate_python(value)
    except ValidationError as error:
        problems = error.errors(include_url=False, include_input=False, include_context=False)
        where = ".".join(clip(str(part), 24) for part in problems[0]["loc"][1:])
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise refuse(f"bad {kind}: {where or 'message'}: {problems[0]['msg']}{more}") from None


def state_replies(request_id: int, placements: Iterable[dict],
                  servers: Iterable[dict]) -> list[State]:
    """The reply to a ``query``: as few ``state`` parts as hold the entries, each within a
    datagram (entries keep their order, placements first)."""
    tagged = [("placements", p) for p in placements] + [("servers", s) for s in servers]
    overhead = len(encode(State(id=MAX_ID, part=255, parts=256)))
    groups: list[list[tuple[str, dict]]] = [[]]
    size = overhead
    for item in tagged:
        # json.dumps with its default spacing and ASCII escapes never writes fewer bytes than
        # the compact UTF-8 encoding, so the estimate errs on the safe side.
        entry_size = len(json.dumps(item[1])) + 1
        if overhead + entry_size > MAX_DATAGRAM:
            raise ProtocolError(f"a {item[0][:-1]} entry of {entry_size} bytes does not fit in "
                                f"a datagram")
        if size + entry_size > MAX_DATAGRAM:
            groups.append([])
            size = overhead
        groups[-1].append(item)
        size += entry_size
    return [State(id=request_id, part=number, parts=len(groups),
                  placements=[entry for kind, entry in group if kind == "placements"],
                  servers=[entry for kind, entry in group if kind == "servers"])
            for number, group in enumerate(groups)]
