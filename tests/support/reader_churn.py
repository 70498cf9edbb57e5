"""A Reader process that opens, reads and closes Readers in cycles, for the churn test.

Run as ``python reader_churn.py URL LIFETIME SECONDS SEED [PAUSE]``. Until SECONDS have passed it
opens ``inkpen.open_reader(URL, checkpoint_lifetime=LIFETIME)``, folds bucket ``r``, gets a few keys
(every fourth cycle it keeps reading for a little longer than half the lifetime, so a lease
refresh falls inside it) and closes the Reader, then holds no checkpoint for PAUSE seconds (0 by
default). It prints one JSON line per cycle:

- ``{"cycle": n, "checkpoint": id, "opened": t, "fold": {key: value}}`` after a cycle that read
  without error and whose gets agreed with its fold (a Reader reads one fixed state); ``t`` is
  the wall-clock time just before ``open_reader``;
- ``{"cycle": n, "error": "Type: message", "traceback": "..."}`` for any error, with where it
  was raised (it goes on with the next cycle);

and ``{"done": cycles}`` at the end.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback

import inkpen


def one_cycle(url: str, lifetime: float, rng: random.Random, linger: float) -> dict[str, object]:
    opened = time.time()
    started = time.monotonic()
    with inkpen.open_reader(url, checkpoint_lifetime=lifetime) as reader:
        open_ms = round((time.monotonic() - started) * 1000)
        fold = {k.decode(): v.decode() for _, k, v in reader.objects("r")}
        roll_ms = round((time.monotonic() - started) * 1000) - open_ms
        deadline = time.monotonic() + linger
        while True:
            for key in rng.sample(sorted(fold), min(5, len(fold))):
                got = reader.get("r", key)
                if got is None or got.decode() != fold[key]:
                    raise AssertionError(f"get({key!r}) = {got!r} but the fold read {fold[key]!r}")
            if time.monotonic() >= deadline:
                break
        return {
            "checkpoint": reader.checkpoint_id,
            "opened": opened,
            "open_ms": open_ms,
            "roll_ms": roll_ms,
            "fold": fold,
        }


def main() -> None:
    url, lifetime, seconds, seed = (
        sys.argv[1],
        float(sys.argv[2]),
        float(sys.argv[3]),
        int(sys.argv[4]),
    )
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    cycles = 0
    while time.monotonic() < end:
        linger = lifetime * 0.6 if cycles % 4 == 3 else 0.0
        try:
            line: dict[str, object] = {"cycle": cycles, **one_cycle(url, lifetime, rng, linger)}
        except Exception as exc:  # every error is the test's finding: report it, go on
            line = {
                "cycle": cycles,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        print(json.dumps(line), flush=True)
        cycles += 1
        time.sleep(pause)  # pacing, not synchronisation: a time in which no lease of it pins
    print(json.dumps({"done": cycles}), flush=True)


if __name__ == "__main__":
    main()
