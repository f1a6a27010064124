"""Errors of Spark tasks, told whole: what failed, on which file and position, and why.

A task wraps its work in ``about(what)``: any exception becomes a ``TaskFailed`` whose one-line
message names the file and position the task was working on and the Python exception's type
and message. Spark hands the driver the task's traceback as text inside its own exception;
``task_error_message`` finds that line again, so the user reads one line instead of the
first line of a JVM report ("An exception was thrown from the Python worker:").
"""

import re
from collections.abc import Iterator
from contextlib import contextmanager

_MARK = "TaskFailed: "
# the line that ends a Python traceback: "ValueError: ..." or "pkg.mod.SomeError: ..."
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Exit|Interrupt)\b:? ?")


class TaskFailed(Exception):
    """A task's failure, with the file and position it concerns, on one line."""


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


@contextmanager
def about(what: str) -> Iterator[None]:
    """Re-raise any exception of the block as ``TaskFailed("<what>: <Type>: <message>")``."""
    try:
        yield
    except TaskFailed:
        raise
    except Exception as e:
        raise TaskFailed(f"{what}: {type(e).__name__}: {one_line(str(e))}") from None


def task_error_message(error: BaseException) -> str:
    """The failed task's own error as one line, from the exception Spark raised on the
    driver (its text holds the task's traceback); else the exception's own text."""
    text = str(error)
    lines = text.splitlines()
    for line in reversed(lines):  # the last traceback's end is the task's final error
        at = line.find(_MARK)
        if at >= 0:
            return line[at + len(_MARK):].strip()
    tail = text.rsplit("Traceback (most recent call last):", 1)
    if len(tail) == 2:
        for line in tail[1].splitlines():
            if line and not line[0].isspace() and _EXCEPTION_LINE.match(line):
                return line.strip()
    return one_line(text) or type(error).__name__
