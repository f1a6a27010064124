"""What the remoting broker makes of a topic request's fields (``services/remoting/topics``)."""

import pytest

from services.remoting.topics import TopicError, message_type_of


@pytest.mark.parametrize(("attributes", "kind"), [
    ("", ""),
    ("+message.type=FIFO", "FIFO"),
    ("+message.type=DELAY, ", "DELAY"),
    ("-message.type", "MIXED"),
    ("+message.type=FIFO,-message.type", "MIXED"),
])  # fmt: skip
def test_the_message_type_from_rocketmq_5s_attributes(attributes: str, kind: str) -> None:
    assert message_type_of(attributes) == kind


@pytest.mark.parametrize("attributes", ["+queue.type=BatchCQ", "message.type=FIFO",
                                        "+message.type=", "-message.type=FIFO"])  # fmt: skip
def test_any_other_attribute_is_refused(attributes: str) -> None:
    with pytest.raises(TopicError, match="unsupported topic attribute"):
        message_type_of(attributes)
