"""The remoting broker's ACL check (``--acl``): a request passes only signed with the access
key's secret; the signatures here are made as a 4.x client makes them (``tests.remoting_wire
.signed``), not with the module under test."""

import pytest

from rmqstore.formats import remoting as R
from services.remoting.acl import Accounts, Signed
from tests.remoting_wire import signed

AK, SECRET = "AK1", "s3cret"
C = R.RequestCode


class _Passed:
    def __init__(self) -> None:
        self.requests: list[R.Command] = []

    def __call__(self, conn, req: R.Command) -> R.Command:  # type: ignore[no-untyped-def]
        self.requests.append(req)
        return R.response_to(req)


class _Conn:
    remote = "10.0.0.9:40000"


def _check(ext: dict[str, str], body: bytes = b"", code: int = C.SEND_MESSAGE_V2,
           refused: list[str] | None = None) -> tuple[R.Command, list[R.Command]]:  # fmt: skip
    inner = _Passed()
    req = R.Command(code=code, ext=ext, body=body)
    check = Signed(inner, Accounts((AK, SECRET)), None if refused is None else refused.append)
    answer = check(_Conn(), req)  # type: ignore[arg-type]
    assert isinstance(answer, R.Command)
    return answer, inner.requests


def test_a_request_signed_with_the_secret_passes_header_and_body_alike():
    ext = {"b": "T", "a": "PG", "i": "KEYS\x01k\x02", "e": "0"}
    answer, passed = _check(signed(ext, AK, SECRET, b"body"), b"body")
    assert answer.code == R.ResponseCode.SUCCESS and len(passed) == 1


def test_the_content_is_the_values_in_name_order_then_the_body():
    """``{"b": "2", "a": "1", "AccessKey": "ak"}`` with body ``xy`` signs ``ak12xy``: an
    independent HMAC of that exact text is taken."""
    import base64
    import hashlib
    import hmac

    text = "AK1" + "1" + "2"
    sig = base64.b64encode(hmac.new(SECRET.encode(), text.encode() + b"xy",
                                    hashlib.sha1).digest()).decode()  # fmt: skip
    answer, passed = _check({"b": "2", "a": "1", "AccessKey": AK, "Signature": sig}, b"xy")
    assert answer.code == R.ResponseCode.SUCCESS and passed


@pytest.mark.parametrize(
    ("ext", "body", "remark", "reason"),
    [
        ({"b": "T"}, b"", "carries no AccessKey", "no_access_key"),
        (signed({"b": "T"}, "OTHER", SECRET), b"", "access key OTHER is not known",
         "unknown_access_key"),
        (signed({"b": "T"}, AK, "wrong"), b"", "does not match the secret key of access key AK1",
         "bad_signature"),
        (signed({"b": "T"}, AK, SECRET), b"tampered", "does not match",  # the body changed
         "bad_signature"),
        ({**signed({"b": "T"}, AK, SECRET), "b": "U"}, b"", "does not match",  # a field changed
         "bad_signature"),
        ({"b": "T", "AccessKey": AK}, b"", "carries no Signature", "no_signature"),
    ],
)  # fmt: skip
def test_a_request_not_signed_with_the_secret_is_refused_counted_and_not_handled(
    ext, body, remark, reason, caplog
):
    refused: list[str] = []
    answer, passed = _check(ext, body, refused=refused)
    assert answer.code == R.ResponseCode.SYSTEM_ERROR
    assert answer.remark.startswith("ACL: ") and remark in answer.remark, answer.remark
    assert passed == [] and refused == [reason]
    assert "from 10.0.0.9:40000" in caplog.text and remark in caplog.text


def test_a_unique_key_query_passes_signed_with_or_without_its_flag():
    """mqadmin 4.9.3+ signs ``_UNIQUE_KEY_QUERY``, older clients add it unsigned: both pass;
    any other unsigned field does not."""
    ext = {"topic": "T", "key": "AC11000100002A9F0000000000000000", "maxNum": "32",
           "beginTimestamp": "0", "endTimestamp": "9"}  # fmt: skip
    with_flag = signed({**ext, "_UNIQUE_KEY_QUERY": "true"}, AK, SECRET)
    without = {**signed(ext, AK, SECRET), "_UNIQUE_KEY_QUERY": "true"}
    other = {**signed(ext, AK, SECRET), "extra": "true"}
    for fields, code in ((with_flag, R.ResponseCode.SUCCESS), (without, R.ResponseCode.SUCCESS),
                         (other, R.ResponseCode.SYSTEM_ERROR)):  # fmt: skip
        answer, _ = _check(fields, code=C.QUERY_MESSAGE)
        assert answer.code == code, (fields, answer.remark)
