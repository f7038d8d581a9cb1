"""Progress of long computations on stderr: a line that moves on a terminal, rate-limited log lines otherwise.

A computation reports ``(stage, fraction, elapsed)`` whenever it knows more; between reports a
heartbeat thread keeps the elapsed time moving (every second on a terminal, every
``log_interval`` seconds through a pipe), with an estimate of the time left once a fraction is known.
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["Progress"]


class Progress:
    """A progress reporter: call it as ``progress(stage, fraction, elapsed, detail="")``.

    Parameters
    ----------
    enabled : bool or None
        None: report only when ``stream`` is a terminal.
    stream : file, optional
        Where to write (default ``sys.stderr``).
    log_interval : float
        Seconds between heartbeat lines when ``stream`` is not a terminal.
    prefix : str
        Put before every line (e.g. the model and device count).

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> p = Progress(enabled=True, stream=out)
    >>> p("track", 0.0, 0.0); p("track", 1.0, 2.0); p.close()
    >>> out.getvalue().splitlines()[-1]
    'track: done in 2.0 s'
    """

    def __init__(self, enabled: bool | None = None, stream=None, *, log_interval: float = 15.0, prefix: str = ""):
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = self.tty if enabled is None else bool(enabled)
        self.interval = 1.0 if self.tty else float(log_interval)
        self.prefix = prefix
        self._lock = threading.Lock()
        self._stage = None
        self._fraction = 0.0
        self._detail = ""
        self._started = 0.0
        self._stop = threading.Event()
        self._thread = None

    def __call__(self, stage: str, fraction: float, elapsed: float, detail: str = "") -> None:
        if not self.enabled:
            return
        with self._lock:
            if fraction >= 1.0:
                self._stage = None
                self._emit(f"{stage}: done in {elapsed:.1f} s", final=True)
                return
            if stage != self._stage:
                self._stage, self._started = stage, time.perf_counter() - elapsed
            self._fraction = float(fraction)
            self._detail = detail
            if self.tty:  # through a pipe only the heartbeat and the end of a stage are written
                self._emit(self._line())
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    def _line(self) -> str:
        elapsed = time.perf_counter() - self._started
        text = f"{self._stage}: {elapsed:.0f} s"
        if self._fraction > 0:
            left = elapsed * (1 - self._fraction) / self._fraction
            text += f", {100 * self._fraction:.0f}%, about {left:.0f} s left"
        return text + (f" ({self._detail})" if self._detail else "")

    def _emit(self, text: str, final: bool = False) -> None:
        text = self.prefix + text
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if self._stage is not None:
                    self._emit(self._line())

    def close(self) -> None:
        """Stop the heartbeat."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
