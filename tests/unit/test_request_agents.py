"""The request client and the M/M/1 request server, run as programs over loopback (no root).

The queue's figures are checked against M/M/1 theory with bounds derived from the model: the
sample mean of correlated response times against the spread of that sample mean in simulated
M/M/1 queues, the service times and the utilisation against their standard errors.
"""

from __future__ import annotations

import math
import random
import socket

import pytest
from pydantic import ValidationError

from agents import request_client
from agents.formats import REQUEST, RESPONSE
from tests.unit.test_media_agents import LOOPBACK, listening_port, start, summary_of, table

ARRIVAL_RATE, SERVICE_RATE, REQUESTS = 100.0, 200.0, 1000
# Five standard errors: a bound a correct agent misses with probability below 1e-6.
Z = 5.0
# The simulated sample means are left out this far into each tail.
TAIL = 0.001
SIMULATED_RUNS = 2000
# What a response time adds to the time in the server's queue and service: two loopback hops
# and the lateness of the response's send (tens of microseconds each, on average).
PATH_MARGIN_MS = 1.0


def simulated_mean_sojourns(requests: int, arrival_rate: float, service_rate: float,
                            runs: int, seed: int) -> list[float]:
    """Sample means (ms) of the first ``requests`` sojourn times of an M/M/1 queue that starts
    empty, one per simulated run (Lindley's recursion), sorted."""
    rng = random.Random(seed)
    means = []
    for _ in range(runs):
        waiting = total = 0.0
        for _ in range(requests):
            service = rng.expovariate(service_rate)
            total += waiting + service
            waiting = max(0.0, waiting + service - rng.expovariate(arrival_rate))
        means.append(total / requests * 1e3)
    return sorted(means)


@pytest.fixture(scope="module")
def mm1_run(tmp_path_factory):
    """1000 Poisson requests at 100/s to a server of rate 200/s; (client summary, server
    summary, run directory). Different seeds: the same seed would draw the same uniforms for
    the client's gaps and the server's services, making each service half a gap."""
    out = tmp_path_factory.mktemp("mm1")
    server = start("request_server", "s", out, {"port": 0, "service_rate": SERVICE_RATE},
                   seed=2)
    port = listening_port(server)
    client = start("request_client", "c", out, {"to": LOOPBACK, "port": port,
                                                 "rate": ARRIVAL_RATE, "count": REQUESTS},
                   seed=1)
    return summary_of(client), summary_of(server, stop=True), out


def test_every_request_is_answered_and_served_in_arrival_order(mm1_run):
    client, server, out = mm1_run
    assert (client["sent"], client["answered"], client["timeouts"]) == (REQUESTS, REQUESTS, 0)
    assert (server["arrivals"], server["served"], server["unserved_at_stop"]) == (REQUESTS,
                                                                                  REQUESTS, 0)
    served = [int(row["request"]) for row in table(out, "requests_served", "s",
                                                   "request_server")]
    assert served == list(range(REQUESTS))  # FIFO, and loopback does not reorder
    responses = table(out, "responses", "c", "request_client")
    assert sorted(int(row["request"]) for row in responses) == list(range(REQUESTS))
    assert {row["bytes"] for row in responses} == {str(RESPONSE.header_size)}


def mean_lateness_bound_ms(lateness: dict) -> float:
    """An upper bound of the mean of a pacer's lateness from what it reports: at most the
    values above the 99th percentile (``packets - 1 - floor(0.99 * (packets - 1))`` of them, by
    its linear interpolation) exceed it, and none exceeds the maximum."""
    packets, p99_ms, max_ms = (lateness["packets"], lateness["late_p99_us"] / 1e3,
                               lateness["late_max_us"] / 1e3)
    above = packets - 1 - math.floor(0.99 * (packets - 1))
    return p99_ms + above / packets * (max_ms - p99_ms)


def test_mean_response_time_is_the_mm1_sojourn_time(mm1_run):
    client, server, _ = mm1_run
    theory_ms = 1e3 / (SERVICE_RATE - ARRIVAL_RATE)  # 10 ms
    # Successive response times share busy periods, so their sample mean varies about three
    # times more than that of independent ones (0.95 ms against 10 / sqrt(1000) = 0.32 ms at
    # these rates) and is skewed to the right; the bounds are the simulated sample means'
    # 0.1% and 99.9% quantiles, about -22% and +41% of the theory's 10 ms.
    means = simulated_mean_sojourns(REQUESTS, ARRIVAL_RATE, SERVICE_RATE, SIMULATED_RUNS,
                                    seed=3)
    low, high = means[int(TAIL * SIMULATED_RUNS)], means[int((1 - TAIL) * SIMULATED_RUNS) - 1]
    assert low < theory_ms < high
    # What the two programs counted of their own lateness widens the bounds (a few hundredths
    # of a millisecond on a quiet machine). A response that leaves late adds its lateness to
    # its response time. A request that leaves late arrives late: shifting arrivals by at most
    # D moves every departure of the FIFO queue by at most D too (Lindley's recursion is
    # monotone and 1-Lipschitz in them), so each response time changes by at most D.
    arrivals_shifted_ms = client["lateness"]["late_max_us"] / 1e3
    responses_late_ms = mean_lateness_bound_ms(server["lateness"])
    assert low - arrivals_shifted_ms <= client["response_mean_ms"] \
        <= high + PATH_MARGIN_MS + arrivals_shifted_ms + responses_late_ms, (
        low, high, arrivals_shifted_ms, responses_late_ms)


def test_service_times_and_utilisation_follow_the_service_rate(mm1_run):
    _, server, _ = mm1_run
    # Exponential service times: their mean has standard error (1 / mu) / sqrt(n).
    service_mean_ms = 1e3 / SERVICE_RATE
    assert server["service_mean_ms"] == pytest.approx(
        service_mean_ms, abs=Z * service_mean_ms / math.sqrt(REQUESTS))
    # Poisson arrivals: the rate measured over n gaps has relative standard error 1 / sqrt(n).
    assert server["arrival_rate"] == pytest.approx(ARRIVAL_RATE,
                                                   rel=Z / math.sqrt(REQUESTS))
    # Utilisation is time in service (n services) over time spanned (about n gaps): a ratio of
    # two independent sums, each of relative standard error 1 / sqrt(n), so sqrt(2 / n).
    rho = ARRIVAL_RATE / SERVICE_RATE
    assert server["utilisation"] == pytest.approx(rho, rel=Z * math.sqrt(2 / REQUESTS))


def test_requests_nobody_answers_time_out(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind((LOOPBACK, 0))  # takes the requests, answers none
        client = start("request_client", "c", tmp_path, {
            "to": LOOPBACK, "port": silent.getsockname()[1], "rate": 50, "count": 5,
            "timeout": "200ms", "content": 42})
        summary = summary_of(client)
    assert (summary["sent"], summary["answered"], summary["timeouts"]) == (5, 0, 5)
    assert summary["response_mean_ms"] is None
    rows = table(tmp_path, "responses", "c", "request_client")
    assert [(row["content"], row["response_ms"], row["bytes"]) for row in rows] \
        == [("42", "", "")] * 5


def test_responses_are_padded_to_the_size_asked_for(tmp_path):
    server = start("request_server", "s", tmp_path, {"port": 0})
    port = listening_port(server)
    client = start("request_client", "c", tmp_path, {"to": LOOPBACK, "port": port, "rate": 50,
                                                      "count": 3, "response_bytes": "1200B"})
    assert summary_of(client)["answered"] == 3
    summary_of(server, stop=True)
    assert {row["bytes"] for row in table(tmp_path, "responses", "c", "request_client")} \
        == {"1200"}


@pytest.mark.parametrize("values", [{"response_bytes": 65_001}, {"rate": 0}, {"timeout": 0}])
def test_impossible_requests_are_refused(values):
    with pytest.raises(ValidationError):
        request_client.Params.model_validate({"to": LOOPBACK, "rate": 1} | values)


def test_the_server_counts_malformed_datagrams_and_still_serves(tmp_path):
    server = start("request_server", "s", tmp_path, {"port": 0})
    port = listening_port(server)
    request = REQUEST.pack(request=0, client=0, content=0, send_ns=0, response_bytes=0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for garbage in (b"", b"EB\x01", request[:-1], b"\xff" * len(request)):
            sender.sendto(garbage, (LOOPBACK, port))
    client = start("request_client", "c", tmp_path, {"to": LOOPBACK, "port": port, "rate": 50,
                                                      "count": 2})
    assert summary_of(client)["answered"] == 2
    served = summary_of(server, stop=True)
    assert (served["malformed"], served["served"]) == (4, 2)
