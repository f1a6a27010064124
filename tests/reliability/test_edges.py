"""The edges of every service, with real processes: a port clash, metrics binding, a POSIX
lock held by another process, a writer of another store, TLS that cannot work, and the query
service's health while its writer is away."""

import fcntl
import os
import socket
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest

from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from tests import procs
from tests.reliability.cluster import fresh_channel, wait_until
from tests.reliability.test_tls import check

pytestmark = pytest.mark.integration


def writer(store, *extra: str, listen: str = "127.0.0.1:0") -> procs.ServiceProcess:
    return procs.start("services.commitlog", "--store", str(store), "--listen", listen,
                       "--commitlog-segment-size", str(1 << 20), *extra)


def refused(module: str, *argv: str) -> tuple[int, str]:
    """Run a service expected not to start: its exit code and its stderr."""
    r = subprocess.run([sys.executable, "-m", module, *argv], cwd=procs.ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and " listening on " not in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stderr


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_second_writer_on_the_same_port_is_refused(tmp_path):
    first = writer(tmp_path / "a")
    try:
        port = first.address.rsplit(":", 1)[1]
        code, err = refused("services.commitlog", "--store", str(tmp_path / "b"),
                            "--listen", first.address)
        line = error_line(err)
        print(f"second writer on {first.address}: exit {code}: {line}")
        assert code == 2
        assert line == f"error: commitlog: gRPC port {port} on 127.0.0.1 is already in use"
        assert not (tmp_path / "b").exists(), "the refused writer created its store"
    finally:
        first.stop()


def test_metrics_bind_the_listen_host_and_exclusively(tmp_path):
    port = procs.free_port()
    w = writer(tmp_path / "a", "--metrics-port", str(port))
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b"rmqstore_build_info" in body
        with socket.socket() as s:  # another loopback address: nothing listens there
            assert s.connect_ex(("127.0.0.2", port)) != 0, "metrics listen on every address"
        code, err = refused("services.commitlog", "--store", str(tmp_path / "b"),
                            "--listen", "127.0.0.1:0", "--metrics-port", str(port))
        assert error_line(err) == (f"error: commitlog: metrics port {port} on 127.0.0.1 is "
                                   "already in use")
    finally:
        w.stop()


def test_a_posix_lock_held_by_another_process_keeps_the_writer_out(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "lock").write_bytes(b"")
    holder = subprocess.Popen(  # RocketMQ's FileChannel.tryLock: a POSIX record lock
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.lockf(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
         str(store / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, err = refused("services.commitlog", "--store", str(store),
                            "--listen", "127.0.0.1:0")
        line = error_line(err)
        print(f"writer beside a POSIX lock: exit {code}: {line}")
        assert code == 2 and "locked by another writer" in line and "POSIX" in line
        assert sorted(p.name for p in store.iterdir()) == ["lock"], "the writer wrote"
    finally:
        holder.kill()
        holder.wait(10)
    w = writer(store)  # the lock released, the writer starts
    try:
        fd = os.open(store / "lock", os.O_RDWR)
        try:  # and now it holds the record lock a broker would ask for
            with pytest.raises(OSError):
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        w.stop()


def test_builders_and_query_refuse_a_writer_of_another_store(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    wa = writer(a)
    wb = writer(b)
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(wa.address))
        r = stub.Put(commitlog_pb2.PutRequest(message={"topic": "T", "body": b"x"}), timeout=10)
        ida = (a / "rmqstore" / "store-id").read_text().strip()
        assert stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).store_id == ida
        for module, argv in (("services.indexer", ("index",)),
                             ("services.indexer", ("consume-queue",)),
                             ("services.query", ())):
            code, err = refused(module, *argv, "--store", str(b), "--commitlog", wa.address,
                                "--listen", "127.0.0.1:0")
            line = error_line(err)
            print(f"{module} {' '.join(argv)} of store b at a's writer: exit {code}: {line}")
            assert code == 2 and "serves another store" in line and ida in line
        assert not (b / "index").exists() and not (b / "consumequeue").exists()
        # the writer itself refuses a read or a subscription made for another store
        with pytest.raises(grpc.RpcError) as e:
            stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
                offsets=[r.phy_offset], store_id="0" * 32), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as e:
            next(iter(stub.Subscribe(commitlog_pb2.SubscribeRequest(
                subscriber="index", store_id="0" * 32), timeout=10)))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "serves store" in e.value.details()
    finally:
        wa.stop()
        wb.stop()


def test_a_builder_never_builds_from_another_stores_writer_after_a_swap(tmp_path):
    """A builder running on store b whose writer address later serves store a (b's writer
    stopped, a's started on its port) logs the refusal and builds nothing from it."""
    a, b = tmp_path / "a", tmp_path / "b"
    wb = writer(b)
    listen = wb.address
    ix = procs.start("services.indexer", "index", "--store", str(b), "--commitlog", listen,
                     "--listen", "127.0.0.1:0", "--flush-interval-ms", "50")
    try:
        wb.stop()
        wa = writer(a, listen=listen)
        try:
            stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(wa.address))
            stub.Put(commitlog_pb2.PutRequest(message={"topic": "T", "body": b"x", "keys": "k"}),
                     timeout=10)
            wait_until(lambda: any("serves another store" in x for x in ix.lines), 30,
                       "the builder to refuse the other store's writer")
            assert not list((b / "index").glob("*")), "the builder indexed another store"
            assert any(" ERROR " in x and "serves another store" in x for x in ix.lines)
        finally:
            wa.stop()
    finally:
        ix.stop()


def _health(address: str) -> str:
    return check(address, None)  # plaintext


def test_query_health_follows_its_writer(tmp_path):
    store = tmp_path / "store"
    w = writer(store)
    listen = w.address
    q = procs.start("services.query", "--store", str(store), "--commitlog", listen,
                    "--listen", "127.0.0.1:0")
    try:
        assert _health(q.address) == "SERVING"
        w.stop()
        wait_until(lambda: _health(q.address) == "NOT_SERVING", 30, "query NOT_SERVING")
        warned = [x for x in q.lines if " WARNING " in x and "cannot be used" in x]
        print("query while its writer is down:", warned[:1])
        assert warned
        w = writer(store, listen=listen)
        wait_until(lambda: _health(q.address) == "SERVING", 30, "query SERVING again")
    finally:
        q.stop()
        w.stop()


def test_tls_that_cannot_work_is_refused_at_start_up(tmp_path):
    from tests.reliability.test_tls import issue, make_ca

    ca = make_ca(tmp_path, "edge-ca")
    cert, key = issue(tmp_path, ca, "svc", server=True, client=True)
    code, err = refused("services.indexer", "index", "--store", str(tmp_path / "s"),
                        "--commitlog", "127.0.0.1:1", "--listen", "127.0.0.1:0",
                        "--tls-cert", str(cert), "--tls-key", str(key))
    line = error_line(err)
    print(f"builder with a certificate and no CA: exit {code}: {line}")
    assert code == 2 and line.startswith("error: index: TLS: --tls-cert without --tls-ca")
    code, err = refused("services.commitlog", "--store", str(tmp_path / "s"), "--listen",
                        "127.0.0.1:0", "--tls-cert", str(cert))
    assert error_line(err) == ("error: commitlog: TLS: --tls-cert and --tls-key go together: "
                               "give both or neither")
    code, err = refused("services.query", "--store", str(tmp_path / "s"), "--commitlog",
                        "127.0.0.1:1", "--tls-ca", str(tmp_path / "missing.pem"))
    assert "cannot read it" in error_line(err)
    # serve takes TLS from the environment: the same setting is refused before any service runs
    env = {**os.environ, "RMQSTORE_TLS_CERT": str(cert), "RMQSTORE_TLS_KEY": str(key)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "services.cli.main", "serve", "--store",
                        str(tmp_path / "s2"), "--port-base", str(procs.free_port())],
                       cwd=procs.ROOT, capture_output=True, text=True, env=env, timeout=60)
    print(f"serve with server-only TLS: exit {r.returncode} after "
          f"{time.monotonic() - t0:.1f} s: {r.stderr.strip()}")
    assert r.returncode == 2 and "--tls-cert without --tls-ca" in error_line(r.stderr)
    assert not (tmp_path / "s2").exists()


def test_a_builder_that_cannot_reach_its_writer_over_tls_says_why(tmp_path):
    """A TLS builder against a plaintext writer: the handshake fails; the builder starts,
    logs the reason at WARNING (it was INFO) and keeps trying."""
    from tests.reliability.test_tls import issue, make_ca

    ca = make_ca(tmp_path, "edge-ca")
    cert, key = issue(tmp_path, ca, "svc", server=True, client=True)
    w = writer(tmp_path / "store")
    try:
        ix = procs.start("services.indexer", "index", "--store", str(tmp_path / "store"),
                         "--commitlog", w.address, "--listen", "127.0.0.1:0",
                         "--tls-cert", str(cert), "--tls-key", str(key),
                         "--tls-ca", str(tmp_path / "edge-ca.pem"))
        try:
            wait_until(lambda: any(" WARNING " in x and "not usable" in x for x in ix.lines),
                       30, "the builder's WARNING")
            warned = [x for x in ix.lines if " WARNING " in x]
            print("TLS builder against a plaintext writer:", warned[-1][:200])
            assert all("UNAVAILABLE" in x for x in warned)
        finally:
            ix.stop()
    finally:
        w.stop()
