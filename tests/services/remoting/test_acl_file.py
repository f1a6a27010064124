"""The remoting broker's ACL with a RocketMQ ``plain_acl.yml`` (``--acl-file``): who passes
(address white lists, signatures with each account's secret, the store's key as an admin),
what each account may do (admin commands, PUB and SUB on topics and groups), and the file
read again when it changes. Requests are signed as a 4.x client signs them
(``tests.remoting_wire.signed``)."""

import json
import os
import time

import pytest

from rmqstore.formats import remoting as R
from rmqstore.formats.plain_acl import AclFileError
from services.remoting import acl
from services.remoting.acl import Accounts, Signed
from tests.remoting_wire import signed

C = R.RequestCode
OK, REFUSED = R.ResponseCode.SUCCESS, R.ResponseCode.SYSTEM_ERROR
FILE = """
globalWhiteRemoteAddresses: [10.10.103.*]
accounts:
  - accessKey: producerA
    secretKey: secret-of-a
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=PUB, Audit=SUB, Both=PUB|SUB]
    groupPerms: [Billing=SUB]
  - accessKey: trustedB
    secretKey: secret-of-b
    whiteRemoteAddress: 192.168.1.*
  - accessKey: operator
    secretKey: secret-of-op
    admin: true
"""


class _Passed:
    def __init__(self) -> None:
        self.codes: list[int] = []

    def __call__(self, conn, req: R.Command) -> R.Command:  # type: ignore[no-untyped-def]
        self.codes.append(req.code)
        return R.response_to(req)


class _Conn:
    def __init__(self, remote: str) -> None:
        self.remote = remote


@pytest.fixture
def acl_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(FILE)
    return path


def _ask(accounts: Accounts, code: int, ext: dict[str, str], key: str = "", secret: str = "",
         body: bytes = b"", remote: str = "10.0.0.9:4000") -> R.Command:  # fmt: skip
    passed = _Passed()
    fields = signed(ext, key, secret, body) if key else ext
    req = R.Command(code=code, ext=fields, body=body)
    answer = Signed(passed, accounts)(_Conn(remote), req)  # type: ignore[arg-type]
    assert isinstance(answer, R.Command)
    assert (answer.code == OK) == (passed.codes == [code]), "refused yet handled"
    return answer


def _send(topic: str) -> tuple[int, dict[str, str]]:
    return C.SEND_MESSAGE_V2, {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0"}


def _pull(topic: str, group: str) -> tuple[int, dict[str, str]]:
    return C.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": "0",
                            "queueOffset": "0", "sysFlag": "2"}  # fmt: skip


def test_each_account_may_do_what_its_permissions_say(acl_file):
    accounts = Accounts(path=acl_file)
    a = ("producerA", "secret-of-a")
    cases = [
        (_send("Orders"), OK), (_send("Both"), OK),
        (_send("Audit"), "may not send to topic Audit"),
        (_send("Other"), "may not send to topic Other"),  # the default: DENY
        (_pull("Audit", "Billing"), OK), (_pull("Both", "Billing"), OK),
        (_pull("Orders", "Billing"), "may not subscribe to topic Orders"),
        (_pull("Audit", "Elsewhere"), "may not subscribe to group Elsewhere"),
        ((C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "Billing", "topic": "Audit",
                                    "queueId": "0"}), OK),
        ((C.CONSUMER_SEND_MSG_BACK, {"group": "Billing", "originTopic": "Audit",
                                     "offset": "0"}), "may not send to topic Audit"),
        ((C.UPDATE_AND_CREATE_TOPIC, {"topic": "Orders"}), "needs an admin account"),
        ((C.DELETE_TOPIC_IN_BROKER, {"topic": "Orders"}), "needs an admin account"),
        ((C.GET_BROKER_CLUSTER_INFO, {}), OK),  # touches no topic or group
    ]  # fmt: skip
    for (code, ext), want in cases:
        answer = _ask(accounts, code, ext, *a)
        if want == OK:
            assert answer.code == OK, (code, ext, answer.remark)
        else:
            assert answer.code == REFUSED and str(want) in (answer.remark or ""), answer.remark


def test_a_heartbeat_needs_sub_on_its_groups_and_their_topics(acl_file):
    accounts = Accounts(path=acl_file)

    def beat(group: str, topic: str) -> R.Command:
        body = json.dumps({"clientID": "c1", "consumerDataSet": [{
            "groupName": group, "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
        }], "producerDataSet": [{"groupName": "AnyProducer"}]}).encode()  # fmt: skip
        return _ask(accounts, C.HEART_BEAT, {}, "producerA", "secret-of-a", body)

    assert beat("Billing", "Audit").code == OK
    assert "group Other" in (beat("Other", "Audit").remark or "")
    assert "topic Orders" in (beat("Billing", "Orders").remark or "")


def test_white_lists_and_admins(acl_file):
    accounts = Accounts(("storeKey1", "store-secret"), acl_file)
    send = _send("Anything")
    # the global white list: no key, no signature
    assert _ask(accounts, *send, remote="10.10.103.7:1").code == OK
    assert _ask(accounts, *send, remote="10.10.104.7:1").remark.startswith("ACL: the request")
    # an account's white list: its key, no signature, any permission
    assert _ask(accounts, *send, "trustedB", "not-its-secret", remote="192.168.1.5:1").code == OK
    wrong = _ask(accounts, *send, "trustedB", "not-its-secret", remote="192.168.2.5:1")
    assert "does not match" in (wrong.remark or "")
    # admins: the file's and the store's own key
    for key, secret in (("operator", "secret-of-op"), ("storeKey1", "store-secret")):
        assert _ask(accounts, C.DELETE_TOPIC_IN_BROKER, {"topic": "X"}, key, secret).code == OK
    assert "not known" in (_ask(accounts, *send, "nobody1", "secret-x").remark or "")


def test_the_file_is_read_again_when_it_changes_and_a_bad_version_is_not_applied(
    acl_file, monkeypatch, caplog
):
    monkeypatch.setattr(acl, "RELOAD_CHECK_S", 0.0)
    accounts = Accounts(path=acl_file)
    a = ("producerA", "secret-of-a")
    assert _ask(accounts, *_send("Audit"), *a).code == REFUSED
    acl_file.write_text(FILE.replace("Audit=SUB", "Audit=PUB|SUB"))
    os.utime(acl_file, ns=(time.time_ns(), time.time_ns() + 10**9))  # a later mtime
    assert _ask(accounts, *_send("Audit"), *a).code == OK
    acl_file.write_text("accounts: [")  # half-written: the accounts before stay
    os.utime(acl_file, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert _ask(accounts, *_send("Audit"), *a).code == OK
    assert "not applied, the accounts before kept" in caplog.text


def test_a_file_that_cannot_be_applied_at_the_start_is_an_error(tmp_path):
    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts:\n  - {accessKey: abc, secretKey: 12345678}\n")
    with pytest.raises(AclFileError, match="more than 6 characters"):
        Accounts(path=bad)
    with pytest.raises(OSError):
        Accounts(path=tmp_path / "missing.yml")


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--acl"], "--acl needs --access-key"),
        (["--acl-file", "{bad}"], "more than 6 characters"),
        (["--acl-file", "{missing}"], "No such file"),
    ],
)  # fmt: skip
def test_the_broker_does_not_start_with_acl_flags_it_cannot_apply(tmp_path, flags, words):
    import subprocess
    import sys

    from tests import procs

    bad, missing = tmp_path / "bad.yml", tmp_path / "missing.yml"
    bad.write_text("accounts:\n  - {accessKey: abc, secretKey: 12345678}\n")
    argv = [f.format(bad=bad, missing=missing) for f in flags]
    run = subprocess.run(
        [sys.executable, "-m", "services.remoting", "--store", str(tmp_path / "store"),
         "--listen", "127.0.0.1:0", *argv],
        cwd=procs.ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2 and words in run.stderr, (run.returncode, run.stderr[-2000:])
