"""What the read files of a partition hold, as pure functions and objects: no pyfuse3, no trio (the handlers in
``mount/reads.py`` and ``mount/follow.py`` call them from worker threads). ``views`` names the ranges and renders
``follow/`` and ``state``; ``rangeview`` plans and reads one ``at/``/``hw/``/``committed/`` range; ``rendersize``,
``segmentindex`` and ``renderspan`` are the rendered-size index under it; the batches come from the core's range
read (``core/log/rangeread.py``)."""
