"""``rmqstore group describe G --namesrv ADDR [--cluster C]``: a consumer group's progress on
every broker of a cluster (what ``mqadmin consumerProgress`` shows across brokers): each
broker's RocketMQ 5 protocol service as it announced itself in the name servers
(``rmqstore.proxy.<cluster>``, see ``rmqstore.cluster_members``) asked ``DescribeGroup``, the
queues shown per broker and the lag summed over all.

A broker that cannot be asked is named with why, and the answer says it is partial (exit 3
after showing the others); a broker where the group does not exist shows no queues.
"""

import argparse
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rmqstore.cluster_members import Peer, announced
from rmqstore.group_json import queue_json
from rmqstore.v1 import groups_pb2
from services.cli.cluster_of import cluster_of
from services.cli.errors import NOT_FOUND, UNAVAILABLE, CliError


async def _brokers(args: argparse.Namespace) -> tuple[str, list[Peer]]:
    async with cluster_of(args) as (namesrvs, cluster, _info):
        return cluster, await announced(namesrvs.clients, "proxy", cluster)


def _ask(args: argparse.Namespace, call: Any, peer: Peer) -> dict[str, Any]:
    """One broker's part: its queues, or why there are none."""
    one = argparse.Namespace(**{**vars(args), "proxy": peer.address})
    row: dict[str, Any] = {"broker": peer.name, "proxy": peer.address}
    try:
        r = call(one, "DescribeGroup", groups_pb2.DescribeGroupRequest(group=args.group))
    except CliError as e:
        if e.code == NOT_FOUND:
            return {**row, "answer": "no such group", "queues": []}
        return {**row, "answer": "failed", "error": str(e), "queues": []}
    return {**row, "answer": "ok", "queues": [queue_json(q) for q in r.queues]}


def run_describe_in_cluster(args: argparse.Namespace, call: Any) -> int:
    """``call(args, method, request)``: the group command's call to one proxy."""
    cluster, peers = asyncio.run(_brokers(args))
    if not peers:
        raise CliError(f"no broker of cluster {cluster!r} announced its proxy", UNAVAILABLE)
    with ThreadPoolExecutor(len(peers)) as pool:
        rows = list(pool.map(lambda p: _ask(args, call, p), peers))
    failed = [r["broker"] for r in rows if r["answer"] == "failed"]
    total = sum(q["lag"] for r in rows for q in r["queues"])
    if args.json:
        print(json.dumps({"group": args.group, "cluster": cluster, "brokers": rows,
                          "totalLag": total, "partial": bool(failed)}))  # fmt: skip
    else:
        w = max([24, *(len(q["topic"]) for r in rows for q in r["queues"])])
        print(f"{'broker':<12} {'topic':<{w}} {'queue':>5} {'committed':>12} {'max':>12} "
              f"{'lag':>10} {'in flight':>9}")  # fmt: skip
        for r in rows:
            if r["answer"] == "failed":
                print(f"{r['broker']:<12} (not answered: {r['error']})")
            elif r["answer"] != "ok":
                print(f"{r['broker']:<12} ({r['answer']})")
            for q in r["queues"]:
                print(f"{r['broker']:<12} {q['topic']:<{w}} {q['queueId']:>5} "
                      f"{q['committedOffset']:>12} {q['maxOffset']:>12} {q['lag']:>10} "
                      f"{q['inFlight']:>9}")  # fmt: skip
        print(f"total lag {total} over {len(rows)} brokers"
              + (f"; partial: {', '.join(failed)} not answered" if failed else ""))
    if failed:
        raise CliError(f"group {args.group}: {', '.join(failed)} did not answer "
                       "(the others are shown)", UNAVAILABLE)  # fmt: skip
    return 0
