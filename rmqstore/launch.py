"""``python -m rmqstore.launch MODULE ARGS...``: run ``python -m MODULE ARGS...`` as a child of
``rmqstore serve``, asking the kernel first to stop it (SIGTERM) when its parent dies, even
by SIGKILL (see ``rmqstore.startup.die_with_parent``). Any service module runs this way,
whether or not it knows of it."""

import runpy
import sys

from rmqstore.startup import StartupError, die_with_parent, fail


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(fail("launch", "usage: python -m rmqstore.launch MODULE [ARGS...]"))
    module = sys.argv[1]
    try:
        die_with_parent()
    except StartupError as e:
        sys.exit(fail(module, str(e)))
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
