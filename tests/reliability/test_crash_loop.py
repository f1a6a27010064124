"""Crash loop: producers put under sync flush while services are SIGKILLed at random moments.

After each kill the victim is restarted; producers are paused, the builders must catch up
(durable offset == writer max offset) and every message acknowledged in the cycle must be
found exactly once by queue offset, by each key and by id, with identical bytes; every few
cycles and at the end, all messages acknowledged so far are checked again by queue offset and
by their batch's shared key. The short form runs
in ``make test``; the long form (``soak`` marker) runs ≥ 50 cycles.
"""

import random
import time
from collections import Counter

import pytest

from tests.reliability.cluster import SERVICES, Cluster, Producers, verify, wait_until

pytestmark = pytest.mark.integration


def crash_loop(store, cycles: int, seed: int, producers: int = 2,
               full_check_every: int = 5) -> dict:
    rng = random.Random(seed)
    cluster = Cluster(store).start_all()
    prods = Producers(cluster, producers, ("CrashA", "CrashB"), batch=4, seed=seed,
                      pace=0.02).start()
    victims: Counter[str] = Counter()
    checked_upto = 0
    lookups = [0, 0]
    cuts = 0
    slowest_catch_up = 0.0
    try:
        order: list[str] = []
        for cycle in range(cycles):
            if not order:  # every service once per four cycles, in random order
                order = rng.sample(SERVICES, len(SERVICES))
            victim = order.pop()
            target = prods.acked + rng.randint(10, 300)
            wait_until(lambda t=target: prods.acked >= t, 60,
                       f"cycle {cycle}: {target} acknowledgements\n{cluster.log('writer')}")
            cluster.kill(victim)
            victims[victim] += 1
            cluster.start(victim)
            if victim == "writer":  # a record torn by the kill (never acknowledged) is cut
                cuts += sum("; cut: " in line for line in cluster.procs["writer"].lines)
            t0 = time.monotonic()
            prods.pause()
            end = cluster.wait_caught_up()
            catch_up = time.monotonic() - t0
            slowest_catch_up = max(slowest_catch_up, catch_up)
            sent = prods.all()
            full = (cycle + 1) % full_check_every == 0 or cycle == cycles - 1
            t0 = time.monotonic()
            found = verify(cluster, sent[checked_upto:])
            if full:
                verify_all = verify(cluster, sent, by_key=False, by_id=False)
                found.problems += verify_all.problems
            took = time.monotonic() - t0
            lookups[0] += found.by_key
            lookups[1] += found.by_id
            print(f"cycle {cycle:3d}: killed {victim:13s} writer end {end:9d}, "
                  f"{len(sent)} acknowledged, checked {found.checked} new"
                  f"{' + all by queue and batch key' if full else ''}, "
                  f"problems {len(found.problems)} (catch-up {catch_up:.1f}s, check {took:.1f}s)")
            assert not found.problems, "\n".join(found.problems)
            checked_upto = len(sent)
            prods.resume()
        sent = prods.stop()
        end = cluster.wait_caught_up()
        found = verify(cluster, sent, by_key=False, by_id=False)
        last = verify(cluster, sent[checked_upto:])
        found.problems += last.problems
        lookups[0] += last.by_key + found.by_key
        lookups[1] += last.by_id
        codes = cluster.stop_all()
    finally:
        prods.stop() if any(t.is_alive() for t in prods.threads) else None
        cluster.stop_all()
    summary = {
        "cycles": cycles, "kills": dict(victims), "acknowledged": len(sent),
        "failed_puts": prods.failures, "recovery_cuts": cuts, "commitlog_bytes": end,
        "pulled": found.pulled, "slowest_catch_up_s": round(slowest_catch_up, 1),
        "stored_unacknowledged": found.pulled - len(sent), "key_lookups": lookups[0],
        "id_lookups": lookups[1], "losses": len(found.problems),
    }
    print("crash loop:", summary)
    assert not found.problems, "\n".join(found.problems)
    assert codes == dict.fromkeys(SERVICES, 0), codes
    assert found.pulled >= len(sent)  # the rest: stored, but the writer died before replying
    return summary


def test_crash_loop_short(tmp_path):
    summary = crash_loop(tmp_path / "store", cycles=10, seed=9)
    assert sum(summary["kills"].values()) == 10 and summary["acknowledged"] > 0


@pytest.mark.soak
@pytest.mark.timeout(1200)  # 60 cycles with growing full checks: 5 min in a slow hour
def test_crash_loop_soak(tmp_path):
    summary = crash_loop(tmp_path / "store", cycles=60, seed=909, producers=3,
                         full_check_every=10)
    assert sum(summary["kills"].values()) == 60
