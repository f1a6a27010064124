"""Fixtures of the remoting tests: ``rmqstore serve`` (name server on base + 8, remoting broker
on base + 7) for the whole module, and a connection to each; ali-ons, installed."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs
from tests.services.proxy.conftest import Serve

NAMESRV_SLOT = 8
BROKER_SLOT = 7
ALI_ONS_DIR = procs.ROOT / "tests" / "clients" / "remoting"  # its package and our scripts


@pytest.fixture(scope="module")
def ali_ons() -> None:
    if not (ALI_ONS_DIR / "node_modules" / "ali-ons").exists():
        pytest.fail(f"ali-ons is not installed in {ALI_ONS_DIR}: run `make test-deps`")


class Served:
    def __init__(self, serve: Serve) -> None:
        self.serve = serve
        self.namesrv = serve.address(NAMESRV_SLOT)
        self.broker = serve.address(BROKER_SLOT)
        self.query = serve.address(1)
        self.writer = serve.address(0)


def serve_module(tmp_path_factory: pytest.TempPathFactory, *extra: str) -> Iterator[Served]:
    """``rmqstore serve`` with ``extra`` flags, for a module's ``served`` fixture."""
    store: Path = tmp_path_factory.mktemp("remoting") / "store"
    serve = Serve(store, "--broker-name", "rmqstore", *extra)  # (default: the host name)
    try:
        yield Served(serve)
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve_module(tmp_path_factory)
