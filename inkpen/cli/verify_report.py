"""The report of ``inkpen verify``: figures per kind of object, and the damaged or missing ones.

As JSON (``--json``): ``url``, ``manifest_id`` and ``checkpoint`` (what was read; None when the
latest manifest itself is damaged), ``ok``, ``checked`` (per kind: ``objects``, ``ok`` and
``units``, the SST blocks or journal records read) and ``problems`` (``object``, ``kind``,
``status``, ``offset``, ``detail``). As text: the same, one line per kind and per problem.
"""

from __future__ import annotations

from typing import Any

from . import render
from .checks import Kind, Outcome, Status


def summary(
    url: str, manifest_id: int | None, checkpoint_id: str | None, outcomes: list[Outcome]
) -> dict[str, Any]:
    """The verify report as a JSON-friendly dict."""
    checked: dict[str, dict[str, int]] = {}
    for kind in Kind:
        mine = [o for o in outcomes if o.target.kind is kind and o.status is not Status.GONE]
        checked[kind.value] = {
            "objects": len(mine),
            "ok": sum(1 for o in mine if o.status is Status.OK),
            "units": sum(o.units for o in mine),
        }
    bad = [o for o in outcomes if o.status in (Status.DAMAGED, Status.MISSING)]
    return {
        "url": url,
        "manifest_id": manifest_id,
        "checkpoint": checkpoint_id,
        "ok": not bad,
        "checked": checked,
        "problems": [
            {
                "object": o.target.name,
                "kind": o.target.kind.value,
                "status": o.status.value,
                "offset": o.offset,
                "detail": o.detail,
            }
            for o in bad
        ],
    }


_UNITS = {
    Kind.MANIFEST.value: "",
    Kind.SST.value: "blocks",
    Kind.JOURNAL.value: "records",
    Kind.SEGMENT.value: "records",
}


def text_lines(report: dict[str, Any]) -> list[str]:
    """The verify report for people."""
    held = f"checkpoint {report['checkpoint']}, " if report["checkpoint"] else ""
    if report["manifest_id"] is None:
        read = "its latest manifest is damaged"
    else:
        read = f"{held}manifest {report['manifest_id']}"
    lines = [f"verified {report['url']} ({read})"]
    rows = []
    for kind, figures in report["checked"].items():
        unit = _UNITS[kind]
        units = f"{figures['units']:,} {unit}" if unit else ""
        rows.append([f"{kind}s", f"{figures['ok']} of {figures['objects']} intact", units])
    lines.extend(render.table(rows))
    for problem in report["problems"]:
        where = f" at offset {problem['offset']}" if problem["offset"] is not None else ""
        lines.append(f"{problem['status'].upper()} {problem['object']}{where}: {problem['detail']}")
    total = sum(f["objects"] for f in report["checked"].values())
    if report["ok"]:
        lines.append(f"result: all {total} objects intact")
    else:
        lines.append(f"result: {len(report['problems'])} of {total} objects damaged or missing")
    return lines
