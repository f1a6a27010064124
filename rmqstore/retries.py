"""Names both protocols' retries share: the retry and dead-letter topic prefixes and the
properties a copy of a consumed message carries (RocketMQ's ``MixAll`` and
``MessageConst``). The RocketMQ 5 proxy writes retry copies to ``%RETRY%<group>_<topic>``
(``services/proxy/copies.py``), a 4.x broker to ``%RETRY%<group>``
(``services/remoting/send_back.py``); both write dead letters to ``%DLQ%<group>``.
"""

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from rmqstore.layout import validate_topic

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
RETRY_TOPIC = "RETRY_TOPIC"  # the topic the group consumes (the original's)
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"  # the first record's id, kept by copies of copies
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
DEFAULT_MAX_RECONSUME_TIMES = 16  # an auto-created group's retryMaxTimes


def _topic(name: str) -> str | None:
    try:
        return validate_topic(name)
    except InvalidArgumentError:
        return None


def group_retry_topic(group: str) -> str | None:
    """``%RETRY%<group>`` (RocketMQ 4.x's one retry topic per group); None when that name
    cannot be a topic."""
    return _topic(RETRY_PREFIX + group)


def dead_letter_topic(group: str) -> str | None:
    """``%DLQ%<group>``; None when that name cannot be a topic (a group name RocketMQ
    refuses, or one too long)."""
    return _topic(DLQ_PREFIX + group)


def origin_id(r: commitlog.Record) -> str:
    """The id a copy of ``r`` names as its origin: ``r``'s own origin if it is a copy, else
    its UNIQ_KEY ("" when it has none)."""
    return r.property_map.get(ORIGIN_MESSAGE_ID) or r.uniq_key or ""
