"""``rmqstore topic create NAME --namesrv ADDR [--cluster C]``: the topic created on the master
of every broker of a cluster, as ``mqadmin updateTopic -c`` does — through the RocketMQ 4.x
protocol: the brokers and their masters from the name server (``GET_BROKER_CLUSTER_INFO``);
each master asked for its topics (``GET_ALL_TOPIC_CONFIG``: one that has the topic is left as
it is) and sent ``UPDATE_AND_CREATE_TOPIC`` otherwise, ``--type`` in its ``attributes`` as
RocketMQ 5's mqadmin sends it (a 4.x broker ignores it).

One line per broker (``--json``: one object); every broker is tried. Exit 0 when every
broker has the topic, ``UNAVAILABLE`` (3) naming the brokers that failed, ``NOT_FOUND`` (1)
for an unknown cluster.
"""

import argparse
import asyncio
import json

from rmqstore.formats import remoting as R
from rmqstore.formats.topics_json import MESSAGE_TYPE_ATTRIBUTE
from rmqstore.name_servers import masters
from rmqstore.remoting_net import RemotingClient, RemotingError
from services.cli import client
from services.cli.cluster_of import cluster_of
from services.cli.errors import UNAVAILABLE, CliError

TIMEOUT_S = 10.0


def _request(args: argparse.Namespace) -> R.Command:
    ext = {
        "topic": args.name, "defaultTopic": "TBW102", "readQueueNums": str(args.queues),
        "writeQueueNums": str(args.queues), "perm": str(args.perm),
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
    }  # fmt: skip
    if args.type:  # as RocketMQ 5's mqadmin updateTopic -a +message.type=TYPE sends it
        ext["attributes"] = f"{MESSAGE_TYPE_ATTRIBUTE}={args.type.upper()}"
    return R.Command(code=R.RequestCode.UPDATE_AND_CREATE_TOPIC, ext=ext)


async def _create_on(address: str, cmd: R.Command, keys: tuple[str, str]) -> dict:
    """What became of the topic on one master: created, exists (its queues, perm), failed
    (``keys``: the requests signed with them, for a broker under ``--acl``)."""
    client = RemotingClient(address, keys=keys)
    try:
        have = await client.invoke(R.Command(code=R.RequestCode.GET_ALL_TOPIC_CONFIG), TIMEOUT_S)
        if have.code != R.ResponseCode.SUCCESS:
            return _failed(have)
        table = R.parse_json_body(have.body).get("topicConfigTable") or {}
        if cmd.required("topic") in table:
            t = table[cmd.required("topic")]
            return {"result": "exists", "readQueueNums": t.get("readQueueNums"),
                    "writeQueueNums": t.get("writeQueueNums"), "perm": t.get("perm")}  # fmt: skip
        answer = await client.invoke(cmd, TIMEOUT_S)
    except (RemotingError, R.FrameError, AttributeError) as e:
        return {"result": "failed", "error": str(e) or type(e).__name__}
    finally:
        await client.close()
    return _failed(answer) if answer.code != R.ResponseCode.SUCCESS else {"result": "created"}


def _failed(answer: R.Command) -> dict:
    return {"result": "failed",
            "error": f"{R.code_name(answer.code, response=True)}: {answer.remark}"}  # fmt: skip


async def _create(args: argparse.Namespace) -> list[dict]:
    async with cluster_of(args, TIMEOUT_S) as (_namesrvs, cluster, info):
        brokers = masters(info, cluster)
    if not brokers:
        raise CliError(f"cluster {cluster!r} has no broker with a master registered", UNAVAILABLE)
    names = sorted(brokers)
    cmd, keys = _request(args), client.signing_keys(args)
    results = await asyncio.gather(*(_create_on(brokers[n], cmd, keys) for n in names))
    return [{"cluster": cluster, "brokerName": n, "brokerAddr": brokers[n], **r}
            for n, r in zip(names, results, strict=True)]  # fmt: skip


def run_create_in_cluster(args: argparse.Namespace) -> int:
    rows = asyncio.run(_create(args))
    for r in rows:
        if args.json:
            print(json.dumps({"topicName": args.name, **r}))
        elif r["result"] == "exists":
            print(f"exists, unchanged: {args.name} on {r['brokerName']} ({r['brokerAddr']})  "
                  f"queues r{r['readQueueNums']}/w{r['writeQueueNums']}  perm {r['perm']}")
        elif r["result"] == "created":
            print(f"created: {args.name} on {r['brokerName']} ({r['brokerAddr']})")
        else:
            print(f"failed: {args.name} on {r['brokerName']} ({r['brokerAddr']}): {r['error']}")
    bad = [r["brokerName"] for r in rows if r["result"] == "failed"]
    if bad:
        raise CliError(f"topic {args.name} not created on {', '.join(bad)} (tried every broker)",
                       UNAVAILABLE)  # fmt: skip
    return 0
