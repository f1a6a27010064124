"""Writer epochs: which commitlog bytes a builder may keep after the writer restarts.

A new epoch begins whenever the writer starts after an unclean stop (the ``abort`` file was
there) or recovery cut damaged data: bytes past that epoch's start offset may differ from
what an earlier epoch served (an unflushed tail lost to a power cut, then new records written
over the same offsets). A builder remembers the epoch it last saw; on reconnecting it cuts
its output at the lowest start of the epochs it missed. The history is a small JSON file.
"""

import json
from pathlib import Path

from rmqstore.durable import replace_file

MAX_HISTORY = 1000


class Epochs:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.history: list[tuple[int, int]] = []  # (epoch, start offset), ascending
        try:
            self.history = [(int(e), int(o)) for e, o in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):
            self.history = []

    @property
    def current(self) -> int:
        return self.history[-1][0] if self.history else 0

    def begin(self, start_offset: int) -> int:
        """Start a new epoch at ``start_offset`` (durably) and return its number."""
        self.history.append((self.current + 1, start_offset))
        self.history = self.history[-MAX_HISTORY:]
        replace_file(self.path, json.dumps(self.history).encode())
        return self.current

    def cut_offset_since(self, epoch: int) -> int:
        """Lowest start of the epochs after ``epoch`` (-1 if there are none).

        An epoch older than the kept history is answered with 0: cut everything.
        """
        later = [o for e, o in self.history if e > epoch]
        if not later:
            return -1
        if self.history and epoch < self.history[0][0] - 1:
            return 0
        return min(later)
