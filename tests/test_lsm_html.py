"""``inkpen lsm``: the page it writes, opened in a real headless Chromium, draws what the manifest
holds; the text picture says the same; neither changes the database.

The database has several ledger levels (tiny SSTs), many journal files with dead bytes (values
written again, kept in the journal rather than the ledger), a named checkpoint, a feed cursor,
and a writer that stopped as a crash would (unrolled segments and its writer checkpoint left
behind). The oracle is the latest manifest as inkpen's manifest layer reads it. The page's
script draws every box from the JSON inside the page, so a box in the dumped DOM is one the
script drew.

Chromium is Debian's ``chromium`` package, which ``scripts/test`` installs when it runs as root;
without it the browser tests are skipped, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import inkpen
from inkpen.cli.lsm import KeyAxis, l0_shape
from inkpen.manifest.model import Manifest, SstDescriptor
from support.cli import error_line, fails, latest_manifest, ok
from support.engine import TINY

BROWSER_TIMEOUT = 120.0
OBJECTS = 600
BATCH = 25


def chromium() -> str:
    """The Chromium binary; skips the test without one (fails it under CI=true)."""
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None
    )
    if found is None:
        reason = (
            "no Chromium: install the Debian package chromium (scripts/test does as root) to run "
            "the browser test"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; under CI=true it must run")
        pytest.skip(reason)
    return found


def browse(page: Path, profile: Path, *extra: str) -> str:
    """Run headless Chromium on ``page`` with ``extra`` arguments; answers its stdout."""
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *extra,
        page.as_uri(),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"chromium exit {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


class Drawn(HTMLParser):
    """The elements of a DOM that carry ``data-kind``, and the attributes of ``#drawn``."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[dict[str, str]] = []
        self.summary: dict[str, str] = {}
        self.titles: dict[str, str] = {}
        self._titled: str | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if "data-kind" in found:
            self.kinds.append(found)
            if found["data-kind"] == "sst":
                self._titled = found["data-name"]
        if found.get("id") == "drawn":
            self.summary = found
        if tag == "title" and self._titled is not None:
            self._in_title = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            self._titled = None

    def handle_data(self, data: str) -> None:
        if self._in_title and self._titled is not None:
            self.titles[self._titled] = self.titles.get(self._titled, "") + data

    def of(self, kind: str) -> list[dict[str, str]]:
        return [found for found in self.kinds if found["data-kind"] == kind]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The database described in the module docstring."""
    url = str(tmp_path_factory.mktemp("lsm") / "db")
    value = b"v" * 60
    # inline_value_bytes=0: every value stays in the journal, so the values written again
    # leave dead bytes there (a small value in the ledger leaves only its key behind)
    with inkpen.open(url, **{**TINY, "inline_value_bytes": 0}) as book:
        for start in range(0, OBJECTS, BATCH):
            batch = inkpen.Batch()
            for i in range(start, start + BATCH):
                batch.put("users", f"user{i:05d}", value, indexes=[("add", "city_bin", "Oslo")])
            book.write(batch)
        for start in range(0, OBJECTS, 3 * BATCH):  # dead values in the early journal files
            batch = inkpen.Batch()
            for i in range(start, start + BATCH):
                batch.put("users", f"user{i:05d}", b"w" * 60)
            book.write(batch)
        book.checkpoint(3600, name="nightly")
        book.create_feed_cursor("exporter", OBJECTS // 2, owner="the lsm test")
    book = inkpen.open(url, **{**TINY, "roll_segments": 1_000_000, "roll_bytes": 1 << 30})
    try:
        for i in range(3):
            book.put("late", f"k{i}", b"late")
    finally:
        book.abandon()  # as a crash: segments unrolled, the writer checkpoint left behind
    return url


def _oracle(url: str) -> tuple[int, Manifest]:
    manifest_id, manifest = latest_manifest(url)
    assert len(manifest.ledger.levels) >= 3, "the database was to have several levels"
    assert len(manifest.journal.files) > 1
    assert len(manifest.checkpoints) >= 2 and manifest.feed_cursors
    return manifest_id, manifest


def test_the_page_draws_every_sst_journal_file_checkpoint_and_cursor(
    db: str, tmp_path: Path
) -> None:
    before = _tree(Path(db))
    page = tmp_path / "lsm.html"
    said = ok("lsm", db, "--html", str(page)).out
    assert _tree(Path(db)) == before, "inkpen lsm changed the database"
    manifest_id, manifest = _oracle(db)
    source = page.read_text(encoding="utf-8")
    assert f"wrote {page}" in said
    # self-contained: nothing to fetch (the SVG namespace is a name, not an address)
    assert not re.search(r"<link|<img|<iframe|\bsrc=|@import|url\(\s*['\"]?(https?:|//)", source)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", source)

    drawn = Drawn()
    drawn.feed(browse(page, tmp_path / "profile", "--dump-dom"))
    levels = manifest.ledger.levels
    ssts = drawn.of("sst")
    for depth, level in enumerate(levels):
        boxes = [box for box in ssts if box["data-level"] == str(depth)]
        assert sorted(box["data-name"] for box in boxes) == sorted(s.name for s in level), depth
    assert len(ssts) == manifest.sst_count()
    assert drawn.summary["data-levels"] == ",".join(str(len(level)) for level in levels)
    assert drawn.summary["data-ssts"] == str(manifest.sst_count())

    journal = drawn.of("journal")
    assert [box["data-name"] for box in journal] == [f.name for f in manifest.journal.files]
    assert drawn.summary["data-journal-files"] == str(len(manifest.journal.files))
    dead = 0
    for box, descriptor in zip(journal, manifest.journal.files, strict=True):
        live, gone = int(box["data-live-bytes"]), int(box["data-dead-bytes"])
        assert live >= 0 and gone >= 0 and live + gone == descriptor.size
        dead += gone
    assert dead > 0, "the values written again left no dead bytes in the journal"
    assert len(drawn.of("segments")) == 1, "the crashed writer's unrolled segments are drawn"

    checkpoints = drawn.of("checkpoint")
    assert sorted(row["data-id"] for row in checkpoints) == sorted(
        cp.id for cp in manifest.checkpoints
    )
    assert {row["data-id"]: int(row["data-manifest"]) for row in checkpoints} == {
        cp.id: cp.manifest_id for cp in manifest.checkpoints
    }
    cursors = drawn.of("cursor")
    assert {row["data-name"]: int(row["data-sqn"]) for row in cursors} == {
        c.name: c.sqn for c in manifest.feed_cursors
    }
    assert drawn.summary["data-checkpoints"] == str(len(manifest.checkpoints))
    assert drawn.summary["data-cursors"] == str(len(manifest.feed_cursors))

    some: SstDescriptor = levels[-1][0]
    tooltip = drawn.titles[some.name]
    assert some.name in tooltip and f"L{len(levels) - 1}" in tooltip
    assert f"SQN {some.min_sqn:,}-{some.max_sqn:,}" in tooltip and "keys " in tooltip

    embedded = re.search(r'id="lsm-data">(.*?)</script>', source, re.S)
    assert embedded is not None
    data = json.loads(embedded.group(1))
    assert data["manifest_id"] == manifest_id
    assert data["writer_epoch"] == manifest.writer_epoch
    assert data["compactor_epoch"] == manifest.compactor_epoch


def test_the_page_renders_to_a_screenshot(db: str, tmp_path: Path) -> None:
    page = tmp_path / "lsm.html"
    ok("lsm", db, "--html", str(page))
    shot = tmp_path / "lsm.png"
    browse(page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1400")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1400, 1400)
    assert len(data) > 20_000, "the screenshot is all but blank"


def test_the_text_picture_has_a_line_per_level_and_changes_nothing(db: str) -> None:
    before = _tree(Path(db))
    out = ok("lsm", db).lines
    assert _tree(Path(db)) == before
    _, manifest = _oracle(db)
    for depth, level in enumerate(manifest.ledger.levels):
        (line,) = [line for line in out if line.split()[:1] == [f"L{depth}"]]
        assert line.split()[1] == str(len(level)) and line.rstrip().endswith("|")
    assert any(line.startswith(f"epochs        writer {manifest.writer_epoch}") for line in out)
    journal = next(line for line in out if line.startswith("journal"))
    assert f"{len(manifest.journal.files)} files" in journal and "live ~" in journal
    for cp in manifest.checkpoints:
        assert any(cp.id in line for line in out)
    assert any(line.strip().startswith("exporter  SQN") for line in out)


def test_a_page_that_cannot_be_written_is_refused(db: str, tmp_path: Path) -> None:
    before = _tree(Path(db))
    missing = error_line(fails(2, "lsm", db, "--html", str(tmp_path / "no" / "lsm.html")))
    assert "--html" in missing and "not a directory" in missing
    assert "--html" in error_line(fails(2, "lsm", db, "--html", str(tmp_path)))  # a directory
    too_long = error_line(fails(1, "lsm", db, "--html", str(tmp_path / ("x" * 300))))
    assert "name too long" in too_long.lower()
    assert _tree(Path(db)) == before


def test_the_key_axis_keeps_order_and_spreads_numbered_keys_evenly() -> None:
    keys = [b"o\x00users\x00\x00user%05d\x00\x00" % i for i in range(0, 1000, 10)]
    axis = KeyAxis([*keys, b"i-first", b"r-last"])
    places = [axis.position(k) for k in keys]
    assert places == sorted(places) and len(set(places)) == len(places)
    assert axis.position(b"i-first") == 0.0 and axis.position(b"r-last") == 1.0
    gaps = [b - a for a, b in itertools.pairwise(places)]
    assert max(gaps) < 2 * min(gaps), "numbered keys sharing a long prefix spread evenly"
    span = places[-1] - places[0]
    assert places[50] - places[0] == pytest.approx(span * 500 / 990)  # as their numbers do
    assert 0.0 < axis.position(b"o\x00users\x00\x00user00005") < places[1]  # between neighbours


def test_l0_depth_is_the_most_files_one_key_is_in() -> None:
    def sst(name: str, first: bytes, last: bytes) -> SstDescriptor:
        return SstDescriptor(name, first, last, 1, 1, 100, 1, 0)

    files = [sst("a", b"a", b"f"), sst("b", b"g", b"k"), sst("c", b"c", b"h"), sst("d", b"d", b"e")]
    lanes, depth = l0_shape(files)
    assert depth == 3  # d, c and a all hold "d"
    assert lanes == [0, 0, 1, 2]
    assert l0_shape([]) == ([], 0)
