import pytest

from tests import procs


@pytest.fixture
def writer(tmp_path):
    """A writer process on loopback with a fresh store."""
    p = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                    "127.0.0.1:0")  # fmt: skip
    yield p
    p.stop()
