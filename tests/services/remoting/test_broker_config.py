"""UPDATE_BROKER_CONFIG's refusals (only ``brokerPermission``, 4 or 6) and the properties
text mqadmin sends; the change itself: ``tests/integration/test_drain.py``."""

import asyncio

import grpc

from rmqstore.broker_perm import PermissionReader
from rmqstore.formats import remoting as R
from services.remoting.broker_config import BrokerConfig, parse_properties


def test_properties_as_java_writes_them() -> None:
    text = b"#comment\n! also\nbrokerPermission=4\nkey : value \n\nflag\n"
    assert parse_properties(text) == {"brokerPermission": "4", "key": "value", "flag": ""}


def test_other_keys_and_values_are_refused_before_the_writer_is_asked() -> None:
    async def main() -> list[R.Command]:
        registered = []

        async def register_now() -> None:
            registered.append(1)

        async with grpc.aio.insecure_channel("127.0.0.1:1") as nobody:
            config = BrokerConfig("C", "b", PermissionReader(nobody), register_now)
            out = []
            for body in (b"brokerPermission=4\nautoCreateTopicEnable=false\n", b"",
                         b"brokerPermission=7\n", b"brokerPermission=x\n",
                         b"brokerPermission=4\n"):  # fmt: skip
                cmd = R.Command(code=R.RequestCode.UPDATE_BROKER_CONFIG, body=body)
                out.append(await config.update(None, cmd))  # type: ignore[arg-type]
            assert registered == []  # nothing changed, nothing registered
            return out

    answers = asyncio.run(main())
    assert [a.code for a in answers] == [R.ResponseCode.SYSTEM_ERROR] * 5
    assert [a.remark for a in answers[:4]] == [
        "only brokerPermission can be changed on this broker, not autoCreateTopicEnable",
        "only brokerPermission can be changed on this broker",
        "brokerPermission '7' is not 6 (read-write) or 4 (read-only)",
        "brokerPermission 'x' is not 6 (read-write) or 4 (read-only)",
    ]
    assert answers[4].remark is not None and answers[4].remark.startswith(
        "brokerPermission not changed: ")  # the writer cannot be asked


def test_get_broker_config_answers_java_properties() -> None:
    async def main() -> R.Command:
        async def register_now() -> None:
            pass

        async with grpc.aio.insecure_channel("127.0.0.1:1") as nobody:
            reader = PermissionReader(nobody)
            reader.perm = 4  # the last value read, kept while the writer cannot be asked
            config = BrokerConfig("C", "b", reader, register_now)
            cmd = R.Command(code=R.RequestCode.GET_BROKER_CONFIG)
            return await config.get(None, cmd)  # type: ignore[arg-type]

    answer = asyncio.run(main())
    assert answer.code == R.ResponseCode.SUCCESS and answer.ext and "version" in answer.ext
    assert parse_properties(answer.body) == {"brokerClusterName": "C", "brokerName": "b",
                                             "brokerPermission": "4"}  # fmt: skip
