"""A stored message's properties string, assembled as RocketMQ's broker assembles it (the
string's format, and Java HashMap order, are ``rmqstore.formats.properties``).

The client's map holds TAGS, KEYS, user properties, DELAY, WAIT and UNIQ_KEY, in insertion
order; a normal send loses WAIT and gains CLUSTER; a delayed one keeps WAIT, gains
REAL_TOPIC/REAL_QID and moves to SCHEDULE_TOPIC_XXXX queue level-1. The common case (no user
property but __BORNHOST, no delay) is never put in a map: it is a ``str.format`` template per
combination of the fields present.
"""

import itertools
import string
import time

from rmqstore import delay
from rmqstore.errors import MessageIllegalError
from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.formats.javahash import utf16_len
from rmqstore.layout import SCHEDULE_TOPIC, TRANS_HALF_TOPIC

# set by a message's own fields, never as a property; TIMER_DELIVER_MS may come as one (a
# RocketMQ 5 client's delivery time, with the delay level it was parked on): a message's
# ``deliver_at_ms`` sets it instead and picks the level
RESERVED = frozenset(
    (P.KEYS, P.TAGS, P.UNIQ_KEY, P.DELAY, P.WAIT, P.CLUSTER, P.REAL_TOPIC, P.REAL_QID)
)
# a transaction's half message names its real destination (as RocketMQ 4.9 stores it)
HALF_MESSAGE_PROPERTIES = frozenset((P.REAL_TOPIC, P.REAL_QID))


def check_text(what: str, value: str) -> None:
    if P.has_separator(value):
        raise MessageIllegalError(f"{what} contains a property separator (\\x01 or \\x02)")


class PropertiesText:
    """The properties strings of one writer's messages (its cluster name in each)."""

    def __init__(self, cluster_name: str) -> None:
        self.cluster_name = cluster_name
        # the properties string of the common case (no user properties but __BORNHOST, no
        # delay) for each combination of present fields, in HashMap order, as a str.format
        # template over (tags, keys, unique key, __BORNHOST), the names inserted in the order
        # ``general`` inserts them; WAIT was in the client's map too, so the map once
        # held one more entry
        self.templates: dict[tuple[bool, ...], str] = {}
        cluster = cluster_name.replace("{", "{{").replace("}", "}}")
        slot = {P.TAGS: "{0}", P.KEYS: "{1}", P.UNIQ_KEY: "{2}", P.BORN_HOST: "{3}",
                P.CLUSTER: cluster}  # fmt: skip
        for present in itertools.product((False, True), repeat=4):
            names = [
                n for n, on in zip((P.TAGS, P.KEYS, P.BORN_HOST, P.UNIQ_KEY),
                                   (present[0], present[1], present[3], present[2]), strict=True)
                if on
            ] + [P.CLUSTER]  # fmt: skip
            order = P.hashmap_order(names, len(names) + 1)
            self.templates[present] = P.PROPERTY_SEPARATOR.join(
                f"{n}{P.NAME_VALUE_SEPARATOR}{slot[n]}" for n in order
            )
            if not present[3]:  # the key without __BORNHOST, as most callers give it
                self.templates[present[:3]] = self.templates[present]
        self._parts_cache: dict[tuple[str, bool, str], list] = {}

    def batch_parts(
        self, tags: list[str], keys: list[str], uniqs: list[str], born_property: str
    ) -> list:
        """The properties of many messages, as ``prepare_plain`` takes them. A batch with
        one tag (or none) for all and keys for all (or none) shares its properties' fixed
        text: each message's properties are that text with its keys and unique key put in,
        never formatted one by one."""
        n = len(tags)
        if tags.count(tags[0]) == n and (keys.count("") in (0, n)):
            # keys and unique keys encoded at once, split where none has a \x01 (checked)
            values = {
                1: "\x01".join(keys).encode().split(b"\x01"),
                2: "\x01".join(uniqs).encode().split(b"\x01"),
            }
            shared = self.shared_parts(tags[0], bool(keys[0]), born_property)
            return [values.get(p, p) for p in shared]
        templates, has_born = self.templates, bool(born_property)
        return [
            [
                templates[(bool(t), bool(k), True, has_born)]
                .format(t, k, u, born_property).encode()
                for t, k, u in zip(tags, keys, uniqs, strict=True)
            ]
        ]  # fmt: skip

    def shared_parts(self, tags: str, has_keys: bool, born_property: str = "") -> list:
        """The properties of a message with these tags, keys or not, a unique key and this
        __BORNHOST (or none): its fixed text in pieces, with 1 where its keys go and 2 where
        its unique key goes."""
        parts = self._parts_cache.get((tags, has_keys, born_property))
        if parts is None:
            template = self.templates[(bool(tags), has_keys, True, bool(born_property))]
            parts, text = [], ""
            for literal, name, _, _ in string.Formatter().parse(template):
                text += literal
                if name == "0":
                    text += tags
                elif name == "3":
                    text += born_property
                elif name:
                    parts += [text.encode(), int(name)]
                    text = ""
            parts.append(text.encode())
            if len(self._parts_cache) < 10_000:
                self._parts_cache[(tags, has_keys, born_property)] = parts
        return parts

    def general(self, m, uniq: str, now_ms: int | None) -> tuple[str, str, int, int]:
        """User properties and/or delay: (properties, stored topic, stored queue, delay ms).
        A delivery time is parked on the largest level not beyond it (see rmqstore.delay)."""
        props: dict[str, str] = {}
        if m.tags:
            props[P.TAGS] = m.tags
        if m.keys:
            props[P.KEYS] = m.keys
        for prop in m.properties:
            if not prop.name or not prop.value:
                raise MessageIllegalError(f"property {prop.name!r} has an empty name or value")
            if prop.name in RESERVED and not (
                m.topic == TRANS_HALF_TOPIC and prop.name in HALF_MESSAGE_PROPERTIES
            ):
                raise MessageIllegalError(f"property {prop.name} is set by its own field")
            check_text(f"property {prop.name!r}", prop.name + prop.value)
            props[prop.name] = prop.value
        level = m.delay_level
        if m.deliver_at_ms:
            if m.deliver_at_ms < 0:
                raise MessageIllegalError(f"delivery time {m.deliver_at_ms} is negative")
            now = now_ms if now_ms is not None else int(time.time() * 1000)
            level = delay.level_for(m.deliver_at_ms - now)
            if level:
                props[delay.TIMER_DELIVER_MS] = str(m.deliver_at_ms)
        tx = commitlog.transaction_type(m.sys_flag)
        delayed = level > 0 and tx in (
            commitlog.TRANSACTION_NOT_TYPE,
            commitlog.TRANSACTION_COMMIT_TYPE,
        )
        if delayed:  # stored clamped to the table, as RocketMQ stores it
            level = delay.clamp_level(level)
        if level > 0:
            props[P.DELAY] = str(level)
        props[P.WAIT] = "false" if m.no_wait_store else "true"
        if uniq:
            props[P.UNIQ_KEY] = uniq
        topic, queue_id, delay_ms = m.topic, m.queue_id, 0
        if delayed:
            props[P.CLUSTER] = self.cluster_name
            props[P.REAL_TOPIC] = topic
            props[P.REAL_QID] = str(queue_id)
            max_size = len(props)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            delay_ms = delay.delay_ms(level)
        else:
            max_size = len(props) + 1
            del props[P.WAIT]
            props[P.CLUSTER] = self.cluster_name
        prop_str = P.encode(props, max_size)
        if utf16_len(prop_str) > P.MAX_PROPERTIES_LENGTH:
            raise MessageIllegalError(
                f"properties are {utf16_len(prop_str)} characters, the limit is 32767"
            )
        return prop_str, topic, queue_id, delay_ms
