"""One module per lesson, each registering its benchmarks with ``gpucourse.benchmarks.register``."""
