"""logfs.core: the storage engine, no FUSE imports.

Nothing under this package may import pyfuse3, trio, pyspark, ``logfs.mount`` or ``logfs.cli``
(tests/project/test_layering.py enforces it).
"""
