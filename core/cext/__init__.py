"""The compiled helpers: one optional C extension, ``logfs.core.cext._helpers``, and the one switch that selects it.

The C files beside this one (issue 14, 16, 23; moved here and named for what they do by issue 25) are compiled by
setup.py into one extension module. Every helper is a hot loop of a Python function that stays the reference and
the fallback: the helper gives the same answer on every input (or, for the batch checks and ``jsonl_batches``,
declines, and the reference decides), and tests hold the two equal whatever ``LOGFS_NO_CEXT`` says.

This module is the one place that loads the extension and reads ``LOGFS_NO_CEXT``:

* :data:`CEXT`: the extension module, or None when it was not built (no C compiler at install time: setup.py
  declares it ``optional``, and logfs then runs on the references alone).
* :data:`USE_CEXT`: whether the product uses it; ``LOGFS_NO_CEXT=1`` in the environment selects the references (CI's
  second pytest pass does, and ``logfs_compiled_helpers`` in ``.logfs/metrics`` says which serves a mount). Modules
  that take the switch at import bind it (``from logfs.core.cext import CEXT, USE_CEXT``); those that follow a change
  made at run time by a test (the record walk and the stored-batch renderers) read ``cext.USE_CEXT`` at each call.

Each helper, its Python reference, the tests that hold them equal; below each: its C file, what it replaces, its
caller.

helper                Python reference (module:function)              tests that hold them equal
====================  ==============================================  ==================================================
walk                  logfs.core.format.records:walk_python           tests/core/format/test_walk_cext.py
    recordwalk.c; replaces the per-record loop of one records section (validation, the columns, the headers); called
    by records.walk_c, which records.walk picks
walk_sections         logfs.core.format.records:walk_python           tests/core/format/test_walk_cext.py
                      (batch by batch, client=False)                  tests/core/compaction/test_cleaner_bulk_filter.py
    recordwalk.c; replaces walking the stored batches of a read or of a cleaner's chunk one by one; called by
    numpywalk.walk_stored_c (the renderers, the Spark decoder) and core/log/cleaner/scan.py
header_lists          logfs.core.format.records:walk_python           tests/spark/test_spark_arrow.py
                      (its headers)
    recordwalk.c; replaces walking again for the headers of records walked by walk_sections (Python lists); called
    by logfs/spark/arrow.py
render_jsonl          logfs.core.format.render:jsonl_from_columns     tests/core/format/test_walk_cext.py
    jsonlrender.c; replaces the per-record JSON-lines loop of storedjsonl.py; called by storedjsonl.jsonl_compiled
jsonl_sizes           logfs.core.format.render:jsonl_from_columns     tests/core/format/test_walk_cext.py
                      (the length of each line)
    jsonlrender.c; replaces rendering a .jsonl file to learn its size; called by storedjsonl.jsonl_sizes_compiled
    (storedsize.py)
header_columns        logfs.spark.arrow:_headers                      tests/spark/test_spark_arrow.py
                      (Python lists, from header_lists)
    headercolumns.c; replaces a Python list per record for Arrow's headers column; called by arrow._walked_headers
check_client_batches  logfs.core.log.appendcheck:check_leader_batch   tests/core/log/test_check_batches_cext.py
                      (validate.validate_batch, client=True)
    clientcheck.c; replaces checking a request's producer batches one by one (header rules, CRC, the record walk,
    timestamps); called by validate.check_plain_batches
text_batches          logfs.core.format.lines:encode_text_batches     tests/core/format/test_text_batches.py
    textbatches.c; replaces splitting an append write into a bytes object per line and encoding each record; called
    by lines.encode_text_run
jsonl_batches         logfs.core.format.lines:encode_jsonl_lines      tests/core/format/test_jsonl_batches.py
    jsonlbatches.c, each line by jsonlnorm.c; replaces orjson's parse and dump of each append.jsonl line and the
    record encoding; called by lines.encode_jsonl_run (None: the reference takes the whole write)
check_stored          logfs.core.log.batchcheck:scan_python           tests/core/format/test_stored_batch_check.py
    storedcheck.c; replaces the per-batch loop of the read-side check of stored batches (length, magic, CRC-32C,
    offsets, epochs); it is batchcheck.scan when selected
====================  ==============================================  ==================================================

Besides these, tests/mount/test_cext_differential.py holds the product equal through two real mounts (one with
``LOGFS_NO_CEXT=1``), every view and every stored byte compared; docs/records.md ("The compiled helper") tells the
story. What the C files share is in helpers.h; the module's table of functions is at the end of recordwalk.c; the
types are in _helpers.pyi.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    """The compiled helpers, or None when they were not built (no compiler at install time)."""
    try:
        from logfs.core.cext import _helpers
    except ImportError:
        return None
    return _helpers


# CEXT: the compiled helpers when built; USE_CEXT: whether logfs uses them (LOGFS_NO_CEXT=1 in the environment
# selects the pure-Python references, as CI's second pass of the record-format tests does).
CEXT = _load()
USE_CEXT = CEXT is not None and not os.environ.get("LOGFS_NO_CEXT")
