"""A service started by ``rmqstore serve`` knows when serve is gone (and then stops promptly)."""

import os
import subprocess
import sys

from rmqstore.startup import PARENT_PID_ENV, orphaned

CHECK = "from rmqstore.startup import orphaned; print(orphaned())"


def test_not_orphaned_without_serve_or_with_serve_alive(monkeypatch):
    monkeypatch.delenv(PARENT_PID_ENV, raising=False)
    assert not orphaned()
    monkeypatch.setenv(PARENT_PID_ENV, str(os.getppid()))
    assert not orphaned()


def test_orphaned_when_the_parent_named_by_serve_is_not_ours():
    env = {**os.environ, PARENT_PID_ENV: str(os.getpid() + 999_999)}
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True,
                         text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "True"
