"""What a key query must return on the golden store, computed from expected.json's messages.

Not from any index: every stored message of the topic whose KEYS tokens contain the key or
whose UNIQ_KEY equals it, with store time in [begin, end], newest first. Rollback records are
left out because they are never indexed (RocketMQ's rule, spec §6.2).
"""

ROLLBACK = 0xC


def matching(messages: list[dict], topic: str, key: str, begin: int, end: int) -> list[int]:
    out = []
    for m in messages:
        s = m["stored"]
        if s["topic"] != topic or s["sysFlag"] & ROLLBACK == ROLLBACK or not key:
            continue
        tokens = [t for t in (s.get("keys") or "").split(" ") if t]
        if key not in tokens and s.get("uniqKey") != key:
            continue
        if begin <= s["storeTimestamp"] <= end:
            out.append(s["phyOffset"])
    return sorted(out, reverse=True)


def expected_page(messages: list[dict], q: dict) -> tuple[list[int], bool]:
    """(physical offsets the query returns, whether it is truncated)."""
    hits = matching(messages, q["topic"], q["key"], q["begin"], q["end"])
    return hits[: q["maxNum"]], len(hits) > q["maxNum"]


# Golden queries whose answer differs from RocketMQ's queryMessageKeyMatch, and why.
DIFFERS_FROM_ROCKETMQ = {
    5: "begin is a hit's exact store time: RocketMQ reads the index time truncated to the "
       "second, finds it before begin and drops the hit; we keep it",
    8: "end is a hit's store time - 1: the truncated index time is <= end, so RocketMQ "
       "keeps a hit stored after end; we check the real store time and drop it",
    12: "maxNum 100 on a key with 90 hits: RocketMQ caps at maxMsgsNumBatch=64; we have no "
        "hard cap and return all 90",
}
