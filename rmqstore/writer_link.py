"""A builder's or the query service's first contact with its writer, at start-up.

``check_writer`` asks the writer for its offsets once: a writer of another store (see
``rmqstore.identity``) is a ``StartupError``; a writer that cannot be reached yet is logged at
WARNING with the reason and the service starts anyway (it keeps trying, and its health or
its builder's progress shows it).
"""

import argparse
import logging

import grpc

from rmqstore import identity, tls
from rmqstore.errors import WrongStoreError
from rmqstore.layout import StoreLayout
from rmqstore.startup import StartupError
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 3.0


def check_identity(layout: StoreLayout, offsets: commitlog_pb2.Offsets, address: str) -> str:
    """The expected store id, or ``WrongStoreError`` when the writer announced another."""
    expected = identity.expected(layout)
    if offsets.store_id != expected:
        raise WrongStoreError(identity.mismatch(expected, offsets.store_id, address,
                                                str(layout.root)))
    return expected


def check_writer(name: str, address: str, layout: StoreLayout, args: argparse.Namespace) -> None:
    with tls.client_channel(address, args) as ch:
        try:
            offsets = commitlog_pb2_grpc.CommitLogStub(ch).GetOffsets(
                commitlog_pb2.GetOffsetsRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as e:
            reason = f"{e.code().name}: {e.details()}" if isinstance(e, grpc.Call) else str(e)
            log.warning("%s: the writer at %s cannot be reached yet (%s); will keep trying",
                        name, address, reason)
            return
    try:
        check_identity(layout, offsets, address)
    except (WrongStoreError, ValueError) as e:
        raise StartupError(str(e)) from None
