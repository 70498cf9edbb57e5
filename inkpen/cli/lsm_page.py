"""The page ``inkpen lsm --html`` writes: one self-contained HTML file drawing a database.

Everything is inline (CSS, SVG drawn by a small script, the figures as JSON in the page): it
loads nothing from the network, so it can be mailed, attached to a ticket or opened offline. The
script draws from the JSON (:func:`inkpen.cli.lsm.survey`): the levels as SVG boxes (each SST a
``rect`` with ``data-kind="sst"``, ``data-level``, ``data-name`` and a ``title`` tooltip), the
journal strip (``data-kind="journal"``), the tables of checkpoints (``data-kind="checkpoint"``)
and feed cursors (``data-kind="cursor"``), then counts what it drew into ``#drawn``. Text from the
database (keys, names, owners) only ever reaches the page as JSON inside a
``<script type="application/json">`` and as text nodes or attributes set by the script.
"""

from __future__ import annotations

import html
import json
from typing import Any

from . import render

STYLE = """
:root { --ink: #1d2330; --muted: #5f6b7a; --line: #d8dde5; --paper: #fbfcfd; }
* { box-sizing: border-box; }
body { margin: 0; padding: 20px 28px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
  Roboto, "Liberation Sans", "DejaVu Sans", sans-serif; color: var(--ink);
  background: var(--paper); }
h1 { font-size: 22px; margin: 0 0 2px; }
h2 { font-size: 17px; margin: 26px 0 6px; border-bottom: 1px solid var(--line);
  padding-bottom: 3px; }
.url { font-family: ui-monospace, "DejaVu Sans Mono", monospace; color: var(--muted);
  word-break: break-all; margin: 0 0 10px; }
.facts { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0 4px; }
.fact { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 5px 10px; }
.fact b { display: block; font-size: 11px; font-weight: 600; color: var(--muted);
  text-transform: uppercase; letter-spacing: .04em; }
.fact span { font-size: 15px; font-variant-numeric: tabular-nums; }
.note { color: var(--muted); font-size: 12.5px; max-width: 1100px; margin: 4px 0; }
.controls { margin: 4px 0 6px; font-size: 13px; }
.controls label { margin-right: 14px; cursor: pointer; }
svg { display: block; width: 100%; height: auto; background: #fff; border: 1px solid var(--line);
  border-radius: 6px; }
svg text { font: 12px system-ui, "Liberation Sans", "DejaVu Sans", sans-serif; fill: var(--ink); }
svg text.small { font-size: 10.5px; fill: var(--muted); }
svg text.key { font: 10.5px ui-monospace, "DejaVu Sans Mono", monospace; fill: var(--muted); }
svg text.big { font-size: 15px; font-weight: 700; }
.sst { cursor: pointer; }
.sst:hover, .sst.lit { stroke: #111 !important; stroke-width: 1.5px !important; }
.dim { opacity: .18; }
table { border-collapse: collapse; margin: 6px 0; font-size: 12.5px; background: #fff; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f4f8; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 11.5px; }
tr[data-kind]:hover { background: #fff6d8; }
.expired { color: #b3261e; font-weight: 600; }
#detail { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; background: #fff;
  border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; min-height: 1.5em;
  white-space: pre-wrap; margin: 6px 0; }
#drawn { color: var(--muted); font-size: 12px; }
.legend { display: inline-block; width: 12px; height: 12px; vertical-align: -2px;
  border: 1px solid #999; margin: 0 4px 0 10px; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("lsm-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var W = 1240, LEFT = 200, RIGHT = 14, PW = W - LEFT - RIGHT;
  var COLORS = ["#e4572e", "#f3a712", "#2a9d8f", "#2f7fc1", "#6a4c93", "#8d6e63", "#c2185b",
                "#556b2f", "#00838f", "#5d4037"];

  function set(node, attrs) {
    for (var k in attrs) {
      if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, attrs[k]);
    }
    return node;
  }
  function svg(tag, attrs, parent) {
    var node = set(document.createElementNS(SVGNS, tag), attrs);
    if (parent) parent.appendChild(node);
    return node;
  }
  function text(parent, x, y, words, cls, anchor) {
    var t = svg("text", {x: x, y: y, "class": cls || null, "text-anchor": anchor || null}, parent);
    t.textContent = words;
    return t;
  }
  function tip(node, words) { svg("title", {}, node).textContent = words; }
  function el(tag, attrs, words, parent) {
    var node = set(document.createElement(tag), attrs);
    if (words !== null && words !== undefined) node.textContent = words;
    if (parent) parent.appendChild(node);
    return node;
  }
  function size(n) {
    if (n === null || n === undefined) return "?";
    var units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], v = n, i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return i === 0 ? v + " B" : v.toFixed(1) + " " + units[i];
  }
  function num(n) { return n === null || n === undefined ? "-" : n.toLocaleString("en-US"); }
  function when(t) {
    if (t === null || t === undefined) return "never";
    return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }
  function color(level) { return COLORS[level % COLORS.length]; }

  // -- the header ----------------------------------------------------------------------------
  document.getElementById("url").textContent = data.url;
  var facts = document.getElementById("facts");
  function fact(label, value) {
    var box = el("div", {"class": "fact"}, null, facts);
    el("b", {}, label, box);
    el("span", {}, value, box);
  }
  fact("manifest", num(data.manifest_id) + " (format " + data.format_version + ")");
  fact("writer epoch", num(data.writer_epoch) + " (" + data.writer_compaction + " compaction)");
  fact("compactor epoch", num(data.compactor_epoch));
  fact("persisted SQN", num(data.persisted_sqn));
  fact("ledger", num(data.ledger.files) + " SSTs, " + size(data.ledger.bytes));
  fact("journal", num(data.journal.files) + " files, " + size(data.journal.bytes) +
       " + " + num(data.journal.segments) + " segments");
  fact("checkpoints", num(data.checkpoints.length));
  fact("feed cursors", num(data.cursors.length));
  if (data.head_only) fact("head-only", data.head_only);
  if (data.parent) {
    fact("clone of", data.parent.root + " (checkpoint " + data.parent.checkpoint_id + ")");
  }
  if (data.destroyed_at !== null) fact("destroyed", when(data.destroyed_at));
  fact("looked at", data.looked_at);

  // -- the levels ----------------------------------------------------------------------------
  var levelsSvg = document.getElementById("levels");
  var detail = document.getElementById("detail");
  var biggest = 1, widest = 1;
  data.levels.forEach(function (level) {
    widest = Math.max(widest, level.bytes);
    level.ssts.forEach(function (s) { biggest = Math.max(biggest, s.size); });
  });

  function describeSst(level, s) {
    return s.name + "\n" + "L" + level.level + ", " + size(s.size) + ", " + num(s.entries) +
      " entries (" + num(s.tombstones) + " tombstones)" +
      (s.inherited ? ", inherited from the parent" : "") +
      "\nkeys " + s.first + "  ..  " + s.last + "\nSQN " + num(s.min_sqn) + "-" + num(s.max_sqn);
  }

  function drawLevels(view) {
    while (levelsSvg.firstChild) levelsSvg.removeChild(levelsSvg.firstChild);
    var y = 14;
    if (!data.levels.length) {
      text(levelsSvg, 16, 30, "The ledger holds no SST yet.");
      y = 50;
    }
    data.levels.forEach(function (level) {
      var lane = level.level === 0 ? 20 : 42;
      var lanes = view === "keys" && level.level === 0 ? Math.max(1, level.lanes) : 1;
      var height = Math.max(38, lanes * lane);
      var row = svg("g", {"data-kind": "level", "data-level": level.level,
                          "data-files": level.files}, levelsSvg);
      svg("rect", {x: LEFT, y: y, width: PW, height: height, fill: "#f6f8fa"}, row);
      text(row, 12, y + 16, "L" + level.level, "big");
      var words = num(level.files) + (level.files === 1 ? " file, " : " files, ") +
        size(level.bytes);
      text(row, 48, y + 16, words);
      if (level.level === 0) {
        text(row, 12, y + 32, "depth " + level.depth + " (most L0 files one key is in)", "small");
      } else if (level.min_sqn !== null) {
        text(row, 12, y + 32, "SQN " + num(level.min_sqn) + "-" + num(level.max_sqn), "small");
      }
      var offset = LEFT + (PW - PW * level.bytes / widest) / 2;
      level.ssts.forEach(function (s) {
        var x, w, h, top;
        if (view === "keys") {
          x = LEFT + s.x0 * PW;
          w = Math.max(1.5, (s.x1 - s.x0) * PW);
          h = Math.max(3, (lane - 4) * s.size / biggest);
          top = y + s.lane * lane + (lane - 2 - h);
        } else {
          x = offset;
          w = Math.max(0.5, PW * s.size / widest);
          offset += PW * s.size / widest;
          h = lane - 4;
          top = y + 2;
        }
        var box = svg("rect", {
          "class": "sst", x: x.toFixed(2), y: top.toFixed(2), width: w.toFixed(2),
          height: h.toFixed(2), fill: color(level.level), "fill-opacity": s.inherited ? 0.45 : 0.85,
          stroke: w > 4 ? "#fff" : "none", "stroke-width": 0.6,
          "data-kind": "sst", "data-level": level.level, "data-name": s.name, "data-size": s.size,
          "data-first": s.first, "data-last": s.last, "data-min-sqn": s.min_sqn,
          "data-max-sqn": s.max_sqn
        }, row);
        tip(box, describeSst(level, s));
        box.addEventListener("click", function () { detail.textContent = describeSst(level, s); });
      });
      y += height + 8;
    });
    if (view === "keys" && data.levels.length) {
      svg("line", {x1: LEFT, x2: LEFT + PW, y1: y, y2: y, stroke: "#98a2b3"}, levelsSvg);
      data.key_span.ticks.forEach(function (t, i) {
        var x = LEFT + t.x * PW;
        svg("line", {x1: x, x2: x, y1: y, y2: y + 5, stroke: "#98a2b3"}, levelsSvg);
        var anchor = t.x < 0.02 ? "start" : (t.x > 0.98 ? "end" : "middle");
        var label = t.key.length > 46 ? t.key.slice(0, 45) + "\u2026" : t.key;
        text(levelsSvg, x, y + 17 + (i % 2) * 13, label, "key", anchor);
      });
      text(levelsSvg, 12, y + 17, "key span", "small");
      y += 40;
    } else if (data.levels.length) {
      text(levelsSvg, LEFT, y + 14, "Widths: bytes, against the largest level (" +
           size(widest) + "); boxes in key order, L0 newest first.", "small");
      y += 24;
    }
    levelsSvg.setAttribute("viewBox", "0 0 " + W + " " + y);
  }

  // -- the journal ---------------------------------------------------------------------------
  var journal = data.journal;
  var files = journal.file_list;
  var journalSvg = document.getElementById("journal-strip");
  function drawJournal() {
    var total = journal.segment_bytes;
    files.forEach(function (f) { total += f.size; });
    var top = 54, height = 48, y = top + height;
    if (!total) {
      text(journalSvg, 16, 30, "The journal holds nothing yet.");
      journalSvg.setAttribute("viewBox", "0 0 " + W + " 50");
      return;
    }
    var scale = PW / total, x = LEFT, spans = [];
    var defs = svg("defs", {}, journalSvg);
    var hatch = svg("pattern", {id: "dead", width: 6, height: 6, patternUnits: "userSpaceOnUse",
                                patternTransform: "rotate(45)"}, defs);
    svg("rect", {width: 6, height: 6, fill: "#f4d7d3"}, hatch);
    svg("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#d0665a", "stroke-width": 2}, hatch);
    text(journalSvg, 12, top + 20, "journal files", "big");
    text(journalSvg, 12, top + 38, "in SQN order, width by bytes", "small");
    files.forEach(function (f) {
      var w = Math.max(1, f.size * scale);
      var g = svg("g", {"data-kind": "journal", "data-name": f.name, "data-size": f.size,
                        "data-live-bytes": f.live_bytes, "data-dead-bytes": f.dead_bytes,
                        "data-min-sqn": f.min_sqn, "data-max-sqn": f.max_sqn}, journalSvg);
      if (f.live_bytes === null) {
        svg("rect", {x: x, y: top, width: w, height: height, fill: "#c9ced6"}, g);
      } else {
        var live = height * (f.size ? f.live_bytes / f.size : 1);
        svg("rect", {x: x, y: top, width: w, height: height - live, fill: "url(#dead)"}, g);
        svg("rect", {x: x, y: top + height - live, width: w, height: live, fill: "#3b8d5a"}, g);
      }
      if (w > 4) svg("rect", {x: x, y: top, width: w, height: height, fill: "none",
                              stroke: "#fff", "stroke-width": 0.8}, g);
      var share = f.live_bytes === null ? "live unknown" :
        "live ~" + size(f.live_bytes) + ", dead ~" + size(f.dead_bytes) + " (" +
        num(f.sampled) + " records sampled)";
      tip(g, f.name + "\n" + size(f.size) + ", " + num(f.entries) + " entries, SQN " +
          num(f.min_sqn) + "-" + num(f.max_sqn) + "\n" + share +
          (f.in_ledger ? "\nbulk-loaded" : ""));
      spans.push({lo: f.min_sqn, hi: f.max_sqn, x: x, w: w});
      x += f.size * scale;
    });
    var segmentsAt = x;
    if (journal.segments) {
      var sw = Math.max(3, journal.segment_bytes * scale);
      var g = svg("g", {"data-kind": "segments", "data-count": journal.segments}, journalSvg);
      svg("rect", {x: x, y: top, width: sw, height: height, fill: "#7d8fb3"}, g);
      tip(g, journal.segments + " unrolled segments (" + journal.first_segment + "-" +
          journal.last_segment + "), " + size(journal.segment_bytes) + ", " +
          journal.fence_segments + " fences: the newest writes, not rolled into a file yet");
    }
    function sqnX(sqn) {
      for (var i = 0; i < spans.length; i++) {
        var s = spans[i];
        if (sqn < s.lo) return s.x;
        if (sqn <= s.hi) return s.x + s.w * (s.hi > s.lo ? (sqn - s.lo) / (s.hi - s.lo) : 1);
      }
      return segmentsAt;
    }
    var marks = [{sqn: data.persisted_sqn, label: "ledger persisted SQN " + num(data.persisted_sqn),
                  color: "#333"}];
    data.cursors.forEach(function (c) {
      marks.push({sqn: c.sqn,
                  label: "cursor " + c.name + " @ " + num(c.sqn) + (c.live ? "" : " (expired)"),
                  color: c.live ? "#6a4c93" : "#b3261e"});
    });
    marks.forEach(function (m, i) {
      var mx = sqnX(m.sqn), ly = 14 + (i % 3) * 13;
      svg("line", {x1: mx, x2: mx, y1: ly + 3, y2: y + 4, stroke: m.color, "stroke-width": 1.5,
                   "stroke-dasharray": "4 2"}, journalSvg);
      var anchor = mx > LEFT + PW * 0.8 ? "end" : "start";
      var t = text(journalSvg, mx + (anchor === "end" ? -3 : 3), ly, m.label, "small", anchor);
      t.setAttribute("style", "fill:" + m.color);
    });
    var ly2 = y + 18;
    text(journalSvg, LEFT, ly2, "live ~" + size(journal.live_bytes) + ", dead ~" +
         size(journal.dead_bytes) + " of " + size(journal.bytes) + " in files; " +
         size(journal.segment_bytes) + " in " + num(journal.segments) + " segments", "small");
    journalSvg.setAttribute("viewBox", "0 0 " + W + " " + (ly2 + 10));
  }

  function journalTable() {
    var body = document.getElementById("journal-rows");
    files.forEach(function (f) {
      var tr = el("tr", {"data-row": "journal", "data-name": f.name}, null, body);
      el("td", {"class": "mono"}, f.name + (f.in_ledger ? " (bulk)" : ""), tr);
      el("td", {"class": "num"}, num(f.min_sqn) + "-" + num(f.max_sqn), tr);
      el("td", {"class": "num"}, size(f.size), tr);
      el("td", {"class": "num"}, num(f.entries), tr);
      el("td", {"class": "num"}, f.live_bytes === null ? "?" : size(f.live_bytes), tr);
      el("td", {"class": "num"}, f.dead_bytes === null ? "?" : size(f.dead_bytes), tr);
      el("td", {"class": "num"}, f.live_bytes === null || !f.size ? "?" :
         (100 * f.live_bytes / f.size).toFixed(0) + "%", tr);
    });
    if (files.length > 30) document.getElementById("journal-table").removeAttribute("open");
  }

  // -- checkpoints and feed cursors ----------------------------------------------------------
  function highlight(ssts, journalNames) {
    var keep = {}, j = {};
    (ssts || []).forEach(function (n) { keep[n] = true; });
    (journalNames || []).forEach(function (n) { j[n] = true; });
    levelsSvg.querySelectorAll('[data-kind="sst"]').forEach(function (r) {
      var on = keep[r.getAttribute("data-name")];
      r.classList.toggle("lit", !!on && ssts !== null);
      r.classList.toggle("dim", !on && ssts !== null);
    });
    journalSvg.querySelectorAll('[data-kind="journal"]').forEach(function (g) {
      g.classList.toggle("dim", journalNames !== null && !j[g.getAttribute("data-name")]);
    });
  }
  function clear() { highlight(null, null); }

  function checkpointTable() {
    var body = document.getElementById("checkpoint-rows");
    if (!data.checkpoints.length) {
      el("td", {colspan: 8}, "none", el("tr", {}, null, body));
    }
    data.checkpoints.forEach(function (cp) {
      var p = cp.pins;
      var tr = el("tr", {"data-kind": "checkpoint", "data-id": cp.id,
                         "data-manifest": cp.manifest_id}, null, body);
      el("td", {"class": "mono"}, cp.id, tr);
      el("td", {}, (cp.kind || "-") + (cp.name ? " \u00b7 " + cp.name : ""), tr);
      el("td", {"class": "num"}, num(cp.manifest_id), tr);
      el("td", {}, when(cp.create_time), tr);
      el("td", cp.live ? {} : {"class": "expired"},
         (cp.live ? "" : "EXPIRED ") + when(cp.expire_time), tr);
      el("td", {"class": "num"}, p ? "\u2264 " + num(p.persisted_sqn) + " in SSTs" +
         (p.journal_max_sqn !== null ? ", \u2264 " + num(p.journal_max_sqn) + " in files" : "") +
         (p.segments ? ", segments " + p.segments[0] + "-" + p.segments[1] : "") : "?", tr);
      el("td", {"class": "num"}, p ? num(p.ssts) + " SSTs + " + num(p.journal_files) +
         " journal files, " + size(p.bytes) : "its manifest is gone", tr);
      el("td", {"class": "num"}, p ? num(p.gone_files) + " files, " + size(p.gone_bytes) : "?", tr);
      if (p) {
        tr.addEventListener("mouseenter", function () { highlight(p.sst_names, p.journal_names); });
        tr.addEventListener("mouseleave", clear);
      }
    });
  }

  function cursorTable() {
    var body = document.getElementById("cursor-rows");
    if (!data.cursors.length) {
      el("td", {colspan: 6}, "none", el("tr", {}, null, body));
    }
    data.cursors.forEach(function (c) {
      var tr = el("tr", {"data-kind": "cursor", "data-name": c.name, "data-sqn": c.sqn}, null,
                  body);
      el("td", {"class": "mono"}, c.name + (c.floor ? " (floor)" : ""), tr);
      el("td", {"class": "num"}, num(c.sqn), tr);
      el("td", c.live ? {} : {"class": "expired"}, (c.live ? "" : "EXPIRED ") + when(c.expires),
         tr);
      el("td", {}, c.owner || "-", tr);
      el("td", {"class": "num"}, num(c.holds.journal_files) + " journal files, " +
         size(c.holds.bytes) + " + " + num(c.holds.segments) + " segments, " +
         size(c.holds.segment_bytes), tr);
      el("td", {}, when(c.advanced), tr);
      tr.addEventListener("mouseenter", function () { highlight(null, c.holds.journal_names); });
      tr.addEventListener("mouseleave", clear);
    });
  }

  // -- draw, then say what was drawn ----------------------------------------------------------
  var view = location.hash === "#bytes" ? "bytes" : "keys";  // lsm.html#bytes: the pyramid
  drawLevels(view);
  document.querySelectorAll('input[name="view"]').forEach(function (radio) {
    radio.checked = radio.value === view;
    radio.addEventListener("change", function () { drawLevels(radio.value); });
  });
  drawJournal();
  journalTable();
  checkpointTable();
  cursorTable();
  document.getElementById("sample").textContent = String(journal.sample);
  document.getElementById("persisted").textContent = num(data.persisted_sqn);
  if (journal.live_unknown) {
    document.getElementById("unknown").textContent = " (" + journal.live_unknown + ")";
  }

  var perLevel = data.levels.map(function (level) {
    return levelsSvg.querySelectorAll('[data-kind="sst"][data-level="' + level.level + '"]').length;
  });
  var drawn = document.getElementById("drawn");
  var counts = {
    ssts: document.querySelectorAll('[data-kind="sst"]').length,
    journal: document.querySelectorAll('[data-kind="journal"]').length,
    checkpoints: document.querySelectorAll('[data-kind="checkpoint"]').length,
    cursors: document.querySelectorAll('[data-kind="cursor"]').length
  };
  drawn.setAttribute("data-ssts", counts.ssts);
  drawn.setAttribute("data-levels", perLevel.join(","));
  drawn.setAttribute("data-journal-files", counts.journal);
  drawn.setAttribute("data-checkpoints", counts.checkpoints);
  drawn.setAttribute("data-cursors", counts.cursors);
  function many(n, one, more) { return n + " " + (n === 1 ? one : more); }
  drawn.textContent = "Drew " + many(counts.ssts, "SST", "SSTs") + " (" +
    perLevel.map(function (n, i) { return "L" + i + " " + n; }).join(", ") + "), " +
    many(counts.journal, "journal file", "journal files") + ", " +
    many(counts.checkpoints, "checkpoint", "checkpoints") + " and " +
    many(counts.cursors, "feed cursor", "feed cursors") + ".";
})();
"""

BODY = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>inkpen lsm: {title}</title>
<style>{style}</style>
</head>
<body>
<h1>inkpen lsm</h1>
<p class="url" id="url">{title}</p>
<noscript><p><b>This page draws with JavaScript (inline, nothing is fetched): allow it to see
the picture.</b></p></noscript>
<div class="facts" id="facts"></div>

<h2>Ledger levels</h2>
<div class="controls">Place SSTs by:
<label><input type="radio" name="view" value="keys" checked> key range</label>
<label><input type="radio" name="view" value="bytes"> bytes (the pyramid; or open the page
as <code>FILE#bytes</code>)</label></div>
<svg id="levels" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1240 60"></svg>
<p class="note">Each box is one SST. By key range: it spans the keys from its first to its last,
over the database's key span (keys are bytes: a key's place is its bytes read as the digits of a
fraction, each position in the base of the different bytes the SSTs' first and last keys have
there, so a prefix they all share takes no room and numbered keys spread as their numbers do);
its height is its bytes against the largest SST. L0 files may overlap and are drawn in
lanes, newest first; L0's <i>depth</i> is the most L0 files one key is in (a read may look in
each). By bytes: each box is as wide as its bytes, against the largest level. Lighter boxes are
inherited from a clone's parent. Hover for name, size, key range and SQNs; click to show them
below.</p>
<div id="detail">Click an SST to see it here.</div>

<h2>Journal</h2>
<svg id="journal-strip" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1240 60"></svg>
<p class="note"><span class="legend" style="background:#3b8d5a"></span>live
<span class="legend" style="background:#f4d7d3"></span>dead
<span class="legend" style="background:#c9ced6"></span>unknown<span id="unknown"></span>
<span class="legend" style="background:#7d8fb3"></span>unrolled segments</p>
<p class="note"><b>Live</b> is what journal compaction would keep: up to <span id="sample"></span>
records of each journal file are sampled and judged by compaction's own rules against the ledger
as its SSTs hold it (SQN up to <span id="persisted"></span>); a file's live bytes are its size
times the kept share of its sample's bytes, so they are an estimate. A record is dead when a
newer write replaced or deleted its object (or it expired) and no index entry needs it any more;
records above the persisted SQN count as live, as the SSTs cannot judge them yet. Feed cursors
hold back compaction of everything above their SQN whatever it is (dashed lines).</p>
<details id="journal-table" open><summary>Journal files</summary>
<table><thead><tr><th>file</th><th>SQNs</th><th>size</th><th>entries</th><th>live</th>
<th>dead</th><th>live %</th></tr></thead><tbody id="journal-rows"></tbody></table></details>

<h2>Checkpoints</h2>
<p class="note">A checkpoint pins one manifest: GC keeps that manifest and every file it names
while the checkpoint lives. "Gone from the latest" counts the files only checkpoints still hold.
Hover a row to light the SSTs and journal files it pins that the latest manifest still has.</p>
<table><thead><tr><th>id</th><th>kind / name</th><th>manifest</th><th>created</th>
<th>expires</th><th>SQNs it reads</th><th>files pinned</th><th>gone from the latest</th></tr>
</thead><tbody id="checkpoint-rows"></tbody></table>

<h2>Feed cursors</h2>
<p class="note">A feed cursor is how far one change-feed consumer has read. While it lives,
journal compaction keeps every change above its SQN: the files it holds are those with changes
above it (the lowest live cursor, the <i>floor</i>, is the one that binds). Hover a row to light
them.</p>
<table><thead><tr><th>name</th><th>SQN</th><th>expires</th><th>owner</th><th>holds</th>
<th>last advanced</th></tr></thead><tbody id="cursor-rows"></tbody></table>

<p id="drawn"></p>
<script type="application/json" id="lsm-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def embedded_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element (no ``<``, ``>`` or ``&``)."""
    text = json.dumps(render.plain(value), separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(found: dict[str, Any]) -> str:
    """The whole page for the figures of :func:`inkpen.cli.lsm.survey`."""
    return BODY.format(
        title=html.escape(found["url"]),
        style=STYLE,
        data=embedded_json(found),
        script=SCRIPT,
    )
