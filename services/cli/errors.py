"""One error path for every ``rmqstore`` command.

A command raises :class:`CliError` for every failure it can expect; ``main`` prints it as one
line ``error: <message>`` on stderr and exits with its code. A traceback means a bug in
rmqstore, never bad input.

Exit codes (documented for users in ``docs/cli.md``):

==  ==========================================================================================
0   success
1   nothing found, or only part of the work was done (the output says how far it got), or
    ``admin promote`` refused (nothing changed), or ``admin set-perm`` named a broker no
    name server knows
2   usage or input error: a bad flag, value, address or input file; nothing was sent
3   a server could not be reached or failed, or a service of ``serve`` failed or died
==  ==========================================================================================
"""

OK = 0
NOT_FOUND = 1
PARTIAL = 1
USAGE = 2
UNAVAILABLE = 3


class CliError(Exception):
    """An expected failure: one line for the user and the exit code it maps to."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code
