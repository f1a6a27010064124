"""RocketMQ 4.x's ACL signature as ``rmqstore`` signs requests, checked against a signer
written from the format's description (``tests.remoting_wire.signed``)."""

from rmqstore.formats import remoting as R
from rmqstore.formats.remoting_acl import sign
from tests.remoting_wire import signed


def test_a_request_is_signed_as_a_4x_client_signs_it_and_left_unchanged():
    ext = {"topic": "T", "queueId": "3", "b": "x", "Z": "z"}
    cmd = R.Command(code=R.RequestCode.UPDATE_AND_CREATE_TOPIC, ext=ext, body=b"\x00body")
    out = sign(cmd, "AK", "secret")
    assert out.ext == signed(ext, "AK", "secret", b"\x00body")
    assert cmd.ext == ext and "Signature" not in ext  # a copy


def test_a_request_without_fields_or_body_signs_the_access_key_alone():
    out = sign(R.Command(code=R.RequestCode.GET_ALL_TOPIC_CONFIG), "AK", "secret")
    assert out.ext == signed({}, "AK", "secret")
