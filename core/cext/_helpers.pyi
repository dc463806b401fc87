# Types of the compiled helpers, logfs.core.cext._helpers (core/cext/*.c: see each file's opening comment for what each
# function returns, and core/cext/__init__.py for which file holds it).
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
def jsonl_sizes(
    data: bytes | bytearray | memoryview, lead: bytes, columns: tuple[Any, ...], n: int, out: Any, /
) -> None: ...
def header_lists(
    data: bytes | bytearray | memoryview, positions: Any, counts: Any, n: int, /
) -> list[list[tuple[str, bytes | None]] | None]: ...
def check_client_batches(
    batches: list[Any],
    start: int,
    out: list[Any],
    crc: Any,
    decompress: Any,
    max_message_bytes: int,
    segment_bytes: int,
    log_append: bool,
    now: int,
    before: int,
    after: int,
    /,
) -> int: ...
def header_columns(
    data: bytes | bytearray | memoryview,
    positions: Any,
    counts: Any,
    n: int,
    key_pos: Any,
    key_len: Any,
    value_pos: Any,
    value_len: Any,
    /,
) -> None: ...
def text_batches(
    head: bytes | bytearray | memoryview,
    data: bytes | bytearray | memoryview,
    end: int,
    budget: int,
    per: int,
    overhead: int,
    /,
) -> list[tuple[bytearray, int]]: ...
def jsonl_batches(
    head: bytes | bytearray | memoryview,
    data: bytes | bytearray | memoryview,
    end: int,
    budget: int,
    per: int,
    overhead: int,
    /,
) -> list[tuple[bytearray, int]] | None: ...
def check_stored(
    buf: bytes | bytearray | memoryview,
    position: int,
    span_end: int,
    min_base: int = 0,
    first_max_last: int = ...,
    max_last: int = ...,
    epochs: bytes = b"",
    /,
) -> tuple[int, int, int, int]: ...
