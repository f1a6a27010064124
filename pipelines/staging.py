"""A fresh output root, written aside and swapped into place only when complete.

* ``out`` does not exist: everything is written to a hidden sibling, renamed to ``out`` at the
  end.
* ``out`` exists (a store root, say): the named subdirectories are written to a hidden
  directory inside it and renamed into place at the end; existing ones are refused unless
  ``replace`` is set, and then moved aside and removed only after the new ones are in.

A failed or interrupted run leaves ``out`` as it was (plus, at worst, its hidden work dir).
"""

import os
import shutil
import uuid
from pathlib import Path

from rmqstore.durable import fsync_dir
from rmqstore.errors import InvalidArgumentError


def _nonempty_dir(p: Path) -> bool:
    return p.is_dir() and any(p.iterdir())


def fresh_output(out: str | Path, job: str) -> tuple[Path, Path]:
    """``out`` (absolute) for a job that writes a new dataset, and the hidden sibling to
    write it in first (rename it to ``out`` once complete). ``out`` must not exist, or be an
    empty directory (removed here)."""
    out = Path(out).absolute()
    if out.exists():
        if not out.is_dir() or any(out.iterdir()):
            raise InvalidArgumentError(f"{job} output {out} exists and is not empty")
        out.rmdir()
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"{job} output parent {out.parent} is not a directory")
    return out, out.parent / f".{out.name}.{job}-{uuid.uuid4().hex[:12]}"


class Staging:
    def __init__(self, out: str | Path, names: tuple[str, ...], replace: bool = False) -> None:
        self.out = Path(out).absolute()
        self.names = names
        self.replace = replace
        tag = uuid.uuid4().hex[:12]
        if self.out.exists() and not self.out.is_dir():
            raise InvalidArgumentError(f"output {self.out} exists and is not a directory")
        self.in_place = self.out.is_dir()
        self._check_free()
        if self.in_place:
            self.dir = self.out / f".rebuild-{tag}"
        else:
            if not self.out.parent.is_dir():
                raise InvalidArgumentError(f"output parent {self.out.parent} is not a directory")
            self.dir = self.out.parent / f".{self.out.name}.rebuild-{tag}"
        self.dir.mkdir()
        for name in names:
            (self.dir / name).mkdir()

    def _check_free(self) -> None:
        if not self.in_place or self.replace:
            return
        taken = [n for n in self.names if _nonempty_dir(self.out / n)]
        if taken:
            raise InvalidArgumentError(
                f"output {self.out} already has {', '.join(taken)}; choose a fresh output "
                "root or replace them explicitly"
            )

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)

    def commit(self) -> None:
        """Swap the finished output into place."""
        for name in self.names:
            for dirpath, _, _ in os.walk(self.dir / name):
                fsync_dir(Path(dirpath))
        if not self.in_place:
            fsync_dir(self.dir)
            os.rename(self.dir, self.out)
            fsync_dir(self.out.parent)
            return
        self._check_free()
        old = self.dir / ".old"
        old.mkdir()
        for name in self.names:
            if (self.out / name).exists():
                os.rename(self.out / name, old / name)
            os.rename(self.dir / name, self.out / name)
        fsync_dir(self.out)
        shutil.rmtree(self.dir)

    def abort(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
