"""Kafka's log cleaner (LogCleaner.scala): compaction of topics with ``cleanup.policy=compact``.

One module per idea, as Kafka's cleaner is split into its parts:

* ``logcleaner.py``: the cleaner itself: which log is the dirtiest (``LogCleanerManager``), one pass over it, the
  cleaner's gauges;
* ``clean.py``: one cleaning round of a log: the offset map of its dirty section, then each merge of segments
  filtered into one cleaned segment and swapped in;
* ``merge.py``: which segments one round merges into one (``groupSegmentsBySize``);
* ``offsetmap.py``: the key → last offset map (``SkimpyOffsetMap``);
* ``scan.py``: the records of a range of batches as columns, for the map and the filter;
* ``filtering.py``: which records and batches a cleaned segment keeps (``RecordFilter``);
* ``transactions.py``: what the cleaner knows of transactions while it walks (``CleanedTransactionMetadata``);
* ``swap.py``: the crash-safe swap of cleaned segments into the log (``.cleaned``, ``.swap``, ``.deleted``);
* ``check.py``: what ``logfs check`` verifies of a compacted log;
* ``throttler.py``: the cleaner's I/O limit (``log.cleaner.io.max.bytes.per.second``).
"""
