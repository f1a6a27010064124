"""Atomic, durable replacement of small files."""

import errno
import subprocess
import sys

from rmqstore.durable import fsync_dir, replace_file
from tests import procs


def test_replace_file_creates_and_replaces_without_leftovers(tmp_path):
    target = tmp_path / "state" / "progress"
    replace_file(target, b"first")
    replace_file(target, b"second, longer")
    assert target.read_bytes() == b"second, longer"
    assert sorted(p.name for p in target.parent.iterdir()) == ["progress"]
    fsync_dir(target.parent)  # a directory can be synced on its own too


SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from rmqstore.durable import replace_file

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # a nearly full disk: 1000 bytes fit
try:
    replace_file(Path(sys.argv[1]), b"n" * 5000)
except OSError as e:
    print("refused", e.errno)
"""


def test_a_short_write_keeps_the_old_file_and_raises(tmp_path):
    """``os.write`` writes only what fits and says so: the rest must be written or the
    replacement refused, never a truncated file put in place of a good one."""
    target = tmp_path / "progress"
    replace_file(target, b"good")
    r = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(target)], cwd=procs.ROOT,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["refused", str(errno.EFBIG)]
    assert target.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["progress"]  # no temporary file left
