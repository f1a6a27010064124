"""RocketMQ 4.x's ACL file, ``plain_acl.yml``: who may sign requests to a broker, from where,
and with which permissions on which topics and consumer groups. Read by the remoting broker
(``--acl-file``, ``services.remoting.acl``).

YAML::

    globalWhiteRemoteAddresses:          # clients from these addresses need no signature
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ              # more than 6 characters
        secretKey: 12345678              # more than 6 characters
        whiteRemoteAddress: 192.168.0.*  # from here this account needs no signature either
        admin: false                     # admin: every resource, and the admin commands
        defaultTopicPerm: DENY           # a topic not listed in topicPerms
        defaultGroupPerm: SUB            # a group not listed in groupPerms
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]

A permission is ``DENY``, ``PUB`` (send), ``SUB`` (subscribe), ``PUB|SUB`` or ``ANY`` (read
here as either: ``PUB|SUB``); a default not given is ``DENY``. A consumer group is the
resource ``%RETRY%<group>`` (a group's permission is its retry topic's, as RocketMQ keeps
it), so a send to a retry topic is checked against the group's permission.

An address rule: ``*`` (any), a list of addresses ``a,b`` (each whole), an IPv4 pattern whose
segments are numbers, ranges ``100-200`` or ``*`` (``192.168.*`` for the two left out too),
or ``{1,2}`` in the last segment (``192.168.0.{100,101}``); empty: none.
"""

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

PUB, SUB = 1, 2
PERMS = {"DENY": 0, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB,
         "ANY": PUB | SUB}  # fmt: skip
RETRY_PREFIX = "%RETRY%"
MIN_KEY_LENGTH = 7  # "more than 6 characters"
_SEGMENT = re.compile(r"\*|\d{1,3}(?:-\d{1,3})?")


class AclFileError(ValueError):
    """The file is not a plain_acl.yml this broker can apply (the message says where)."""


@dataclass(frozen=True)
class AddressRule:
    """Which client addresses a rule matches (``text`` as written)."""

    text: str
    every: bool = False
    exact: frozenset[str] = frozenset()
    segments: tuple[frozenset[int] | tuple[int, int] | None, ...] = ()  # None: any

    def matches(self, address: str) -> bool:
        if self.every:
            return True
        if address in self.exact:
            return True
        if not self.segments:
            return False
        parts = address.split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            return False
        for part, allowed in zip(parts, self.segments, strict=True):
            n = int(part)
            if allowed is None:
                continue
            if isinstance(allowed, tuple):
                if not allowed[0] <= n <= allowed[1]:
                    return False
            elif n not in allowed:
                return False
        return True


def address_rule(text: str | None) -> AddressRule | None:
    """The rule ``text`` states, None for an empty one. AclFileError for a malformed one."""
    text = (text or "").strip()
    if not text:
        return None
    if text == "*":
        return AddressRule(text, every=True)
    if "{" in text:
        head, _, rest = text.partition("{")
        if not rest.endswith("}") or not head.endswith("."):
            raise AclFileError(f"address rule {text!r}: braces close the last segment")
        prefix = _pattern(head + "0", text)[:-1]
        try:
            last = frozenset(int(x) for x in rest[:-1].split(","))
        except ValueError:
            raise AclFileError(f"address rule {text!r}: not numbers in the braces") from None
        if len(prefix) != 3 or not all(0 <= n <= 255 for n in last):
            raise AclFileError(f"address rule {text!r}: four segments of 0..255")
        return AddressRule(text, segments=(*prefix, last))
    if "," in text or not any(c in text for c in "*-"):
        exact = []
        for one in text.split(","):
            try:
                exact.append(str(ipaddress.ip_address(one.strip())))
            except ValueError:
                raise AclFileError(f"address rule {text!r}: {one.strip()!r} is not an "
                                   "address") from None  # fmt: skip
        return AddressRule(text, exact=frozenset(exact))
    return AddressRule(text, segments=_pattern(text, text))


def _pattern(text: str, rule: str) -> tuple[frozenset[int] | tuple[int, int] | None, ...]:
    parts = text.split(".")
    if parts[-1] == "*" and len(parts) < 4:
        parts += ["*"] * (4 - len(parts))
    if len(parts) != 4 or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise AclFileError(f"address rule {rule!r}: four segments, each a number, a range "
                           "a-b or *")  # fmt: skip
    out: list[frozenset[int] | tuple[int, int] | None] = []
    for p in parts:
        if p == "*":
            out.append(None)
            continue
        low, _, high = p.partition("-")
        lo, hi = int(low), int(high or low)
        if not 0 <= lo <= hi <= 255:
            raise AclFileError(f"address rule {rule!r}: {p} is not within 0..255")
        out.append((lo, hi))
    return tuple(out)


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white: AddressRule | None = None
    admin: bool = False
    default_topic_perm: int = 0
    default_group_perm: int = 0
    perms: dict[str, int] = field(default_factory=dict)  # topic or %RETRY%group -> perm

    def perm(self, resource: str) -> int:
        """What the account may do with a topic or ``%RETRY%<group>``."""
        owned = self.perms.get(resource)
        if owned is not None:
            return owned
        return self.default_group_perm if resource.startswith(RETRY_PREFIX) else \
            self.default_topic_perm  # fmt: skip


@dataclass(frozen=True)
class AclConfig:
    global_white: tuple[AddressRule, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)


def parse(text: str) -> AclConfig:
    """``plain_acl.yml``'s text. AclFileError naming what is wrong."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclFileError(f"not YAML: {e}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise AclFileError("the file is not a mapping (globalWhiteRemoteAddresses, accounts)")
    white = tuple(r for r in map(address_rule, _strings(doc, "globalWhiteRemoteAddresses"))
                  if r is not None)  # fmt: skip
    accounts: dict[str, Account] = {}
    for i, entry in enumerate(_list(doc, "accounts")):
        if not isinstance(entry, dict):
            raise AclFileError(f"accounts[{i}] is not a mapping")
        account = _account(entry, i)
        if account.access_key in accounts:
            raise AclFileError(f"accounts[{i}]: access key {account.access_key} appears twice")
        accounts[account.access_key] = account
    return AclConfig(white, accounts)


def _account(entry: dict[str, Any], i: int) -> Account:
    where = f"accounts[{i}]"
    key, secret = str(entry.get("accessKey") or ""), str(entry.get("secretKey") or "")
    if len(key) < MIN_KEY_LENGTH or len(secret) < MIN_KEY_LENGTH:
        raise AclFileError(f"{where}: accessKey and secretKey must be more than 6 characters")
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise AclFileError(f"{where}: admin is true or false, not {admin!r}")
    perms: dict[str, int] = {}
    for name, prefix in (("topicPerms", ""), ("groupPerms", RETRY_PREFIX)):
        for item in _strings(entry, name, where):
            resource, sep, perm = item.partition("=")
            if not sep or not resource.strip():
                raise AclFileError(f"{where}.{name}: {item!r} is not NAME=PERM")
            perms[prefix + resource.strip()] = _perm(perm, f"{where}.{name}")
    return Account(
        key, secret, address_rule(_string(entry.get("whiteRemoteAddress"), where)), admin,
        _perm(entry.get("defaultTopicPerm") or "DENY", f"{where}.defaultTopicPerm"),
        _perm(entry.get("defaultGroupPerm") or "DENY", f"{where}.defaultGroupPerm"), perms,
    )  # fmt: skip


def _perm(text: object, where: str) -> int:
    perm = PERMS.get(str(text).strip().upper().replace(" ", ""))
    if perm is None:
        raise AclFileError(f"{where}: {text!r} is not DENY, PUB, SUB, PUB|SUB or ANY")
    return perm


def _list(doc: dict[str, Any], name: str, where: str = "") -> list[Any]:
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclFileError(f"{where + '.' if where else ''}{name} is not a list")
    return value


def _strings(doc: dict[str, Any], name: str, where: str = "") -> Iterable[str]:
    return [_string(v, f"{where}.{name}" if where else name)
            for v in _list(doc, name, where) if v is not None]  # fmt: skip


def _string(value: object, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool | dict | list):
        raise AclFileError(f"{where}: {value!r} is not a string")
    return str(value)
