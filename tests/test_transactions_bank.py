"""Eight threads move money between ten accounts in transactions for two seconds (a deadline, not
a sleep), at both isolation levels: the total never changes, every transaction that reads all
accounts sees the whole total, and the final balances are exactly what the committed transfers
say (no lost update), on the memory store and a local directory."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

import inkpen

ACCOUNTS = [f"acct{i:02d}" for i in range(10)]
START = 100
THREADS = 8
SECONDS = 2.0


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
@pytest.mark.parametrize("kind", ["memory", "local"])
def test_concurrent_transfers_keep_the_total(
    make_store_url: Callable[[str], str], kind: str, isolation: str
) -> None:
    with inkpen.open(make_store_url(kind)) as book:
        for account in ACCOUNTS:
            book.put("bank", account, str(START).encode())
        total = START * len(ACCOUNTS)
        deadline = time.monotonic() + SECONDS
        lock = threading.Lock()
        moved: dict[str, int] = dict.fromkeys(ACCOUNTS, 0)
        """Net amount each account received, from transfers whose commit returned."""
        counts = {"transfers": 0, "audits": 0, "gave_up": 0, "attempts": 0}
        problems: list[str] = []

        def transfer(rng: random.Random) -> tuple[str, str, int]:
            src, dst = rng.sample(ACCOUNTS, 2)
            with lock:
                counts["attempts"] += 1
            with book.transaction(isolation) as txn:
                have, other = (int(v or b"0") for v in txn.get_many("bank", [src, dst]))
                amount = rng.randint(1, 30) if have > 0 else 0
                amount = min(amount, have)
                txn.put("bank", src, str(have - amount).encode())
                txn.put("bank", dst, str(other + amount).encode())
            return src, dst, amount

        def audit() -> int:
            with book.transaction(isolation) as txn:
                if random.random() < 0.5:
                    values = txn.get_many("bank", ACCOUNTS)
                    return sum(int(v or b"0") for v in values)
                return sum(int(v) for _, _, v in txn.objects("bank"))

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            while time.monotonic() < deadline:
                try:
                    if rng.random() < 0.2:
                        seen = audit()
                        with lock:
                            counts["audits"] += 1
                        if seen != total:
                            problems.append(f"an audit saw {seen}, not {total}")
                        continue
                    src, dst, amount = inkpen.retrying(
                        lambda: transfer(rng), attempts=200, base_delay=0.0005, max_delay=0.01
                    )
                except inkpen.ConflictError:
                    with lock:
                        counts["gave_up"] += 1
                    continue
                except Exception as exc:
                    problems.append(repr(exc))
                    return
                with lock:
                    counts["transfers"] += 1
                    moved[src] -= amount
                    moved[dst] += amount

        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert problems == []
        balances = {key.decode(): int(value) for _, key, value in book.objects("bank")}
        assert sum(balances.values()) == total
        assert balances == {a: START + moved[a] for a in ACCOUNTS}  # no transfer lost or doubled
        assert all(balance >= 0 for balance in balances.values())
        assert counts["transfers"] > 0 and counts["audits"] > 0
        conflicts = counts["attempts"] - counts["transfers"]
        print(
            f"{kind} {isolation}: {counts['transfers']} transfers, {counts['audits']} audits, "
            f"{conflicts} conflicts ({conflicts / max(1, counts['attempts']):.0%} of attempts), "
            f"{counts['gave_up']} given up"
        )
        assert book._engine.commits.registered == 0
