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

import sys as _sys
from importlib import machinery as _machinery
from importlib import metadata as _metadata
from pathlib import Path as _Path

try:
    __version__: str = _metadata.version("logfs")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]


class _SourceTreeFinder:
    """Finds ``logfs.core`` and ``logfs.mount`` in the folders ``core/`` and ``mount/`` beside this one.

    Why: the source tree keeps the three layers in three top-level folders (``logfs/``, ``core/``, ``mount/``) that
    an install maps to one package. A Python started in the checkout puts the checkout first on ``sys.path``, so
    ``import logfs`` finds the bare folder ``logfs/``, which has no ``core/`` inside, and every import of
    ``logfs.core`` used to fail there (in Spark's Python workers too). This finder, installed only when this file
    runs from a source tree, answers for exactly those two names; everything below them is found through their
    ``__path__`` as usual. It imports nothing, so ``import logfs`` stays light.
    """

    def __init__(self, root: _Path) -> None:
        self._folders = {"logfs.core": root / "core", "logfs.mount": root / "mount"}

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> _machinery.ModuleSpec | None:
        folder = self._folders.get(fullname)
        if folder is None:
            return None
        init = folder / "__init__.py"
        spec = _machinery.PathFinder.find_spec(fullname, [str(folder.parent)])
        if spec is None or spec.origin != str(init):
            # PathFinder looks for the last part of the name ("core") in the folder given: right for both names.
            return None
        return spec

    def invalidate_caches(self) -> None:
        pass


def _install_source_tree_finder() -> None:
    here = _Path(__file__).absolute().parent  # not resolve(): a strict editable install links this file
    root = here.parent
    in_source_tree = (root / "pyproject.toml").is_file() and (root / "core" / "__init__.py").is_file()
    if (here / "core").is_dir() or not in_source_tree:
        return  # an installed package (wheel or strict editable link tree) holds core/ and mount/ itself
    if not any(isinstance(finder, _SourceTreeFinder) for finder in _sys.meta_path):
        _sys.meta_path.insert(0, _SourceTreeFinder(root))


_install_source_tree_finder()
