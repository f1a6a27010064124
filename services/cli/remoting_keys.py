"""The access key ``rmqstore`` commands sign their requests to remoting brokers with: a broker
under ``--acl`` (``rmqstore serve --access-key``, the chart with ``proxy.accessKey``) takes
only requests carrying RocketMQ's ACL signature (``rmqstore.formats.remoting_acl``)."""

import argparse

from rmqstore import access_keys
from services.cli.errors import USAGE, CliError


def add_broker_key_flags(p: argparse.ArgumentParser) -> None:
    access_keys.add_secret_flags(p, "to sign the requests to the brokers with (brokers that "
                                 "require signed requests: serve --access-key)")  # fmt: skip


def broker_keys(args: argparse.Namespace) -> tuple[str, str]:
    """(access key, secret key) from the flags or the environment; ("", "") for none."""
    try:
        return access_keys.client_keys(args)
    except ValueError as e:
        raise CliError(str(e), USAGE) from None
