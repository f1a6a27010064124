"""``rmqstore admin set-perm --broker NAME --read-only|--read-write --namesrv ADDR``: drain a
broker, or undo it (``docs/cluster.md``, "Draining a broker").

The broker's master (its address from the name servers, ``GET_BROKER_CLUSTER_INFO``) is sent
``UPDATE_BROKER_CONFIG brokerPermission=4|6`` (as ``mqadmin updateBrokerConfig``): its writer
keeps the value across registrations and restarts, and it registers at once with the write
bit of its topics cleared (or back). Every name server is sent ``WIPE_WRITE_PERM_OF_BROKER``
(``--read-only``) or ``ADD_WRITE_PERM_OF_BROKER`` (``--read-write``), as ``mqadmin
wipeWritePerm``/``addWritePerm``. ``--read-only`` tells the broker first (a broker that
cannot be told leaves everything as it was); ``--read-write`` tells the name servers first,
so the broker's own registration, last, puts back the perm of topics that are read-only of
their own.

One line per name server and one for the broker (``--json``: one object each). Exit 0 when
all were told, ``NOT_FOUND`` (1) for a broker no name server knows, ``UNAVAILABLE`` (3) when
one could not be told (after trying the others).
"""

import argparse
import asyncio
import json
from typing import Any

from rmqstore import access_keys, broker_perm
from rmqstore.formats import remoting as R
from rmqstore.name_servers import master_of
from rmqstore.remoting_net import RemotingClient, RemotingError, parse_namesrv
from services.cli import client
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError

TIMEOUT_S = 10.0
C = R.RequestCode
Row = dict[str, Any]


async def _ask(address: str, cmd: R.Command, keys: tuple[str, str] = ("", "")
               ) -> R.Command | str:  # fmt: skip
    """The answer, or why there is none (``keys``: the request signed with them)."""
    client = RemotingClient(address, keys=keys)
    try:
        return await client.invoke(cmd, TIMEOUT_S)
    except RemotingError as e:
        return str(e) or type(e).__name__
    finally:
        await client.close()


def _failure(answer: R.Command | str) -> str | None:
    if isinstance(answer, str):
        return answer
    if answer.code != R.ResponseCode.SUCCESS:
        return f"{R.code_name(answer.code, response=True)}: {answer.remark}"
    return None


async def _master(namesrvs: list[str], broker: str) -> str:
    """The broker's master address, from the first name server that lists one."""
    answers = await asyncio.gather(
        *(_ask(a, R.Command(code=C.GET_BROKER_CLUSTER_INFO)) for a in namesrvs))
    known: set[str] = set()
    errors = []
    for address, answer in zip(namesrvs, answers, strict=True):
        why = _failure(answer)
        if why is not None or isinstance(answer, str):
            errors.append(f"{address}: {why}")
            continue
        try:
            info = R.parse_json_body(answer.body)
            known |= set(info.get("brokerAddrTable") or {})
        except (R.FrameError, AttributeError):
            errors.append(f"{address}: cluster info unreadable")
            continue
        if (master := master_of(info, broker)) is not None:
            return master
    if len(errors) == len(namesrvs):
        raise CliError("no name server answered (" + "; ".join(errors) + ")", UNAVAILABLE)
    if broker in known:
        raise CliError(f"broker {broker!r} has no master registered (only slaves): its "
                       "permission is the master's", UNAVAILABLE)  # fmt: skip
    raise CliError(f"broker {broker!r} is not registered with any name server (brokers: "
                   f"{', '.join(sorted(known)) or 'none'})", NOT_FOUND)  # fmt: skip


async def _tell_broker(address: str, name: str, perm: int, keys: tuple[str, str]) -> Row:
    body = f"brokerPermission={perm}\n".encode()
    answer = await _ask(address, R.Command(code=C.UPDATE_BROKER_CONFIG, body=body), keys)
    row: Row = {"target": "broker", "brokerName": name, "address": address,
                "perm": perm}  # fmt: skip
    why = _failure(answer)
    return {**row, "result": "failed", "error": why} if why else {**row, "result": "ok"}


async def _tell_namesrvs(namesrvs: list[str], name: str, perm: int) -> list[Row]:
    wipe = perm == broker_perm.READ_ONLY
    code = C.WIPE_WRITE_PERM_OF_BROKER if wipe else C.ADD_WRITE_PERM_OF_BROKER
    count = "wipeTopicCount" if wipe else "addTopicCount"
    cmd = R.Command(code=code, ext={"brokerName": name})
    answers = await asyncio.gather(*(_ask(a, cmd) for a in namesrvs))
    rows = []
    for address, answer in zip(namesrvs, answers, strict=True):
        row: Row = {"target": "namesrv", "brokerName": name, "address": address, "perm": perm}
        why = _failure(answer)
        if why is not None or isinstance(answer, str):
            rows.append({**row, "result": "failed", "error": why})
        else:
            rows.append({**row, "result": "ok", "topics": int(answer.field(count, "0") or 0)})
    return rows


def _not_asked(namesrvs: list[str], name: str, perm: int) -> list[Row]:
    return [{"target": "namesrv", "brokerName": name, "address": a, "perm": perm,
             "result": "not asked"} for a in namesrvs]  # fmt: skip


async def set_perm(namesrvs: list[str], name: str, perm: int,
                   keys: tuple[str, str] = ("", "")) -> list[Row]:  # fmt: skip
    """The broker's row and every name server's, in the order they were told; ``keys``: the
    broker's request signed with them (a broker under ``--acl``)."""
    master = await _master(namesrvs, name)
    if perm == broker_perm.READ_ONLY:
        broker = await _tell_broker(master, name, perm, keys)
        if broker["result"] != "ok":
            return [broker, *_not_asked(namesrvs, name, perm)]
        return [broker, *await _tell_namesrvs(namesrvs, name, perm)]
    rows = await _tell_namesrvs(namesrvs, name, perm)
    return [*rows, await _tell_broker(master, name, perm, keys)]


def _line(r: Row) -> str:
    state = broker_perm.NAMES[r["perm"]]
    where = f"{r['target']} {r['address']}"
    if r["result"] == "failed":
        return f"{where}: failed: {r['error']}"
    if r["result"] == "not asked":
        return f"{where}: not asked (the broker was not changed)"
    if r["target"] == "broker":
        return f"{where}: {r['brokerName']} is {state}, registered again with its name servers"
    verb = "wiped from" if r["perm"] == broker_perm.READ_ONLY else "added to"
    return f"{where}: write permission {verb} {r['topics']} topics of {r['brokerName']}"


def run_set_perm(args: argparse.Namespace) -> int:
    try:
        namesrvs = parse_namesrv(args.namesrv)
    except ValueError as e:
        raise CliError(str(e), USAGE) from None
    if not namesrvs:
        raise CliError("--namesrv: no name server given", USAGE)
    perm = broker_perm.READ_ONLY if args.read_only else broker_perm.READ_WRITE
    rows = asyncio.run(set_perm(namesrvs, args.broker, perm, client.signing_keys(args)))
    for r in rows:
        print(json.dumps(r) if args.json else _line(r), flush=True)
    bad = [f"{r['target']} {r['address']}" for r in rows if r["result"] != "ok"]
    if bad:
        raise CliError(f"broker {args.broker} not made {broker_perm.NAMES[perm]} everywhere: "
                       f"{', '.join(bad)} not told (tried every one)", UNAVAILABLE)  # fmt: skip
    return 0


def register(verbs: argparse._SubParsersAction) -> None:
    v = verbs.add_parser("set-perm", help="drain a broker (--read-only) or undo it (--read-write)")
    v.add_argument("--broker", required=True, help="the broker name (its --broker-name)")
    which = v.add_mutually_exclusive_group(required=True)
    which.add_argument("--read-only", action="store_true",
                       help="producers leave the broker, consumers go on reading it")
    which.add_argument("--read-write", action="store_true", help="take sends again")
    v.add_argument("--namesrv", required=True, metavar="HOST:PORT;...",
                   help="the cluster's name servers (every one is told)")
    v.add_argument("--json", action="store_true", help="print one JSON object per line")
    access_keys.add_secret_flags(v, "to sign the request to the broker with (one that takes "
                                 "only signed requests: serve --access-key)")  # fmt: skip
    v.set_defaults(run=run_set_perm)
