"""RocketMQ's ``plain_acl.yml``: accounts, permissions and address rules as its docs state
them, and clear errors for what a broker could not apply."""

import pytest

from rmqstore.formats.plain_acl import PUB, SUB, AclFileError, address_rule, parse

FILE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{100,101}
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_the_sample_file_of_rocketmqs_docs():
    config = parse(FILE)
    assert [r.text for r in config.global_white] == ["10.10.103.*", "192.168.0.{100,101}"]
    user, admin = config.accounts["RocketMQ"], config.accounts["rocketmq2"]
    assert (user.secret_key, user.admin, user.white) == ("12345678", False, None)
    assert [user.perm(t) for t in ("topicA", "topicB", "topicC", "other")] == [
        0, PUB | SUB, SUB, 0]  # fmt: skip
    assert [user.perm(g) for g in ("%RETRY%groupA", "%RETRY%groupB", "%RETRY%other")] == [
        0, PUB | SUB, SUB]  # fmt: skip
    assert admin.admin and admin.white is not None and admin.white.matches("192.168.1.7")
    assert admin.perm("anything") == 0  # defaults DENY (an admin is not asked)


def test_any_is_either_and_an_empty_file_has_no_accounts():
    config = parse("accounts:\n  - {accessKey: abcdefg, secretKey: hijklmn, "
                   "defaultTopicPerm: ANY}\n")  # fmt: skip
    assert config.accounts["abcdefg"].perm("t") == PUB | SUB
    assert parse("").accounts == {} and parse("accounts:\n").accounts == {}


@pytest.mark.parametrize(
    ("rule", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2"]),
        ("192.168.1.100,192.168.2.100", ["192.168.2.100"], ["192.168.1.101"]),
        ("192.168.*.*", ["192.168.7.9"], ["192.169.0.1"]),
        ("192.168.*", ["192.168.200.1"], ["10.168.0.1"]),
        ("192.168.100-200.10-20", ["192.168.150.10", "192.168.200.20"],
         ["192.168.99.15", "192.168.150.21"]),
        ("192.168.0.{100,101}", ["192.168.0.101"], ["192.168.0.102", "192.168.1.100"]),
        ("::1", ["::1"], ["127.0.0.1"]),
    ],
)  # fmt: skip
def test_address_rules(rule, yes, no):
    r = address_rule(rule)
    assert r is not None
    assert [r.matches(a) for a in yes] == [True] * len(yes)
    assert [r.matches(a) for a in no] == [False] * len(no)


def test_an_empty_rule_is_none():
    assert address_rule("") is None and address_rule(None) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("accounts: [1]", "accounts[0] is not a mapping"),
        ("accounts:\n  - {accessKey: short, secretKey: 12345678}", "more than 6 characters"),
        ("accounts:\n  - {accessKey: abcdefg, secretKey: 12345678, defaultTopicPerm: ALL}",
         "'ALL' is not DENY"),
        ("accounts:\n  - {accessKey: abcdefg, secretKey: 12345678, topicPerms: [t]}",
         "'t' is not NAME=PERM"),
        ("accounts:\n  - {accessKey: abcdefg, secretKey: 12345678, admin: yes please}",
         "admin is true or false"),
        ("accounts:\n  - {accessKey: abcdefg, secretKey: 12345678}\n"
         "  - {accessKey: abcdefg, secretKey: 87654321}", "appears twice"),
        ("globalWhiteRemoteAddresses: [300.1.1.*]", "not within 0..255"),
        ("globalWhiteRemoteAddresses: [a.b.c.d]", "is not an address"),
        ("globalWhiteRemoteAddresses: ['10.0.{1,2}.3']", "braces close the last segment"),
        ("accounts: {a: 1}", "accounts is not a list"),
        ("- just a list", "not a mapping"),
        ("accounts: [", "not YAML"),
    ],
)  # fmt: skip
def test_what_cannot_be_applied_is_named(text, words):
    with pytest.raises(AclFileError) as e:
        parse(text)
    assert words in str(e.value)
