"""A stored message's properties string: each template of the common case is what the
general path (the client's map, in HashMap order) makes of the same fields."""

from itertools import product

import pytest

from rmqstore import delay
from rmqstore.errors import MessageIllegalError
from rmqstore.formats import properties as P
from rmqstore.formats.commitlog import TRANSACTION_PREPARED_TYPE as TRANSACTION_PREPARED
from rmqstore.v1 import common_pb2
from services.commitlog.message_properties import PropertiesText

FIELDS = list(product(["", "T{0}"], ["", "k1 k2"], ["", "UK"], ["", "host{1}"]))  # braces too


@pytest.mark.parametrize("tags, keys, uniq, born", FIELDS)
def test_each_template_is_what_the_general_path_makes(tags, keys, uniq, born):
    text = PropertiesText("Cluster{x}")
    born_prop = [common_pb2.Property(name=P.BORN_HOST, value=born)] if born else []
    m = common_pb2.Message(topic="A", tags=tags, keys=keys, properties=born_prop)
    want, topic, queue_id, delay_ms = text.general(m, uniq, 0)
    key = (bool(tags), bool(keys), bool(uniq), bool(born))
    assert text.templates[key].format(tags, keys, uniq, born) == want
    assert (topic, queue_id, delay_ms) == ("A", 0, 0)
    if not born:  # the three-field key most callers give
        assert text.templates[key[:3]].format(tags, keys, uniq) == want


def test_shared_parts_put_together_are_the_template():
    text = PropertiesText("C")
    for tags, has_keys, born in product(["", "T"], [False, True], ["", "h"]):
        keys, uniq = ("k" if has_keys else ""), "UK"
        joined = b"".join(
            {1: keys.encode(), 2: uniq.encode()}.get(p, p)
            for p in text.shared_parts(tags, has_keys, born)
        )
        template = text.templates[(bool(tags), has_keys, True, bool(born))]
        assert joined == template.format(tags, keys, uniq, born).encode()


def test_a_property_set_by_its_own_field_is_refused():
    m = common_pb2.Message(topic="A", properties=[common_pb2.Property(name=P.TAGS, value="x")])
    with pytest.raises(MessageIllegalError, match="set by its own field"):
        PropertiesText("C").general(m, "", 0)


def test_a_delay_level_beyond_the_table_is_stored_clamped():
    text = PropertiesText("C")
    with delay.levels_in_use("1s 2s"):
        props, topic, queue_id, delay_ms = text.general(
            common_pb2.Message(topic="A", delay_level=9), "", 0
        )
        prepared = common_pb2.Message(topic="A", delay_level=9, sys_flag=TRANSACTION_PREPARED)
        prepared_props = text.general(prepared, "", 0)[0]
    assert P.parse(props)[P.DELAY] == "2" and P.parse(props)[P.REAL_TOPIC] == "A"
    assert (topic, queue_id, delay_ms) == ("SCHEDULE_TOPIC_XXXX", 1, 2000)
    assert P.parse(prepared_props)[P.DELAY] == "9"  # not scheduled: kept as asked, as RocketMQ
