"""Access keys with the official clients: the Python and Node.js producers sign their calls
(``Credentials(ak, sk)``, ``sessionCredentials``) and a proxy started with ``--access-key``
and its secret in ``$RMQSTORE_SECRET_KEY`` takes them (their signed dates within its
window); a wrong secret is refused and nothing is stored."""

import subprocess

import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from tests import procs
from tests.services.proxy.conftest import CLIENTS, PYTHON_CLIENT, client_env

pytestmark = pytest.mark.integration

PYTHON_SEND = """
import sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, ak, sk = sys.argv[1:4]
producer = Producer(ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=5),
                    ("Signed",))
producer.startup()
m = Message()
m.topic, m.body = "Signed", b"signed by python"
print(producer.send(m).message_id, flush=True)
producer.shutdown()
"""
NODE_SEND = """
const { Producer } = require('rocketmq-client-nodejs');
const [endpoint, ak, sk] = process.argv.slice(1);
(async () => {
  const producer = new Producer({ endpoints: endpoint, namespace: '', topics: ['Signed'],
    requestTimeout: 5000, sessionCredentials: { accessKey: ak, accessSecret: sk } });
  await producer.startup();
  const sent = await producer.send({ topic: 'Signed', body: Buffer.from('signed by node') });
  console.log(sent.messageId);
  await producer.shutdown();
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("keys")
    writer = procs.start("services.commitlog", "--store", str(tmp / "store"), "--listen",
                         "127.0.0.1:0")  # fmt: skip
    proxy = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                        writer.address, "--access-key", "AK",
                        env={"RMQSTORE_SECRET_KEY": "SK"})  # fmt: skip
    try:
        yield writer, proxy, client_env(tmp / "home")
    finally:
        proxy.stop()
        writer.stop()


def _send(client: str, proxy: str, secret: str, env: dict, tz: str = "UTC"
          ) -> subprocess.CompletedProcess:  # fmt: skip
    command = {"python": [str(PYTHON_CLIENT), "-c", PYTHON_SEND],
               "node": ["node", "-e", NODE_SEND]}[client]  # fmt: skip
    # the Python client signs its local time marked as UTC: the proxy reads it as UTC
    return subprocess.run([*command, proxy, "AK", secret], cwd=CLIENTS, env={**env, "TZ": tz},
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _max_offset(writer) -> int:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    return stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset


@pytest.mark.parametrize("client", ["python", "node"])
def test_an_official_client_with_the_keys_sends(secured, client_runtimes, client):
    writer, proxy, env = secured
    before = _max_offset(writer)
    run = _send(client, proxy.address, "SK", env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.stdout.strip()) == 34  # the message id
    assert _max_offset(writer) > before


@pytest.mark.parametrize("client", ["python", "node"])
def test_an_official_client_with_a_wrong_secret_is_refused(secured, client_runtimes, client):
    writer, proxy, env = secured
    before = _max_offset(writer)
    run = _send(client, proxy.address, "wrong", env)
    assert run.returncode != 0, run.stdout
    assert _max_offset(writer) == before


def test_a_signature_dated_outside_the_window_is_refused(secured, client_runtimes):
    """The Python client writes its local time as the signed date: three hours ahead of UTC,
    it is outside the proxy's 15 minutes, as a replayed signature would be."""
    writer, proxy, env = secured
    before = _max_offset(writer)
    run = _send("python", proxy.address, "SK", env, tz="Etc/GMT-3")
    assert run.returncode != 0, run.stdout
    # the client shows no reason; the proxy's log does (the reply's status carries it)
    assert any("UNAUTHORIZED" in line and "ahead of the proxy's clock" in line
               for line in proxy.lines), proxy.lines[-20:]  # fmt: skip
    assert _max_offset(writer) == before
