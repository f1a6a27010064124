"""``rmqstore`` command line: each subcommand lives in its own module and registers itself."""

import argparse
import importlib
import sys

from services.cli.errors import CliError

# module name -> it defines register(subparsers) adding one or more subcommands
COMMAND_MODULES = ("serve", "put", "inspect", "query", "pipeline", "topic")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
