"""Progress of a long job over bytes: MB/s and an ETA, as a bar on a
terminal (the stream's isatty) and as a log line every few seconds
otherwise."""

import logging
import sys
import threading
import time

logger = logging.getLogger("bertzoo.data")


class Progress:
    """MB/s and ETA: a bar on a terminal, a log line every `interval` s
    otherwise."""

    def __init__(self, total, done=0, interval=10.0, stream=None):
        self.total, self.base, self.done = max(1, total), done, done
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = 0.2 if self.tty else interval
        self.started = self.last = time.monotonic()

    def line(self):
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (self.done - self.base) / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = f"{int(left) // 60}m{int(left) % 60:02d}s" if left == left else "?"
        share = min(1.0, self.done / self.total)
        return (
            share,
            f"{share:6.1%} {self.done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB {rate / 1e6:.2f} MB/s ETA {eta}",
        )

    def update(self, done, force=False):
        self.done = max(self.done, done)
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        share, text = self.line()
        if self.tty:
            bar = "#" * int(share * 30)
            self.stream.write(f"\rpreparing [{bar:<30}] {text}")
            self.stream.flush()
        else:
            logger.info("preparing: %s", text)

    def close(self):
        self.update(self.total, force=True)
        if self.tty:
            self.stream.write("\n")


class LocalCounter:
    """`multiprocessing.Value`'s interface, for work done in this process."""

    def __init__(self):
        self.value = 0
        self._lock = threading.Lock()

    def get_lock(self):
        return self._lock
