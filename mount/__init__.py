"""logfs.mount: the FUSE layer over logfs.core (pyfuse3 + trio).

Of logfs itself, modules here import only ``logfs.core`` (tests/project/test_layering.py enforces it).
"""
