"""TLS: the official Python producer (``tls_enable=True``) sends through a proxy serving TLS,
which itself reaches the writer over TLS; the CA is trusted through gRPC's
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, as a deployment would add its CA to the roots."""

import subprocess

import pytest

from tests import procs
from tests.reliability.test_tls import issue, make_ca
from tests.services.proxy.conftest import PYTHON_CLIENT, client_env

pytestmark = pytest.mark.integration

SEND_ONE = """
import sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
producer = Producer(ClientConfiguration(sys.argv[1], Credentials(), request_timeout=10),
                    ("Secure",), tls_enable=True)
producer.startup()
m = Message()
m.topic, m.body = "Secure", b"over tls"
print(producer.send(m).message_id, flush=True)
producer.shutdown()
"""


def test_official_client_over_tls_to_the_proxy_and_on_to_the_writer(tmp_path, client_runtimes):
    ca = make_ca(tmp_path, "proxy-test-ca")
    cert, key = issue(tmp_path, ca, "service", server=True, client=True)
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tmp_path / "proxy-test-ca.pem")}
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", *tls, env=roots)  # fmt: skip
    proxy = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                        writer.address, *tls, env=roots)  # fmt: skip
    try:
        env = {**client_env(tmp_path / "home"), **roots}
        run = subprocess.run([str(PYTHON_CLIENT), "-c", SEND_ONE, proxy.address], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        assert len(run.stdout.strip()) == 34
        plain = {**env}
        plain.pop("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")
        untrusted = subprocess.run(
            [str(PYTHON_CLIENT), "-c", SEND_ONE, proxy.address],
            env=plain,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert untrusted.returncode != 0  # a CA the client does not trust: no connection
    finally:
        proxy.stop()
        writer.stop()
