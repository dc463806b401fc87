"""A consumer group's settings that logfs applies for it: ``auto.offset.reset`` and ``auto.commit.interval.ms``
(Kafka's consumer names and defaults), kept in ``.logfs-groups.json`` at the store's root.

Kafka keeps these in each consumer's configuration; logfs has no consumer process, so the group's ``follow`` files
apply them and the group's ``config`` file holds them. The file is this node's own (replaced atomically and
fsynced, like the store's other metadata files) and is not replicated: a follower's mount shows its own (the
defaults unless set there before it became a follower).

Threads: any; :meth:`GroupConfigs.set` blocks on the disk (a worker thread).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from logfs.core.durable import replace_file
from logfs.core.errors import ConfigError

GROUPS_CONFIG_FILE = ".logfs-groups.json"
AUTO_OFFSET_RESET = "auto.offset.reset"
AUTO_COMMIT_INTERVAL_MS = "auto.commit.interval.ms"
RESETS = ("earliest", "latest")
DEFAULTS = {AUTO_OFFSET_RESET: "latest", AUTO_COMMIT_INTERVAL_MS: "5000"}  # Kafka's consumer defaults
INTERVAL_MS_MAX = 2**31 - 1  # an int in Kafka


@dataclass(frozen=True, slots=True)
class GroupConfig:
    auto_offset_reset: str = "latest"
    auto_commit_interval_ms: int = 5000

    def render(self) -> bytes:
        lines = (
            f"{AUTO_OFFSET_RESET}={self.auto_offset_reset}",
            f"{AUTO_COMMIT_INTERVAL_MS}={self.auto_commit_interval_ms}",
        )
        return "".join(line + "\n" for line in lines).encode()


def parse_group_config(text: str, current: dict[str, str]) -> dict[str, str]:
    """``key=value`` lines applied over ``current``; ConfigError names the first bad line (nothing applied)."""
    out = dict(current)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = (part.strip() for part in line.partition("="))
        if not sep:
            raise ConfigError(f"line {number}: {line[:80]!r} is not key=value")
        if key == AUTO_OFFSET_RESET:
            if value not in RESETS:
                raise ConfigError(f"line {number}: {AUTO_OFFSET_RESET} must be earliest or latest, not {value!r}")
        elif key == AUTO_COMMIT_INTERVAL_MS:
            if not value.isascii() or not value.isdigit() or int(value) > INTERVAL_MS_MAX:
                raise ConfigError(f"line {number}: {AUTO_COMMIT_INTERVAL_MS} must be 0 to {INTERVAL_MS_MAX} ms")
            value = str(int(value))
        else:
            raise ConfigError(f"line {number}: a group has no setting {key!r} (only {AUTO_OFFSET_RESET}, "
                              f"{AUTO_COMMIT_INTERVAL_MS})")  # fmt: skip
        out[key] = value
    return out


class GroupConfigs:
    """Every group's settings (only those set differ from the defaults). Any thread."""

    def __init__(self, root: Path) -> None:
        self._path = root / GROUPS_CONFIG_FILE
        self._lock = threading.Lock()
        self._groups: dict[str, dict[str, str]] = {}
        try:
            loaded = json.loads(self._path.read_text())
        except FileNotFoundError:
            loaded = {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self._path}: {exc}") from exc
        if isinstance(loaded, dict):
            self._groups = {str(g): {str(k): str(v) for k, v in c.items()} for g, c in loaded.items()
                            if isinstance(c, dict)}  # fmt: skip

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def get(self, group: str) -> GroupConfig:
        with self._lock:
            values = {**DEFAULTS, **self._groups.get(group, {})}
        return GroupConfig(values[AUTO_OFFSET_RESET], int(values[AUTO_COMMIT_INTERVAL_MS]))

    def set(self, group: str, text: str) -> None:
        """Apply ``key=value`` lines to ``group``'s settings and make them durable. Blocks."""
        with self._lock:
            updated = parse_group_config(text, self._groups.get(group, {}))
            groups = {**self._groups, group: updated}
            replace_file(self._path, json.dumps(groups, sort_keys=True).encode())
            self._groups = groups

    def delete(self, group: str) -> None:
        """Forget ``group``'s settings (rmdir of the group). Blocks."""
        with self._lock:
            if group not in self._groups:
                return
            groups = {g: c for g, c in self._groups.items() if g != group}
            replace_file(self._path, json.dumps(groups, sort_keys=True).encode())
            self._groups = groups
