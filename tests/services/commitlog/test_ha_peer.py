"""The spec-written HA peer's master role (``tests/ha_peer.py``), serving a store the writer
made: its slave role receives the files' bytes, cut as the spec says. (The slave role is
checked against the writer in ``test_ha_master``.)"""

import pytest

from tests.ha_peer import PeerMaster, PeerSlave
from tests.services.commitlog.test_ha_master import (
    SEGMENT,
    _check_frames,
    _log_bytes,
    _max,
    _put,
    _start,
    _stub,
)

pytestmark = pytest.mark.integration


def test_peer_master_serves_a_stores_files(tmp_path):
    p, _port = _start(tmp_path / "store")
    try:
        stub = _stub(p)
        _put(stub, 150)
        end = _max(stub)
    finally:
        p.stop()
    master = PeerMaster(str(tmp_path / "store" / "commitlog"), SEGMENT)
    try:
        assert master.end == end  # found by walking the records
        for first in (0, SEGMENT):
            slave = PeerSlave("127.0.0.1", master.port, first_report=first)
            try:
                slave.run_until(end, timeout=30)
                start = end - end % SEGMENT if first == 0 else first
                assert slave.start == start
                assert bytes(slave.bytes) == _log_bytes(tmp_path / "store", start, end)
                _check_frames(slave)
                assert master.wait_acked(end, timeout=30)
            finally:
                slave.close()
        assert master.first_reports == [0, SEGMENT]
    finally:
        master.close()
