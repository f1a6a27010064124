"""``rmqstore`` command line: each subcommand lives in its own module and registers itself.

Every failure a user can cause ends here as one line ``error: ...`` on stderr and an exit
code of ``services.cli.errors``: usage errors from argparse too (exit 2), and a gRPC
failure a command did not translate itself.
"""

import argparse
import importlib
import os
import re
import sys
from typing import NoReturn

import grpc

from services.cli.errors import USAGE, CliError

# module name -> it defines register(subparsers) adding one or more subcommands
COMMAND_MODULES = ("serve", "put", "inspect", "query", "pipeline", "topic", "group", "consume",
                   "admin")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``rmqstore put -h`` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)", USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rmqstore", description="RocketMQ-compatible message store: services and tools"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"services.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"services.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


_RELATIVE_TIME = re.compile(r"^-\d+(ms|s|m|h|d|w)$")


def _relative_times(argv: list[str]) -> list[str]:
    """``--begin -15m`` as ``--begin=-15m``: argparse would take ``-15m`` for an option."""
    out: list[str] = []
    for word in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _RELATIVE_TIME.match(word):
            out[-1] += "=" + word
        else:
            out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(_relative_times(sys.argv[1:] if argv is None else argv))
        args.argv = list(sys.argv[1:] if argv is None else argv)  # to print a resume command
        return int(args.run(args) or 0)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.code
    except grpc.RpcError as e:  # a command that did not name the call itself
        from services.cli.client import rpc_error

        err = rpc_error(e, "CommitLog" if args.command == "put" else "Query", "the server")
        print(f"error: {err}", file=sys.stderr, flush=True)
        return err.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
