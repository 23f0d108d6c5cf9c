"""Build, start and stop the gRPC server: the app service, health checking, reflection."""

from __future__ import annotations

import logging
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.api.fabric_te.v1 import te_pb2 as pb
from controller.api.fabric_te.v1 import te_pb2_grpc as pb_grpc
from controller.service.engine import Engine
from controller.service.servicer import TrafficEngineering

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TrafficEngineering"].full_name
log = logging.getLogger("fabric_te.server")


@dataclass
class Running:
    """A started server and the pieces needed to stop it well."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    engine: Engine

    def stop(self, grace: float = 5.0) -> None:
        """NOT_SERVING first, then stop with a grace period; installed routes stay."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self.engine.close()


def start(engine: Engine, address: str = "127.0.0.1:50051", workers: int = 16) -> Running:
    """Serve `engine` on `address` (port 0 picks a free port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    pb_grpc.add_TrafficEngineeringServicer_to_server(TrafficEngineering(engine), server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )  # fmt: skip
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    server.start()
    for name in ("", SERVICE_NAME):
        checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving %s on port %d", SERVICE_NAME, port)
    return Running(server, port, checker, engine)
