"""Progress lines: a moving line with an estimate on a terminal, one line per finished stage in a pipe."""

import io

import tensoropt_py as to
from tensoropt_py.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_terminal_shows_moving_progress_with_estimate_and_engine_counters():
    out = _Terminal()
    to.frontier("small_transformer", "cpu-1x4", devices=4, cache=False, progress=Progress(True, out))
    text = out.getvalue()
    assert "\r\033[K" in text  # one line rewritten in place
    tracking = [part for part in text.split("\r\033[K") if part.startswith("track:") and "%" in part]
    assert tracking and all("s left" in part and "points" in part for part in tracking)
    assert "track: done in" in text and "build: done in" in text


def test_pipe_gets_only_finished_stages_and_none_when_disabled():
    out = io.StringIO()
    to.frontier("mlp", "cpu-1x4", devices=4, cache=False, progress=Progress(None, out))
    assert out.getvalue() == ""  # not a terminal and not asked for: silent
    p = Progress(True, out)
    to.frontier("mlp", "cpu-1x4", devices=4, cache=False, progress=p)
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["build", "track", "peaks"]
    assert all("done in" in line for line in lines)
