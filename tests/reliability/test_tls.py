"""TLS: ``rmqstore.tls`` against a tiny gRPC health server, then against the real services.

Certificates are made in the test (``cryptography``): a CA, a server certificate for
127.0.0.1/localhost, a client certificate from the same CA and a rogue client certificate
from another CA. Server-only TLS: a client that trusts the CA gets through, a plaintext
client does not. Mutual TLS (a CA on the server): only a client with a certificate signed
by that CA gets through.
"""

import argparse
import datetime as dt
import ipaddress
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rmqstore import tls
from rmqstore.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    indexer_pb2,
    indexer_pb2_grpc,
    query_pb2,
    query_pb2_grpc,
)
from tests import procs
from tests.reliability.cluster import wait_until

pytestmark = pytest.mark.integration


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_ca(directory: Path, cn: str):
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    (directory / f"{cn}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def issue(directory: Path, ca, cn: str, server: bool, client: bool = False
          ) -> tuple[Path, Path]:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    eku = x509.oid.ExtendedKeyUsageOID
    usage = [eku.SERVER_AUTH] if server else []
    usage += [eku.CLIENT_AUTH] if client or not server else []
    builder = (x509.CertificateBuilder().subject_name(_name(cn))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = directory / f"{cn}.crt", directory / f"{cn}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d, "rmqstore-test-ca")
    rogue = make_ca(d, "rogue-ca")
    server = issue(d, ca, "server", server=True)
    client = issue(d, ca, "client", server=False)
    intruder = issue(d, rogue, "intruder", server=False)
    # a service calling another one presents a certificate good for both roles
    both = issue(d, ca, "service", server=True, client=True)
    return {"ca": str(d / "rmqstore-test-ca.pem"), "server_cert": str(server[0]),
            "server_key": str(server[1]), "client_cert": str(client[0]),
            "client_key": str(client[1]), "intruder_cert": str(intruder[0]),
            "intruder_key": str(intruder[1]), "service_cert": str(both[0]),
            "service_key": str(both[1])}


def flags(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    tls.add_tls_flags(p)
    return p.parse_args(list(argv))


def health_server(args: argparse.Namespace) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    h = health.HealthServicer()
    h.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(h, server)
    port = tls.add_port(server, "127.0.0.1:0", args)
    assert port
    server.start()
    return server, f"127.0.0.1:{port}"


def check(address: str, args: argparse.Namespace | None) -> str:
    """SERVING, or the status name of the failure."""
    ch = tls.client_channel(address, args) if args is not None else grpc.insecure_channel(
        address)
    with ch:
        try:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as e:
            return e.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)


def test_server_tls_and_mutual_tls_on_a_health_server(pki):
    srv_only = flags("--tls-cert", pki["server_cert"], "--tls-key", pki["server_key"])
    server, addr = health_server(srv_only)
    try:
        results = {
            "client trusting the CA": check(addr, flags("--tls-ca", pki["ca"])),
            "plaintext client": check(addr, None),
            "client trusting another CA": check(addr, flags(
                "--tls-ca", str(Path(pki["ca"]).with_name("rogue-ca.pem")))),
        }
    finally:
        server.stop(0)
    print("server TLS:", results)
    assert results == {"client trusting the CA": "SERVING", "plaintext client": "UNAVAILABLE",
                       "client trusting another CA": "UNAVAILABLE"}

    mutual = flags("--tls-cert", pki["server_cert"], "--tls-key", pki["server_key"],
                   "--tls-ca", pki["ca"])
    server, addr = health_server(mutual)
    try:
        results = {
            "client with a CA-signed certificate": check(addr, flags(
                "--tls-ca", pki["ca"], "--tls-cert", pki["client_cert"],
                "--tls-key", pki["client_key"])),
            "client without a certificate": check(addr, flags("--tls-ca", pki["ca"])),
            "client with a certificate of another CA": check(addr, flags(
                "--tls-ca", pki["ca"], "--tls-cert", pki["intruder_cert"],
                "--tls-key", pki["intruder_key"])),
            "plaintext client": check(addr, None),
        }
    finally:
        server.stop(0)
    print("mutual TLS:", results)
    assert results == {"client with a CA-signed certificate": "SERVING",
                       "client without a certificate": "UNAVAILABLE",
                       "client with a certificate of another CA": "UNAVAILABLE",
                       "plaintext client": "UNAVAILABLE"}


def test_server_name_override(pki, tmp_path):
    """A certificate for a service name, reached by IP with --tls-server-name."""
    ca = make_ca(tmp_path, "named-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("commitlog"))
            .issuer_name(ca[0].subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("commitlog.rmqstore")]),
                           critical=False)
            .sign(ca[1], hashes.SHA256()))
    (tmp_path / "named.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, tmp_path / "named.key")
    server, addr = health_server(flags("--tls-cert", str(tmp_path / "named.crt"),
                                       "--tls-key", str(tmp_path / "named.key")))
    try:
        plain = check(addr, flags("--tls-ca", str(tmp_path / "named-ca.pem")))
        named = check(addr, flags("--tls-ca", str(tmp_path / "named-ca.pem"),
                                  "--tls-server-name", "commitlog.rmqstore"))
    finally:
        server.stop(0)
    print(f"certificate for commitlog.rmqstore reached as {addr}: without override {plain}, "
          f"with override {named}")
    assert (plain, named) == ("UNAVAILABLE", "SERVING")


@pytest.mark.parametrize(("argv", "text"), [
    (("--tls-cert", "c.pem"), "give both or neither"),
    (("--tls-key", "k.pem"), "give both or neither"),
    (("--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"), "cannot read"),
    (("--tls-ca", "CA_FILE"), "needs --tls-cert"),
    (("--tls-cert", "NOT_PEM", "--tls-key", "NOT_PEM"), "not a PEM file"),
])
def test_bad_settings_fail_at_start_up(tmp_path, pki, argv, text):
    path = {"CA_FILE": pki["ca"], "NOT_PEM": str(tmp_path / "x.txt")}
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(ValueError, match=text):
        tls.server_credentials(flags(*[path.get(a, a) for a in argv]))


def test_no_flags_means_plaintext(monkeypatch):
    for var in tls.ENV.values():
        monkeypatch.delenv(var, raising=False)
    args = flags()
    assert tls.server_credentials(args) is None and tls.channel_credentials(args) is None
    server, addr = health_server(args)
    try:
        assert check(addr, None) == "SERVING" and check(addr, args) == "SERVING"
    finally:
        server.stop(0)


def test_writer_serves_mutual_tls(pki, tmp_path):
    w = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                    "127.0.0.1:0", "--commitlog-segment-size", str(1 << 20),
                    "--tls-cert", pki["server_cert"], "--tls-key", pki["server_key"],
                    "--tls-ca", pki["ca"])
    try:
        good = flags("--tls-ca", pki["ca"], "--tls-cert", pki["client_cert"],
                     "--tls-key", pki["client_key"])
        with tls.client_channel(w.address, good) as ch:
            off = commitlog_pb2_grpc.CommitLogStub(ch).GetOffsets(
                commitlog_pb2.GetOffsetsRequest(), timeout=5)
        assert off.max_offset == 0
        for who, args in (("plaintext", None), ("no client certificate",
                                                 flags("--tls-ca", pki["ca"]))):
            assert check(w.address, args) == "UNAVAILABLE", who
    finally:
        w.stop()


def test_builders_and_query_reach_a_tls_writer(pki, tmp_path):
    svc = ("--tls-cert", pki["service_cert"], "--tls-key", pki["service_key"],
           "--tls-ca", pki["ca"])
    store = str(tmp_path / "store")
    w = procs.start("services.commitlog", "--store", store, "--listen", "127.0.0.1:0",
                    "--commitlog-segment-size", str(1 << 20), *svc)
    started = [w]
    try:
        for kind in ("consume-queue", "index"):
            started.append(procs.start("services.indexer", kind, "--store", store,
                                       "--commitlog", w.address, "--listen", "127.0.0.1:0",
                                       "--flush-interval-ms", "50", *svc))
        q = procs.start("services.query", "--store", store, "--commitlog", w.address,
                        "--listen", "127.0.0.1:0", *svc)
        started.append(q)
        client = flags("--tls-ca", pki["ca"], "--tls-cert", pki["client_cert"],
                       "--tls-key", pki["client_key"])
        for p in started:
            assert check(p.address, client) == "SERVING"
            assert check(p.address, None) == "UNAVAILABLE"
        # the builders and the query service reach the writer over mutual TLS themselves
        with tls.client_channel(w.address, client) as ch:
            r = commitlog_pb2_grpc.CommitLogStub(ch).Put(commitlog_pb2.PutRequest(
                message=common_pb2.Message(topic="Secure", body=b"sealed", keys="tls-key")),
                timeout=5)
        end = r.phy_offset + r.size
        for b in started[1:3]:
            with tls.client_channel(b.address, client) as ch:
                stub = indexer_pb2_grpc.BuilderStub(ch)
                wait_until(lambda s=stub: s.GetProgress(indexer_pb2.GetProgressRequest(),
                                                        timeout=5).durable_offset == end,
                           20, f"{b.address} to build over TLS")
        with tls.client_channel(q.address, client) as ch:
            found = query_pb2_grpc.QueryStub(ch).QueryByKey(query_pb2.QueryByKeyRequest(
                topic="Secure", key="tls-key"), timeout=5).messages
        print(f"over mutual TLS: put at {r.phy_offset}, both builders durable at {end}, "
              f"query found {[m.body for m in found]}")
        assert [m.body for m in found] == [b"sealed"]
    finally:
        for p in reversed(started):
            p.stop()
