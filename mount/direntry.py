"""A directory entry that lists a name without looking it up.

pyfuse3 answers every readdir with READDIRPLUS, where each entry is also a lookup: the kernel makes an inode of it
with the attributes sent, and forgets it later with a FORGET request. For a file that is costly: its attributes must
be exact (a ``state`` file is rendered, an ``hw/`` file's size needs its records walked), and its inode outlives the
listing. An ``ls -R`` or ``find`` of 10,000 partitions needs none of that: it reads each name and its type, and only
descends into directories.

The FUSE protocol has a way to say so. An entry of a READDIRPLUS answer whose node id is 0 is listed (its name, the
inode number of its dirent and its type) and nothing more: "zero nodeid does not mean ENOENT. Instead, it only means
the userspace filesystem did not want to return attributes/handle for this entry" (Linux, fs/fuse/readdir.c,
``fuse_direntplus_link``). The first stat or open of such a name is then an ordinary LOOKUP, answered with exact
attributes at that moment. libfuse sends the node id (``fuse_entry_param.ino``) and the dirent's inode number
(``attr.st_ino``) as two fields, but pyfuse3's ``EntryAttributes.st_ino`` sets both at once and has no setter for
the node id alone. :func:`listed_only` writes the node id in place, in the object's own ``fuse_entry_param``, and
only after :func:`_node_id_offset` has checked, once, on a probe object, that the layout is the one expected (the
node id first, the dirent's inode number in the ``struct stat`` after it, and pyfuse3's getter reading the word
written). Where the check fails (another pyfuse3 build), :func:`listed_only` returns None and the caller sends
full attributes, as before: slower, never wrong.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import stat
import sys

import pyfuse3

_log = logging.getLogger(__name__)

_PROBE = 0x5A17_0DD1_7E57_0B1E  # an inode number no mount allocates: two words of a probe carry it
_HEAD = object.__basicsize__  # a Cython extension object's fields start after the PyObject header
_WORD = 8


@functools.cache
def _node_id_offset() -> int | None:
    """Where ``fuse_entry_param.ino`` (the node id) lies in an ``EntryAttributes``, when the layout checks out."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != _WORD:
        return None
    probe = pyfuse3.EntryAttributes()
    probe.st_ino = _PROBE
    probe.st_mode = stat.S_IFREG | 0o444
    size = type(probe).__basicsize__
    words = [ctypes.c_uint64.from_address(id(probe) + off).value for off in range(_HEAD, size - _WORD + 1, _WORD)]
    # fuse_entry_param: ino, generation, then struct stat (st_dev, st_ino, …): the probe value at words 0 and 3
    if len(words) < 4 or words[0] != _PROBE or words[3] != _PROBE or words.count(_PROBE) != 2:
        _log.info("pyfuse3's EntryAttributes has another layout: listings carry full attributes")
        return None
    ctypes.c_uint64.from_address(id(probe) + _HEAD).value = 0
    if probe.st_ino != 0 or ctypes.c_uint64.from_address(id(probe) + _HEAD + 3 * _WORD).value != _PROBE:
        return None
    return _HEAD


def listed_only(inode: int, mode: int) -> pyfuse3.EntryAttributes | None:
    """A READDIRPLUS entry that lists a name (dirent inode number ``inode``, the type of ``mode``) without a lookup;
    None when pyfuse3's layout is not the one :func:`_node_id_offset` knows. ``inode`` must not be 0: glibc's
    readdir skips such entries."""
    offset = _node_id_offset()
    if offset is None:
        return None
    attr = pyfuse3.EntryAttributes()
    attr.st_ino = inode
    attr.st_mode = mode
    ctypes.c_uint64.from_address(id(attr) + offset).value = 0
    return attr


__all__ = ["listed_only"]
