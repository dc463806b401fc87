# Types of the compiled record walker, core/format/_walk.c (see its opening comment for what each returns).
from typing import Any

def walk(
    data: bytes | bytearray | memoryview,
    start: int,
    end: int,
    count: int,
    last_offset_delta: int,
    client: bool,
    columns: bool,
    as_lists: bool,
    /,
) -> tuple[Any, ...]: ...
def walk_sections(data: bytes | bytearray | memoryview, sections: Any, out: Any, /) -> None: ...
def render_jsonl(data: bytes | bytearray | memoryview, lead: bytes, columns: tuple[Any, ...], n: int, /) -> bytes: ...
def header_lists(
    data: bytes | bytearray | memoryview, positions: Any, counts: Any, n: int, /
) -> list[list[tuple[str, bytes | None]] | None]: ...
