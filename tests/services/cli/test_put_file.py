"""``put --file`` and the load generator when the writer is killed (-9) mid-way under sync
flush: every acknowledgement was printed before the failure, the error says how far it got,
and the resume command it prints stores the rest, each line exactly once."""

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rmqstore.formats import commitlog_segment
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs

pytestmark = pytest.mark.integration

LINES = 60_000
SEGMENT = 256 * 1024  # several segments: the resume walks across their ends


def _writer(store: Path, port: int) -> procs.ServiceProcess:
    return procs.start("services.commitlog", "--store", str(store), "--listen",
                       f"127.0.0.1:{port}", "--flush", "sync", "--commitlog-segment-size",
                       str(SEGMENT))  # fmt: skip


def _stored(store: Path) -> list[tuple[int, bytes]]:
    """(commitlog offset, body) of every record in the store's segments, read from the files."""
    out = []
    for seg in sorted((store / "commitlog").iterdir()):
        if not seg.name.isdigit():  # a segment the writer is still creating
            continue
        base = int(seg.name)
        for pos, rec in commitlog_segment.iter_segment(seg.read_bytes(), base_offset=base):
            out.append((base + pos, bytes(rec.body)))
    return out


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli.main", *args]


def test_put_file_killed_writer_then_resume_stores_each_line_once(tmp_path):
    store, port = tmp_path / "store", procs.free_port()
    path = tmp_path / "big.jsonl"
    with path.open("w") as f:
        for i in range(1, LINES + 1):
            f.write(json.dumps({"topic": "Big", "queueId": i % 4, "body": f"m{i}"}) + "\n")
    writer = _writer(store, port)
    put = subprocess.Popen(_cli("put", "--commitlog", f"127.0.0.1:{port}", "--file", str(path),
                                "--json", "--batch", "50"), cwd=procs.ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert put.stdout is not None and put.stderr is not None
    # killed once 5,000 records are written, wherever the put is in its batch's round trip
    stub = commitlog_pb2_grpc.CommitLogStub(channel(f"127.0.0.1:{port}"))
    texts: list[str] = []
    reader = threading.Thread(target=lambda: texts.extend(put.stdout or ()))
    reader.start()  # acknowledgements are read as they come, so the put never waits on us
    _poll(lambda: stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset > 5_000 * 130)
    writer.kill()
    err = put.stderr.read()
    reader.join(60)
    printed = [json.loads(text) for text in texts]
    assert put.wait(60) == 1, err  # partial
    assert len(printed) < LINES, "the put finished before the kill: make the file bigger"
    (line,) = err.splitlines()
    n = len(printed)
    assert [p["line"] for p in printed] == list(range(1, n + 1))
    assert line.startswith(f"error: lines {n + 1}..{n + 50} of {path} got no answer: ")
    assert f"{n:,} messages before it are stored (through line {n}, printed above)" in line

    writer = _writer(store, port)  # recovery after the kill
    try:
        stored = _stored(store)
        bodies = [b for _, b in stored]
        # every acknowledgement printed is stored where it said; what is stored past it is a
        # prefix of the batch that got no answer
        assert dict(stored).items() >= {(p["phyOffset"], f"m{p['line']}".encode())
                                        for p in printed}  # fmt: skip
        assert bodies[:n] == [f"m{i}".encode() for i in range(1, n + 1)]
        assert bodies[n:] == [f"m{i}".encode() for i in range(n + 1, len(bodies) + 1)]
        assert len(bodies) - n <= 50
        print(f"stored without an answer: {len(bodies) - n}")

        resume = shlex.split(line.split("without storing any line twice: ")[1])
        assert resume[0] == "rmqstore" and resume[-4:-2] == ["--skip", str(n)]
        assert resume[-2] == "--resume-offset"
        out = subprocess.run(_cli(*resume[1:]), cwd=procs.ROOT, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
        assert out.returncode == 0, out.stderr
        again = [json.loads(t) for t in out.stdout.splitlines()]
        assert [p["line"] for p in printed + again] == list(range(1, LINES + 1))
        stored = _stored(store)
        assert [b for _, b in stored] == [f"m{i}".encode() for i in range(1, LINES + 1)]
        assert [(p["phyOffset"]) for p in printed + again] == [o for o, _ in stored]
    finally:
        writer.stop()


def test_resume_offset_skips_lines_stored_without_an_answer(tmp_path):
    """Lines 4..6 stored by a run that got no answer (put here directly, as the writer would
    have stored them): the resumed run prints them as stored and sends only lines 7..9."""
    store, port = tmp_path / "store", procs.free_port()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"topic": "R", "body": f"r{i}", "keys": f"k{i}"}) + "\n"
                            for i in range(1, 10)))  # fmt: skip
    writer = _writer(store, port)
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
        stub.Put(commitlog_pb2.PutRequest(message=common_pb2.Message(topic="Other", body=b"o")))
        offset = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
        for i in (4, 5, 6):  # another producer's record in between is passed over
            stub.Put(commitlog_pb2.PutRequest(message=common_pb2.Message(
                topic="R", body=f"r{i}".encode(), keys=f"k{i}", without_unique_key=True)))
            stub.Put(commitlog_pb2.PutRequest(message=common_pb2.Message(topic="Other",
                                                                         body=b"o")))
        out = subprocess.run(_cli("put", "--commitlog", writer.address, "--file", str(path),
                                  "--skip", "3", "--resume-offset", str(offset), "--json"),
                             cwd=procs.ROOT, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        shown = [json.loads(t) for t in out.stdout.splitlines()]
        assert [s["line"] for s in shown] == [4, 5, 6, 7, 8, 9]
        bodies = [b for _, b in _stored(store) if b != b"o"]
        assert bodies == [f"r{i}".encode() for i in range(4, 10)]  # 4..6 once, not again
        out = subprocess.run(_cli("put", "--commitlog", writer.address, "--file", str(path),
                                  "--skip", "3", "--resume-offset", str(10**12)),
                             cwd=procs.ROOT, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert out.returncode == 2 and "--resume-offset 1000000000000 is outside" in out.stderr
    finally:
        writer.stop()


def test_load_generator_killed_writer_prints_what_was_stored(tmp_path):
    store, port = tmp_path / "store", procs.free_port()
    writer = _writer(store, port)
    put = subprocess.Popen(_cli("put", "--commitlog", f"127.0.0.1:{port}", "--topic", "Load",
                                "--count", "100000000", "--body-size", "64"), cwd=procs.ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    try:  # some 20,000 records written: more than the 4 batches of 100 in flight
        _poll(lambda: stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset > 3 << 20)
    finally:
        writer.kill()
    _, err = put.communicate(timeout=60)
    assert put.returncode == 1, err
    (line,) = err.splitlines()
    told = int(line.split("; ")[-1].split(" of ")[0])
    assert line.endswith(f"{told} of 100000000 messages were stored before it") and told > 0
    writer = _writer(store, port)
    try:
        assert len(_stored(store)) >= told  # the batches in flight may be stored, unanswered
    finally:
        writer.stop()


def _poll(cond, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)  # polling a condition, not waiting a fixed time


def test_ctrl_c_reports_what_was_stored_and_how_to_resume(tmp_path):
    store, port = tmp_path / "store", procs.free_port()
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps({"topic": "C", "body": f"c{i}"}) + "\n"
                            for i in range(1, LINES + 1)))  # fmt: skip
    writer = _writer(store, port)
    try:
        put = subprocess.Popen(_cli("put", "--commitlog", writer.address, "--file", str(path),
                                    "--batch", "50"), cwd=procs.ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert put.stdout is not None
        printed = 0
        for _ in put.stdout:
            printed += 1
            if printed == 2_000:
                put.send_signal(signal.SIGINT)
                break
        printed += len(put.stdout.read().splitlines())
        _, err = put.communicate(timeout=60)
        assert put.returncode == 1, err
        (line,) = err.splitlines()
        assert "interrupted" in line and f"{printed:,} messages before it are stored" in line
        assert f"--skip {printed}" in line
    finally:
        writer.stop()


def test_an_interrupt_inside_held_comes_after_it_whatever_thread_takes_the_signal():
    """The handler runs in the main thread even when the kernel hands SIGINT to another
    thread (a blocked signal mask in the main thread does not hold it then)."""
    from services.cli.put_file import HeldInterrupts

    held, done, before = HeldInterrupts(), [], signal.getsignal(signal.SIGINT)
    with held.installed():
        with pytest.raises(KeyboardInterrupt), held.held():
            sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
            sender.start()
            sender.join()
            for _ in range(1000):  # handlers run between bytecodes: give it many
                done.append(1)
        assert len(done) == 1000  # the held section ran to its end first
        with pytest.raises(KeyboardInterrupt):  # outside: at once
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
    assert signal.getsignal(signal.SIGINT) is before  # put back as it was
