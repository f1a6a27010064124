"""A task's failure reaches the driver as one line: what it was doing, on which file and
position, and the Python exception."""

from pathlib import Path

import pytest

from pipelines.export import _write
from pipelines.scan import ScanPlan
from pipelines.source import ByteRange, Segment
from pipelines.task_errors import TaskFailed, about, task_error_message

pytestmark = pytest.mark.spark


def test_a_task_that_cannot_open_its_segment_names_it_and_the_offset(spark, tmp_path: Path):
    missing = tmp_path / "commitlog" / f"{4096:020d}"
    plan = ScanPlan([ByteRange(0, Segment(str(missing), 4096, 1000), 0, None)], 1000)
    with pytest.raises(Exception) as caught:
        _write(spark, plan, tmp_path / "target", True, None)
    assert task_error_message(caught.value) == (
        f"exporting {missing} (commitlog offset 4096, positions 0 to its data end) to "
        f"{tmp_path / 'target'}: FileNotFoundError: [Errno 2] No such file or directory: "
        f"'{missing}'")


def test_about_keeps_the_innermost_context_on_one_line():
    with pytest.raises(TaskFailed) as caught, about("outer"), about("reading f at 7"):
        raise ValueError("two\nlines")
    assert str(caught.value) == "reading f at 7: ValueError: two lines"


def test_a_plain_traceback_gives_its_last_line():
    text = ("An exception was thrown from the Python worker:\nTraceback (most recent call "
            "last):\n  File \"x.py\", line 1, in f\n    g()\nKeyError: 'k'\n")
    assert task_error_message(RuntimeError(text)) == "KeyError: 'k'"
    assert task_error_message(RuntimeError("just this\nand that")) == "just this and that"
