"""Build, start and stop the gRPC server: the app service, health checking, reflection.

Secure by default: with `tls` the server speaks mTLS only (client certificates required) and
`policy` authorizes each method; without `tls` it serves plaintext on a loopback address
only, unless `insecure_remote=True` says the operator means plaintext on the network (a
warning is logged at every plaintext start either way). One `Guard` interceptor applies
authorization and limits to every call; long-lived streams have their own thread budget
(`Limits.streams`, and `Limits.streams_roleless` for callers without a role) on top of the
`Limits.workers` threads that unary calls need.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.errors import InputError
from controller.service.auth import PolicyStore
from controller.service.engine import Engine
from controller.service.guard import Guard
from controller.service.limits import SERVER_MAX_MESSAGE, Limits
from controller.service.metrics import RpcMetrics
from controller.service.servicer import TrafficEngineering
from controller.service.tls import ServerTls

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TrafficEngineering"].full_name
log = logging.getLogger("fabric_te.server")


@dataclass
class Running:
    """A started server and the pieces needed to stop it well."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    engine: Engine
    guard: Guard
    tls: ServerTls | None = None
    executor: futures.ThreadPoolExecutor | None = None

    def reload(self) -> None:
        """Re-read certificates and policy (SIGHUP); bad files keep the old ones."""
        try:
            if self.tls is not None:
                self.tls.reload()
        finally:  # a revocation in the policy never waits on the certificate files
            if self.guard.policy is not None and self.guard.policy.reload():
                self.guard.revoke()  # open streams the new policy no longer allows end now

    def stop(self, grace: float = 5.0) -> None:
        """NOT_SERVING first, then stop within `grace` seconds in all: calls in flight and a
        push under way get what is left of it; installed routes stay."""
        deadline = time.monotonic() + grace
        self.health.enter_graceful_shutdown()
        self.guard.close()
        self.server.stop(grace).wait(grace)
        if self.executor is not None:  # idle handler threads end; busy ones are reported
            self.executor.shutdown(wait=False, cancel_futures=True)
        self.engine.close(timeout=max(0.0, deadline - time.monotonic()))


def is_loopback(address: str) -> bool:
    """Whether `address` (host:port, [v6]:port) listens on loopback only."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_problem(address: str) -> str | None:
    """Why `address` cannot be bound, as the operating system says it; None where a probe
    binds it (`tectl serve` asks before its engine takes the lead and pushes anything)."""
    import socket

    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        family, kind, proto, _, sockaddr = infos[0]
        with socket.socket(family, kind, proto) as probe:
            # as gRPC binds: connections of a process killed a moment ago (TIME_WAIT) do not
            # hold the port; a live listener still does
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except (OSError, ValueError, IndexError) as err:
        return getattr(err, "strerror", None) or str(err)
    return None


def start(
    engine: Engine,
    address: str = "127.0.0.1:50051",
    *,
    tls: ServerTls | None = None,
    policy: PolicyStore | None = None,
    limits: Limits | None = None,
    insecure: bool = False,
    insecure_remote: bool = False,
) -> Running:
    """Serve `engine` on `address` (port 0 picks a free port). Plaintext (no `tls`) only on
    loopback, or anywhere with `insecure_remote`; InputError naming the address if it is
    refused or cannot be bound."""
    limits = limits or Limits()
    if tls is None and not insecure_remote and not is_loopback(address):
        raise InputError(f"refusing plaintext on non-loopback address {address}: anyone who "
                         "can reach it could reroute the fabric; give TLS certificates, or "
                         "listen on loopback, or add --insecure-remote to --insecure if that "
                         "is really meant")  # fmt: skip
    if tls is None:
        log.warning("plaintext on %s: no client authentication, every caller may call "
                    "every method%s", address, "" if is_loopback(address) else
                    " (NOT loopback: --insecure-remote)")  # fmt: skip
    guard = Guard(SERVICE_NAME, limits, RpcMetrics(engine.metrics.registry), policy)
    threads = limits.workers + limits.streams + limits.streams_roleless
    executor = futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fabric-te-rpc")
    server = grpc.server(
        executor,
        interceptors=[guard],
        maximum_concurrent_rpcs=4 * threads,  # beyond: RESOURCE_EXHAUSTED, not a queue
        options=[("grpc.max_receive_message_length", SERVER_MAX_MESSAGE),
                 ("grpc.so_reuseport", 0)],
    )  # fmt: skip
    pb_grpc.add_TrafficEngineeringServicer_to_server(TrafficEngineering(engine, limits), server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )  # fmt: skip
    try:
        if tls is not None:
            port = server.add_secure_port(address, tls.credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # gRPC's "Failed to bind": in use, or not an address of this host
        port = 0
    if port == 0:
        server.stop(None)
        executor.shutdown(wait=False)
        raise InputError(f"cannot listen on {address}: "
                         f"{listen_problem(address) or 'gRPC could not bind it'}")
    server.start()
    for name in ("", SERVICE_NAME):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving %s on port %d (%s)", SERVICE_NAME, port,
             "mTLS" if tls is not None else "plaintext")  # fmt: skip
    return Running(server, port, checker, engine, guard, tls, executor)
