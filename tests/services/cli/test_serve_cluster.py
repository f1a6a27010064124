"""``rmqstore serve`` in a cluster: its broker's name, and the name servers its remoting
broker, query service and proxy are given."""

import socket

from services.cli import serve
from services.cli.main import build_parser


def _flags(module: str, *argv: str) -> list[str]:
    args = build_parser().parse_args(["serve", *argv])
    spec = next(s for s in serve.SERVICES if s.module == module)
    ports = {s.name: 8100 + s.slot for s in serve.SERVICES}
    return spec.flags(args, ports)


def test_serve_names_its_broker_after_the_host_by_default():
    flags = _flags("services.remoting")
    assert flags[flags.index("--broker-name") + 1] == socket.gethostname()


def test_serve_with_namesrv_registers_there_and_starts_no_name_server_of_its_own():
    argv = ("--namesrv", "10.0.0.9:9876;10.0.0.8:9876", "--broker-name", "b1",
            "--cluster-name", "C1")  # fmt: skip
    args = build_parser().parse_args(["serve", *argv])
    namesrv = next(s for s in serve.SERVICES if s.name == "namesrv")
    assert namesrv.skip(args)
    for module in ("services.remoting", "services.query", "services.proxy"):
        flags = _flags(module, *argv)
        assert flags[flags.index("--namesrv") + 1] == "10.0.0.9:9876;10.0.0.8:9876", module
        assert flags[flags.index("--cluster-name") + 1] == "C1", module
    query = _flags("services.query", *argv)
    assert query[query.index("--broker-name") + 1] == "b1"
    assert query[query.index("--store-host") + 1] == "127.0.0.1:8107"  # the remoting broker


def test_serve_without_namesrv_uses_its_own_name_server():
    args = build_parser().parse_args(["serve"])
    assert not next(s for s in serve.SERVICES if s.name == "namesrv").skip(args)
    flags = _flags("services.query")
    assert flags[flags.index("--namesrv") + 1] == "127.0.0.1:8108"
