"""What every gRPC service shares: server set-up, health, reflection, error mapping, shutdown.

Services call ``serve(...)`` from their ``__main__``; servicer methods are wrapped with
``grpc_errors`` so a ``StoreError`` becomes its gRPC status with its message, in one place.
"""

import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from rmqstore.errors import StoreError

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


def status_code(err: StoreError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.grpc_status, grpc.StatusCode.INTERNAL)


def grpc_errors(method: Callable) -> Callable:
    """Turn StoreError into the matching status (unary and server-streaming methods)."""

    @functools.wraps(method)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except StoreError as e:
            context.abort(status_code(e), str(e))

    @functools.wraps(method)
    def streaming(self: Any, request: Any, context: grpc.ServicerContext) -> Iterable[Any]:
        try:
            yield from method(self, request, context)
        except StoreError as e:
            context.abort(status_code(e), str(e))

    import inspect

    return streaming if inspect.isgeneratorfunction(method) else unary


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


class Service:
    """A running gRPC server with health checking and reflection."""

    def __init__(self, address: str, max_workers: int = 16,
                 credentials: grpc.ServerCredentials | None = None) -> None:
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers), options=CHANNEL_OPTIONS
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._names: list[str] = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
        self.port = (self.server.add_secure_port(address, credentials) if credentials
                     else self.server.add_insecure_port(address))
        if self.port == 0:
            raise OSError(f"cannot listen on {address}")
        self.address = address.rsplit(":", 1)[0] + f":{self.port}"

    def add(self, add_fn: Callable, servicer: Any, descriptor: Any, name: str) -> None:
        """Register a servicer; ``descriptor`` is the generated ``*_pb2.DESCRIPTOR``."""
        add_fn(servicer, self.server)
        full = descriptor.services_by_name[name].full_name
        self._names.append(full)
        self.health.set(full, health_pb2.HealthCheckResponse.NOT_SERVING)

    def start(self) -> None:
        reflection.enable_server_reflection([*self._names, reflection.SERVICE_NAME], self.server)
        self.server.start()

    def set_serving(self, serving: bool = True) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        self.health.set("", status)
        for n in self._names[1:]:
            self.health.set(n, status)

    def stop(self, grace: float = 5.0) -> None:
        self.set_serving(False)
        self.server.stop(grace).wait()


class Termination:
    """SIGTERM/SIGINT handling, installed on construction.

    Create it before printing the listening line, so a signal sent the moment a service
    announces itself already stops it cleanly; then ``wait(on_stop)``.
    """

    def __init__(self) -> None:
        self._done = threading.Event()
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping", signum)
        self._done.set()

    def wait(self, on_stop: Callable[[], None]) -> None:
        """Block until a signal arrives, then run ``on_stop`` once.

        Waits in short steps: the kernel may hand the signal to another thread, and Python
        runs its handler only in the main thread, between steps (an endless wait would miss
        it and the service would never stop)."""
        while not self._done.wait(0.2):
            pass
        on_stop()


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
