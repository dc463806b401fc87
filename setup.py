"""The compiled part of logfs: one optional C extension (everything else is declared in pyproject.toml).

``logfs.core.format._walk`` (core/format/_walk.c) is the record walk of ``core/format/records.py`` in C (issue 14).
It is optional: an install without a C compiler or Python headers still works (``optional=True``: setuptools warns
and goes on), and logfs then uses the pure-Python reference walker, as it does with ``LOGFS_NO_CEXT=1`` set.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logfs.core.format._walk",
            sources=["core/format/_walk.c", "core/format/_walkjsonl.c", "core/format/_checkbatches.c",
                     "core/format/_walkheaders.c", "core/format/_textbatches.c", "core/format/_jsonlbatches.c",
                     "core/format/_jsonlnorm.c", "core/format/_checkstored.c"],
            depends=["core/format/_walk.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
