"""A following Reader in its own process, for tests of followers across processes.

Run as ``python follower_process.py URL INTERVAL``. It opens ``inkpen.open_reader(URL,
follow=True, refresh_interval=INTERVAL)``, prints ``ready <last_sqn>``, then answers commands
read from stdin, one per line:

- ``wait SQN``: waits (tailing the feed, 60 s at most) until it sees SQN, then prints
  ``at <last_sqn> <ms waited>``;
- ``dump``: prints ``objects <json>``: every object of bucket ``r`` (key -> value, UTF-8);
- ``feed SINCE``: prints ``feed <json>``: ``[sqn, key, kind, value]`` of every change above
  SINCE (gaps skipped);
- ``close``: closes the Reader, prints ``closed`` and exits.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inkpen
from support.waiting import held_within


def main() -> None:
    url, interval = sys.argv[1], float(sys.argv[2])
    reader = inkpen.open_reader(url, follow=True, refresh_interval=interval)
    print(f"ready {reader.last_sqn}", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "wait":
            target = int(args[0])
            started = time.monotonic()

            def reached(target: int = target) -> bool:
                if reader.last_sqn >= target:
                    return True
                for _ in reader.changes(reader.last_sqn, wait=0.5, gaps="skip"):
                    if reader.last_sqn >= target:
                        break
                return reader.last_sqn >= target

            # The parent checks the position printed: a reader that falls short says where it is.
            held_within(reached, 60.0, interval=0)
            waited = round((time.monotonic() - started) * 1000, 1)
            print(f"at {reader.last_sqn} {waited}", flush=True)
        elif command == "dump":
            found = {k.decode(): v.decode() for _, k, v in reader.objects("r")}
            print(f"objects {json.dumps(found, sort_keys=True)}", flush=True)
        elif command == "feed":
            rows = [
                [c.sqn, c.key.decode(), c.kind, None if c.value is None else c.value.decode()]
                for c in reader.changes(int(args[0]), gaps="skip")
            ]
            print(f"feed {json.dumps(rows)}", flush=True)
        elif command == "close":
            reader.close()
            print("closed", flush=True)
            return


if __name__ == "__main__":
    main()
