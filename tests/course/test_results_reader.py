"""The grader's reader of a run's results: linear, bounded, and truthful about what went wrong.

The runner writes one signed JSON line per event to a pipe (tinyflo.course.runner); the
grader reads them (engine._Reader). A run that sends values near the per-line limit must cost
the grader time and memory in proportion to what it sent, hold at most one line, and be told
why it was refused: a value too large, results past the run's budget, or a line that is not
the runner's.
"""

from __future__ import annotations

import hmac
import json
import os
import threading

import pytest

from tinyflo.course import engine
from tinyflo.course.engine import _Reader
from tinyflo.course.grading import _why_task_failed

KEY = b"k" * 32


def _line(event: dict, key: bytes = KEY) -> bytes:
    data = json.dumps(event).encode()
    return data + b" " + hmac.digest(key, data, "sha256").hex().encode() + b"\n"


def _feed(parts: list[bytes], piece: int = 1 << 16) -> int:
    """A pipe fed by a thread with `parts`, written `piece` bytes at a time; its read end."""
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as pipe:
            for part in parts:
                view = memoryview(part)
                while view:
                    view = view[pipe.write(view[:piece]):]

    threading.Thread(target=write, daemon=True).start()
    return read_end


class _Watched(_Reader):
    """A reader that records the most it held and how many bytes it searched for line ends."""

    def __init__(self, *args):
        super().__init__(*args)
        self.held = self.scanned = 0

    def _line(self):
        self.held = max(self.held, len(self.buffer))
        self.scanned += len(self.buffer) - self.searched
        return super()._line()


def _events(reader: _Reader) -> list:
    got = []
    while (event := reader.next(10)) not in ("eof", "bad", None):
        got.append(event)
    return got + [event]


def test_lines_near_the_limit_are_read_in_linear_work_holding_one_line(monkeypatch):
    monkeypatch.setattr(engine, "MAX_LINE", 4 << 20)
    big = "x" * ((4 << 20) - 200)
    lines = [_line({"t": "obs", "c": "t/1", "v": [big], "n": n}) for n in range(6)]
    reader = _Watched(_feed(lines, piece=1 << 12), 1 << 30, KEY)
    got = _events(reader)
    assert [e["n"] for e in got[:-1]] == list(range(6)) and got[-1] == "eof"
    sent = sum(map(len, lines))
    assert reader.scanned <= sent + len(lines) * _Reader.CHUNK, (reader.scanned, sent)  # each byte searched once
    assert reader.held <= (4 << 20) + _Reader.CHUNK, reader.held


def test_a_line_over_the_limit_is_a_value_too_large_not_a_forgery(monkeypatch):
    monkeypatch.setattr(engine, "MAX_LINE", 1 << 20)
    reader = _Watched(_feed([_line({"t": "start", "i": 0, "n": 0}), b"y" * (3 << 20)]), 1 << 30, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "line"
    assert reader.held <= (1 << 20) + 2 * _Reader.CHUNK, reader.held  # never the whole line


def test_results_past_the_budget_are_said_as_such():
    lines = [_line({"t": "obs", "c": "t/1", "v": ["z" * 5000], "n": n}) for n in range(100)]
    reader = _Reader(_feed(lines), 100_000, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "results"


@pytest.mark.parametrize("stream", [
    _line({"t": "start", "i": 0, "n": 0}, key=b"w" * 32),  # signed with another key
    _line({"t": "start", "i": 0, "n": 1}),  # a line held back before it
    b'{"t": "done", "n": 0}\n',  # not signed at all
])
def test_a_line_not_the_runners_is_a_forgery(stream):
    reader = _Reader(_feed([stream]), 1 << 20, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "events"


def test_a_line_cut_by_the_runs_end_is_the_end_not_a_forgery():
    whole = _line({"t": "start", "i": 0, "n": 0})
    reader = _Reader(_feed([whole, _line({"t": "end", "i": 0, "n": 1})[:10]]), 1 << 20, KEY)
    assert [e if isinstance(e, str) else e["t"] for e in _events(reader)] == ["start", "eof"]


def test_each_reason_is_its_own_message_to_the_student():
    said = {}
    for problem in ("line", "results", "events"):
        outcome = engine.CellOutcome(started=True, stopped=problem)
        said[problem] = _why_task_failed(outcome, [], 60)
    assert "larger than the grader takes (64 MiB)" in said["line"]
    assert "more than the grader takes (256 MiB in all)" in said["results"]
    assert "your code wrote to it" in said["events"] and len(set(said.values())) == 3
