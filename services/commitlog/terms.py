"""Master terms: where each master's history began in a replicated commit log.

A store that was never promoted has no terms (term 0, from offset 0). ``rmqstore admin
promote`` starts term ``last + 1`` at the promoted slave's end: bytes before it are the old
master's (as far as this slave had them), bytes after it are the new master's own. A slave
adopts its master's terms when it starts following it, so a former master that rejoins as
a slave can tell where its log parts from its new master's: at the start of the first term
of the master's that is later than its own last term. Anything it holds past that offset
was never acknowledged by the new master (no producer was told it was replicated) and is
moved into the quarantine before the slave follows.

Unlike writer epochs (``epochs.py``: a store's own unclean restarts, for its builders),
terms are shared by the nodes of one replica set. The history is a small JSON file.

Beside it, each store keeps the last term it was a **master** in (``mastered``: written when
it opens as a master or is promoted; none while it was only ever a slave). A slave shares
its master's terms, so only this tells a former master that followed the newer master
(and so holds its term) from that newer master itself (``peers.py``).
"""

import json
from pathlib import Path

from rmqstore.durable import replace_file

Term = tuple[int, int]  # (term, start offset)


class Terms:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.history: list[Term] = []
        try:
            self.history = [(int(t), int(o)) for t, o in json.loads(path.read_text())]
        except FileNotFoundError:
            self.history = []
        self.mastered_path = path.with_name(path.name + ".mastered")
        try:
            self.mastered: int | None = int(self.mastered_path.read_text())
        except FileNotFoundError:
            self.mastered = None

    @property
    def current(self) -> int:
        return self.history[-1][0] if self.history else 0

    def begin(self, start_offset: int) -> int:
        """A promotion: start term ``current + 1`` at ``start_offset`` (durably)."""
        self.history.append((self.current + 1, start_offset))
        self._save()
        self.master_now()
        return self.current

    def master_now(self) -> None:
        """This store takes puts in its current term (durably)."""
        if self.mastered != self.current:
            self.mastered = self.current
            replace_file(self.mastered_path, str(self.current).encode())

    def adopt(self, history: list[Term]) -> None:
        """Take a master's history as this slave's own (its log is a prefix of the master's)."""
        if history != self.history:
            self.history = list(history)
            self._save()

    def _save(self) -> None:
        replace_file(self.path, json.dumps(self.history).encode())


class NewerThanMaster(Exception):
    """This store's last term is later than every term its master knows."""


def diverges_at(mine: list[Term], theirs: list[Term], end: int) -> int | None:
    """Where a slave whose log ends at ``end`` (terms ``mine``) must cut its log to follow a
    master with terms ``theirs``; None when its log is a prefix of the master's history.

    The slave's last term ends, on the master, where the master's first later term begins;
    a term both know but that began at different offsets parts at the lower one.
    """
    my_term = mine[-1][0] if mine else 0
    their_term = theirs[-1][0] if theirs else 0
    if my_term > their_term:
        raise NewerThanMaster(
            f"this store is in master term {my_term}, later than its master's last term "
            f"{their_term}: it was promoted after that master; make the master a slave of this "
            "store instead (or move this store aside)")
    cut = min((s for t, s in theirs if t > my_term), default=None)
    mine_d, theirs_d = dict(mine), dict(theirs)
    for t in mine_d.keys() & theirs_d.keys():
        if mine_d[t] != theirs_d[t]:
            low = min(mine_d[t], theirs_d[t])
            cut = low if cut is None else min(cut, low)
    return cut if cut is not None and cut < end else None
