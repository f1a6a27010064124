"""``--store`` values: one PATH, or NAME=PATH,... for several brokers, checked before any job."""

from pathlib import Path

import pytest

from pipelines.stores import StoreRef, named, parse_stores
from pipelines.synthetic import mixed_messages, write_commitlog
from rmqstore.errors import InvalidArgumentError


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        write_commitlog(root, mixed_messages(3), segment_size=8 * 1024)
    return a, b


def test_one_path_is_one_unnamed_store(stores, tmp_path: Path):
    a, _ = stores
    assert parse_stores(str(a)) == [StoreRef(None, a)]
    assert not named(parse_stores(str(a)))
    odd = tmp_path / "x=y,z"  # an existing directory is a path, whatever it holds
    odd.mkdir()
    assert parse_stores(str(odd)) == [StoreRef(None, odd)]
    empty = tmp_path / "empty"  # as before: any directory, an empty one has no records
    empty.mkdir()
    assert parse_stores(str(empty)) == [StoreRef(None, empty)]
    with pytest.raises(InvalidArgumentError, match="neither a store root nor a commitlog"):
        parse_stores(str(tmp_path / "absent"))


def test_named_stores_in_order(stores):
    a, b = stores
    got = parse_stores(f"broker-b={b},broker.a_1={a / 'commitlog'}")
    assert got == [StoreRef("broker-b", b), StoreRef("broker.a_1", a / "commitlog")]
    assert named(got)
    assert parse_stores(f"only={a}") == [StoreRef("only", a)]  # one name: still a broker column


@pytest.mark.parametrize("value, words", [
    ("a={a},a={b}", "broker name 'a' is given twice"),
    ("a={a},b={a}", "stores of a and b are the same commitlog"),
    ("a={a},b={a}/commitlog", "stores of a and b are the same commitlog"),
    ("a={a},{b}", "expected NAME=PATH"),
    ("a={a},", "expected NAME=PATH"),
    ("a=", "expected NAME=PATH"),
    ("={a}", "broker name '' must be 1-127 characters"),
    ("a b={a}", "broker name 'a b' must be"),
    ("a/b={a}", "broker name 'a/b' must be"),
    ("a={a},b={missing}", "store of b: {missing} is not a directory"),
    ("a={a},b={empty}", "store of b: {empty} holds neither commitlog/ nor commitlog segments"),
])  # fmt: skip
def test_bad_values_are_refused(stores, tmp_path: Path, value, words):
    a, b = stores
    (tmp_path / "empty").mkdir()
    names = dict(a=a, b=b, missing=tmp_path / "missing", empty=tmp_path / "empty")
    with pytest.raises(InvalidArgumentError) as e:
        parse_stores(value.format(**names))
    assert words.format(**names) in str(e.value)


def test_a_long_broker_name_is_refused(stores):
    a, _ = stores
    parse_stores(f"{'n' * 127}={a}")
    with pytest.raises(InvalidArgumentError, match="1-127 characters"):
        parse_stores(f"{'n' * 128}={a}")
