"""The cluster a ``--namesrv`` command works on: its name servers asked for the brokers
(``GET_BROKER_CLUSTER_INFO``) and the cluster picked (``--cluster``, or the only one), each
failure one line with its exit code."""

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from rmqstore.name_servers import TIMEOUT_S, NameServerError, NameServers, pick_cluster
from rmqstore.remoting_net import parse_namesrv
from services.cli.errors import NOT_FOUND, UNAVAILABLE, USAGE, CliError


@contextlib.asynccontextmanager
async def cluster_of(
    args: argparse.Namespace, timeout_s: float = TIMEOUT_S
) -> AsyncIterator[tuple[NameServers, str, dict[str, Any]]]:
    """(the name servers, open until the block ends; the cluster; its ClusterInfo)."""
    try:
        addresses = parse_namesrv(args.namesrv)
    except ValueError as e:
        raise CliError(str(e), USAGE) from None
    namesrvs = NameServers(addresses, timeout_s)
    try:
        try:
            info = await namesrvs.cluster_info()
            cluster = pick_cluster(info, args.cluster)
        except LookupError as e:
            raise CliError(str(e), NOT_FOUND) from None
        except ValueError as e:
            raise CliError(str(e), USAGE) from None
        except NameServerError as e:
            raise CliError(f"--namesrv {args.namesrv}: {e}", UNAVAILABLE) from None
        yield namesrvs, cluster, info
    finally:
        await namesrvs.close()
