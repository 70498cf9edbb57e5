"""A Reader in its own process, for tests of checkpoints across processes.

Run as ``python reader_process.py URL LIFETIME``. It opens ``inkpen.open_reader(URL)`` (its own
checkpoint, lifetime LIFETIME seconds, refreshed at half-life), prints ``checkpoint <id>``, then
answers commands read from stdin, one per line:

- ``check``: reads every object of bucket ``r`` and prints ``objects <json>`` (key -> value,
  both decoded as UTF-8);
- ``close``: closes the Reader (deleting its checkpoint), prints ``closed`` and exits.
"""

from __future__ import annotations

import json
import sys

import inkpen


def main() -> None:
    url, lifetime = sys.argv[1], float(sys.argv[2])
    reader = inkpen.open_reader(url, checkpoint_lifetime=lifetime)
    print(f"checkpoint {reader.checkpoint_id}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "check":
            found = {k.decode(): v.decode() for _, k, v in reader.objects("r")}
            print(f"objects {json.dumps(found, sort_keys=True)}", flush=True)
        elif command == "close":
            reader.close()
            print("closed", flush=True)
            return


if __name__ == "__main__":
    main()
