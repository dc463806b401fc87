"""One partition's log on disk: segments, their .log files and indexes, loading, epochs, the high watermark,
retention."""
