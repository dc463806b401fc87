"""``logfs groups MOUNT [--group G]``: consumer groups and their lag, as ``kafka-consumer-groups --describe`` prints
them, read from the mount's ``.logfs/groups/<group>/lag`` files (docs/mount.md, "Consumer groups").

Columns: GROUP, TOPIC, PARTITION, CURRENT-OFFSET (the committed offset), LOG-END-OFFSET (the high watermark: what
Kafka's tool shows, the end a consumer can read to), LAG (LOG-END-OFFSET − CURRENT-OFFSET), and CONSUMER-ID, HOST,
CLIENT-ID as ``-`` (logfs has no group members). Groups print in name order, each partition in (topic, partition)
order; a group without commits prints no rows.

Threads: any; blocks on the mount.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from logfs.admin import AdminError, BadArgument, check_mount
from logfs.core.errors import InvalidGroupId
from logfs.core.names import validate_group_id

GROUPS_DIR = Path(".logfs") / "groups"
HEADER = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")


@dataclass(frozen=True, slots=True)
class LagRow:
    group: str
    topic: str
    partition: int
    committed: int
    high_watermark: int
    log_end_offset: int
    lag: int


def read_lag(mount: Path, group: str) -> list[LagRow]:
    """A group's ``lag`` file, parsed (``<topic> <partition> <committed> <hw> <leo> <lag>`` lines)."""
    rows = []
    for line in (mount / GROUPS_DIR / group / "lag").read_text().splitlines():
        topic, partition, committed, hw, leo, lag = line.rsplit(" ", 5)
        rows.append(LagRow(group, topic, int(partition), int(committed), int(hw), int(leo), int(lag)))
    return rows


def describe(mount: Path, group: str | None = None) -> list[LagRow]:
    """Every group's rows (or ``group``'s: BadArgument for a name outside the group-id rules, core/names.py;
    AdminError when the mount lists no such group)."""
    check_mount(mount)
    if group is not None:
        try:
            validate_group_id(group)
        except InvalidGroupId as exc:
            raise BadArgument(str(exc)) from None
    groups = sorted(p.name for p in (mount / GROUPS_DIR).iterdir())
    if group is not None:
        if group not in groups:
            raise AdminError(f"consumer group {group!r} does not exist")
        groups = [group]
    return [row for g in groups for row in read_lag(mount, g)]


def format_rows(rows: list[LagRow]) -> str:
    """The table, columns padded as kafka-consumer-groups pads them; "" when there are no rows."""
    if not rows:
        return ""
    table = [HEADER] + [
        (r.group, r.topic, str(r.partition), str(r.committed), str(r.high_watermark), str(r.lag), "-", "-", "-")
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    lines = (" ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table)
    return "".join(line + "\n" for line in lines)
