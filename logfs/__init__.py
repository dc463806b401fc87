"""logfs: Apache Kafka's log as a FUSE filesystem.

Three layers, each a subpackage, each importing only the layers below it:

``logfs.core`` (folder ``core/``)
    The storage engine: RecordBatch v2 codec, segments, offset indexes, the log. Files on disk are byte-compatible
    with a Kafka broker's log directory. Pure Python plus crc32c, cramjam and numpy; it never imports pyfuse3, trio
    or pyspark, so it can be used (and tested) without FUSE or Spark installed.

``logfs.mount`` (folder ``mount/``)
    The FUSE layer over ``logfs.core`` (pyfuse3 + trio): topics and partitions are directories, records are read
    and appended through files.

``logfs`` (folder ``logfs/``)
    The command line (``logfs.cli``), the follower daemon and the Spark data source, which wire the layers together.

This module stays light on purpose: importing ``logfs.core`` runs this file first, so nothing here may import a
subpackage or a third-party library.
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__: str = _metadata.version("logfs")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
