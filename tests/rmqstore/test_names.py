"""Names that become paths (topics, index files, segments, dispatch subscribers) are matched whole:
a trailing newline, which ``re.match`` with ``$`` lets through, is refused."""

import pytest

from rmqstore import layout, segments
from rmqstore.errors import InvalidArgumentError
from services.commitlog.dispatching import Dispatching


@pytest.mark.parametrize("topic", ["Orders\n", "Orders\n\n", "\nOrders"])
def test_a_topic_with_a_newline_is_refused(topic):
    with pytest.raises(InvalidArgumentError, match="outside"):
        layout.validate_topic(topic)


def test_file_names_with_a_trailing_newline_are_not_the_store_s():
    assert layout.is_index_file_name("20260101000000000")
    assert not layout.is_index_file_name("20260101000000000\n")
    assert segments.parse_segment_name("00000000000000000000") == 0
    assert segments.parse_segment_name("00000000000000000000\n") is None


def test_a_subscriber_name_with_a_trailing_newline_is_refused():
    Dispatching.check_subscriber("consume-queue")
    with pytest.raises(InvalidArgumentError):
        Dispatching.check_subscriber("consume-queue\n")
