"""Several processes opening the same new, empty root at once: one creates the database, the
others open it; each either writes or is fenced by a later opener, and none is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import inkpen

PROCESSES = 4
ROUNDS = 4

OPENER = """
import os, sys, time
import inkpen

go_dir, me, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
print("READY", flush=True)
for n, url in enumerate(urls):
    go = os.path.join(go_dir, f"go-{n}")
    end = time.monotonic() + 120
    while not os.path.exists(go):  # every opener starts the round at the same moment
        if time.monotonic() > end:
            raise SystemExit("no go signal")
        time.sleep(0.001)
    try:
        with inkpen.open(url, gc_min_age=0.0) as book:
            book.put("first", me, b"written")
            outcome = "OK"
    except inkpen.FencedError:
        outcome = "FENCED"
    except Exception as exc:
        outcome = f"ERROR {type(exc).__name__}: {exc}".replace("\\n", " ")
    print(f"ROUND {n} {outcome}", flush=True)
"""


def test_concurrent_first_opens_of_an_empty_root(
    durable_kind: str, make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    urls = [make_store_url(durable_kind) for _ in range(ROUNDS)]
    errors = [tmp_path / f"opener-{p}.err" for p in range(PROCESSES)]
    procs = []
    for p, path in enumerate(errors):
        with path.open("w") as err:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", OPENER, str(tmp_path), f"p{p}", *urls],
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    env=dict(os.environ),
                )
            )
    try:
        for proc, path in zip(procs, errors, strict=True):
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "READY", path.read_text()[-3000:]
        for n, url in enumerate(urls):
            (tmp_path / f"go-{n}").touch()
            outcomes = {}
            for p, (proc, path) in enumerate(zip(procs, errors, strict=True)):
                assert proc.stdout is not None
                line = proc.stdout.readline().strip()
                assert line.startswith(f"ROUND {n} "), (line, path.read_text()[-3000:])
                outcomes[f"p{p}"] = line.removeprefix(f"ROUND {n} ")
            assert set(outcomes.values()) <= {"OK", "FENCED"}, outcomes
            assert "OK" in outcomes.values(), outcomes
            # Every acknowledged put is in the one database they all opened.
            with inkpen.open_reader(url) as reader:
                written = {key.decode() for key in reader.keys("first")}
            assert written == {p for p, outcome in outcomes.items() if outcome == "OK"}
        for proc, path in zip(procs, errors, strict=True):
            assert proc.wait(timeout=120) == 0, path.read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
