"""Opening a Bookie fixes glibc's mmap threshold (option ``malloc_mmap_threshold``), so large
buffers freed by rolls and merges go back to the system instead of raising the threshold and
staying in the heap. Each case runs in a fresh interpreter: the setting is process-wide."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="needs glibc 2.33 or later (mallinfo2)",
)

SCRIPT = """
import ctypes, sys
import inkpen

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
big = bytearray(8 << 20)
del big  # freeing a mapped 8 MiB block raises glibc's own threshold to 8 MiB
inkpen.open(sys.argv[1], **eval(sys.argv[2])).close()
before = libc.mallinfo2().hblkhd
held = bytearray(2 << 20)
print(libc.mallinfo2().hblkhd - before)
assert "MALLOC_MMAP_THRESHOLD_" not in __import__("os").environ  # the app's own is untouched
"""


def mapped_bytes_of_a_2_mib_buffer(tmp_path: Path, options: str) -> int:
    env = {name: value for name, value in os.environ.items() if name != "MALLOC_MMAP_THRESHOLD_"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"file://{tmp_path / 'db'}", options],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def test_open_makes_a_large_buffer_its_own_mapping(tmp_path: Path) -> None:
    assert mapped_bytes_of_a_2_mib_buffer(tmp_path, "{}") >= 2 << 20


def test_zero_leaves_the_allocator_alone(tmp_path: Path) -> None:
    assert mapped_bytes_of_a_2_mib_buffer(tmp_path, "{'malloc_mmap_threshold': 0}") == 0
