"""What every gRPC service shares: server set-up, health, reflection, error mapping, shutdown.

Services call ``serve(...)`` from their ``__main__``; servicer methods are wrapped with
``grpc_errors`` so a ``StoreError`` becomes its gRPC status with its message, in one place.
"""

import asyncio
import functools
import gc
import inspect
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from concurrent import futures
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from rmqstore.errors import StoreError
from rmqstore.startup import (
    ORPHAN_GRACE_S,
    StartupError,
    StopSignal,
    check_port_free,
    orphaned,
    split_address,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # a service polls its writer while it is away (health): reconnect within a second of its
    # return, not after gRPC's default back-off of up to two minutes
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
# a server's port is its own: no SO_REUSEPORT, so a second server on a port fails to start
# instead of sharing (and splitting) the first one's calls
SERVER_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)]


def status_code(err: StoreError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, err.grpc_status, grpc.StatusCode.INTERNAL)


def grpc_errors(method: Callable) -> Callable:
    """Turn StoreError into the matching status: unary and server-streaming methods, plain
    or ``async`` (for ``AsyncService``)."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def async_streaming(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for item in method(self, request, context):
                    yield item
            except StoreError as e:
                await context.abort(status_code(e), str(e))

        return async_streaming
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def async_unary(self: Any, request: Any, context: Any) -> Any:
            try:
                return await method(self, request, context)
            except StoreError as e:
                await context.abort(status_code(e), str(e))

        return async_unary

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

    return streaming if inspect.isgeneratorfunction(method) else unary


UNDECODABLE = "Exception deserializing request!"
_BAD = object()  # a request whose bytes did not parse


def decode_checked(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler | None:
    """An ``async`` method's handler that answers a request that does not parse with INTERNAL
    and gRPC's own message, as the threaded server does (an asyncio server answers UNKNOWN with
    the parser's exception)."""
    if handler is None or handler.request_deserializer is None:
        return handler
    parse = handler.request_deserializer

    def lenient(raw: bytes) -> Any:
        try:
            return parse(raw)
        except Exception:
            return _BAD

    async def refuse(context: Any) -> None:
        await context.abort(grpc.StatusCode.INTERNAL, UNDECODABLE)

    async def checked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async for request in requests:
            if request is _BAD:
                await refuse(context)
            yield request

    out = handler.response_serializer
    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            if request is _BAD:
                await refuse(context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, lenient, out)
    if handler.unary_stream:
        inner = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            if request is _BAD:
                await refuse(context)
            async for item in inner(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, lenient, out)
    if handler.stream_unary:
        inner = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            return await inner(checked(requests, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, lenient, out)
    inner = handler.stream_stream

    async def stream_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
        async for item in inner(checked(requests, context), context):
            yield item

    return grpc.stream_stream_rpc_method_handler(stream_stream, lenient, out)


class _CheckedHandler(grpc.GenericRpcHandler):
    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self.inner = inner

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:
        return decode_checked(self.inner.service(handler_call_details))


class _CheckedRegistrar:
    """Stands in for an aio server while a service registers: every handler it adds goes
    through ``decode_checked`` (generated code adds generic handlers, newer code registered
    methods too)."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def add_generic_rpc_handlers(self, generic_handlers: Iterable[Any]) -> None:
        self.server.add_generic_rpc_handlers(tuple(_CheckedHandler(h) for h in generic_handlers))

    def add_registered_method_handlers(self, service_name: str, handlers: dict) -> None:
        checked = {name: decode_checked(h) for name, h in handlers.items()}
        self.server.add_registered_method_handlers(service_name, checked)


def freeze_startup_objects() -> None:
    """Exempt what the service made while starting (modules, protos, recovered state) from
    the cyclic garbage collector, once, right before it serves: a full collection then scans
    only what was made since. Over the 45,000 objects a service starts with, one stalled the
    event loop for 8-21 ms."""
    gc.collect()
    gc.freeze()


def announce(name: str, address: str) -> None:
    """Print ``rmqstore <name> listening on <address>`` in one write: test harnesses and
    ``rmqstore serve`` wait for this line to learn that, and where, a service serves."""
    sys.stdout.write(f"rmqstore {name} listening on {address}\n")
    sys.stdout.flush()


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def _bind(server: Any, address: str, credentials: grpc.ServerCredentials | None) -> int:
    """Add ``address`` to ``server`` (exclusively); the bound port, or ``StartupError``."""
    check_port_free(address)
    try:
        port = (server.add_secure_port(address, credentials) if credentials
                else server.add_insecure_port(address))  # fmt: skip
    except RuntimeError:
        port = 0
    if port == 0:
        host, wanted = split_address(address)
        check_port_free(address)  # taken between the check and the bind: say so
        raise StartupError(f"cannot listen for gRPC on {host}:{wanted}")
    return int(port)


class Service:
    """A running gRPC server with health checking and reflection."""

    def __init__(self, address: str, max_workers: int = 16,
                 credentials: grpc.ServerCredentials | None = None) -> None:
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers), options=SERVER_OPTIONS
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._names: list[str] = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
        self.port = _bind(self.server, address, credentials)
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
        self.server.stop(_grace(grace)).wait()


class AsyncService:
    """``Service`` on ``grpc.aio``: one event loop, in a thread of its own, runs every call, so
    no request or answer is handed between Python threads (the threaded server hands each to
    a worker and back, a context switch each time). Handlers must not block: what waits goes
    to ``run_blocking``. The methods below are called from other threads."""

    def __init__(self, address: str, credentials: grpc.ServerCredentials | None = None,
                 blocking_workers: int = 16) -> None:  # fmt: skip
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-aio", daemon=True)
        self._thread.start()
        self._blocking = futures.ThreadPoolExecutor(blocking_workers, "blocking")
        self._names: list[str] = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
        self.server, self.health, self.port = self.call(self._create(address, credentials))
        self.address = address.rsplit(":", 1)[0] + f":{self.port}"

    async def _create(
        self, address: str, credentials: grpc.ServerCredentials | None
    ) -> tuple[grpc.aio.Server, Any, int]:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        checker = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        return server, checker, _bind(server, address, credentials)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the service's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, awaited (for calls that wait on something)."""
        return await self.loop.run_in_executor(self._blocking, fn, *args)

    def add(self, add_fn: Callable, servicer: Any, descriptor: Any, name: str) -> None:
        """Register a servicer (its requests decoded as by ``decode_checked``);
        ``descriptor`` is the generated ``*_pb2.DESCRIPTOR``."""
        add_fn(servicer, _CheckedRegistrar(self.server))
        full = descriptor.services_by_name[name].full_name
        self._names.append(full)
        self.call(self.health.set(full, health_pb2.HealthCheckResponse.NOT_SERVING))

    def start(self) -> None:
        reflection.enable_server_reflection([*self._names, reflection.SERVICE_NAME], self.server)
        self.call(self.server.start())

    def set_serving(self, serving: bool = True) -> None:
        self.call(self.set_serving_here(serving))

    async def set_serving_here(self, serving: bool = True) -> None:
        """``set_serving`` from a coroutine on the service's own loop."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for n in ["", *self._names[1:]]:
            await self.health.set(n, status)

    def serve(self, name: str, on_stop: Callable[[], None], serving: bool = True) -> None:
        """Serve until SIGTERM or SIGINT, then run ``on_stop``: start, report healthy (or not,
        with ``serving`` False), leave the startup objects out of garbage collections, and
        ``announce`` it."""
        termination = Termination()  # before the line: a stop sent on seeing it is handled
        self.start()
        self.set_serving(serving)
        freeze_startup_objects()
        announce(name, self.address)
        termination.wait(on_stop)

    def stop(self, grace: float = 5.0,
             then: Callable[[], Coroutine[Any, Any, Any]] | None = None) -> None:
        """Stop serving (calls in flight get ``grace`` seconds), run ``then()`` on the loop
        (to close what lives on it, such as client channels), cancel what is left on it, as
        ``asyncio.run`` does, then end the loop."""
        self.set_serving(False)
        self.call(self.server.stop(_grace(grace)))
        if then is not None:
            self.call(then())
        self.call(_cancel_the_rest())
        self._blocking.shutdown(wait=False, cancel_futures=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


def _grace(grace: float) -> float:
    """Calls in flight get ``grace`` seconds at a stop; a service whose ``serve`` died gets
    ``ORPHAN_GRACE_S`` at most: its peers are stopping too, and their streams would hold it."""
    return min(grace, ORPHAN_GRACE_S) if orphaned() else grace


async def _cancel_the_rest() -> None:
    """Cancel every other task of the running loop (say, a client call's own bookkeeping
    that the channel's close left behind) and let each end, so none is destroyed pending."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Termination:
    """SIGTERM/SIGINT handling, installed on construction.

    Create it before printing the listening line, so a signal sent the moment a service
    announces itself already stops it cleanly; then ``wait(on_stop)``.
    """

    def __init__(self) -> None:
        self._signal = StopSignal()

    def wait(self, on_stop: Callable[[], None]) -> None:
        """Block until a signal arrives, then run ``on_stop`` once."""
        while not self._signal.wait(1.0):
            pass
        log.info("signal %s: stopping", self._signal.signum)
        on_stop()


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
