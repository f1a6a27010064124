"""Stored: the columns of a put read as PutResults."""

from rmqstore.formats.hosts import parse_host
from rmqstore.formats.msgid import offset_msg_id
from services.commitlog.stored import PutResult, Stored


def test_columns_read_as_results():
    host = parse_host("127.0.0.1:10911")
    s = Stored(host, [0, 300], [4, 0], [300, 200], 17, ["A", "B"], [1, 2], ["u1", "u2"])
    assert len(s) == 2 and s.msg_ids() == [
        "7F00000100002A9F" + "0" * 16,
        "7F00000100002A9F" + "0" * 13 + "12C",
    ]
    assert s.msg_ids() == [offset_msg_id(host.ip, host.port, phy) for phy in (0, 300)]
    assert s[1] == PutResult(s.msg_ids()[1], "u2", 300, 0, 200, 17, "B", 2)
    assert s[-1] == s[1] and s[0:1] == [s[0]] and list(s) == [s[0], s[1]]
