"""The compiled part of logfs: one optional C extension (everything else is declared in pyproject.toml).

``logfs.core.cext._helpers`` (core/cext/*.c) holds the compiled helpers: the record walk of ``core/format/records.py``,
the .jsonl renderer, the client and stored batch checks, text and JSON lines to batches (issues 14, 16, 25; the
docstring of core/cext/__init__.py lists each helper and its Python reference). It is optional: an install without a
C compiler or Python headers still works (``optional=True``: setuptools warns and goes on), and logfs then uses the
pure-Python references, as it does with ``LOGFS_NO_CEXT=1`` set.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logfs.core.cext._helpers",
            sources=["core/cext/recordwalk.c", "core/cext/jsonlrender.c", "core/cext/clientcheck.c",
                     "core/cext/headercolumns.c", "core/cext/textbatches.c", "core/cext/jsonlbatches.c",
                     "core/cext/jsonlnorm.c", "core/cext/storedcheck.c"],
            depends=["core/cext/helpers.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
