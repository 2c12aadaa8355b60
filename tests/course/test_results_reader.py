"""The grader's reader of a run's results: linear, bounded, and truthful about what went wrong.

The runner writes one signed JSON line per event to a pipe (tinyflo.course.grader.runner); the
grader reads them (engine._Reader). A run that sends values near the per-line limit must cost
the grader time and memory in proportion to what it sent, hold at most one line, keep to its
deadline, and be told why it was refused: a value too large, results past the run's budget, a
line not signed by the grader, or the grader's own line held back, repeated or moved.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
import time

import pytest

from tinyflo.course.grader import engine
from tinyflo.course.grader.engine import RunRecord, _Reader, run_job
from tinyflo.course.grader.grading import _why_task_failed
from tinyflo.course.grader.sandbox import Limits
from tinyflo.course.grader.tree import cached_tree

KEY = b"k" * 32
CHUNK = 1 << 20  # the most one read takes from the pipe


def _line(event: dict, key: bytes = KEY) -> bytes:
    data = json.dumps(event).encode()
    return data + b" " + hmac.digest(key, data, "sha256").hex().encode() + b"\n"


def _feed(parts: list[bytes], piece: int = 1 << 16, pause: float = 0) -> int:
    """A pipe fed by a thread with `parts`, written `piece` bytes at a time; its read end."""
    read_end, write_end = os.pipe()

    def write() -> None:
        try:
            with os.fdopen(write_end, "wb", buffering=0) as pipe:
                for part in parts:
                    view = memoryview(part)
                    while view:
                        view = view[pipe.write(view[:piece]) :]
                        time.sleep(pause)
        except OSError:  # the reader stopped and closed its end
            pass

    threading.Thread(target=write, daemon=True).start()
    return read_end


class _Counted(bytearray):
    """The reader's buffer, counting the bytes searched for a line's end."""

    scanned = 0

    def find(self, sub, start=0, *rest):
        _Counted.scanned += len(self) - start
        return super().find(sub, start, *rest)

    def __contains__(self, sub):
        _Counted.scanned += len(self)
        return super().__contains__(sub)


class _Watched(_Reader):
    """A reader whose buffer records the most it held and the bytes searched in it (whatever
    the reader does with it: it is swapped for a counting one at each assignment)."""

    held = 0

    @property
    def buffer(self):
        return self.__dict__["buffer"]

    @buffer.setter
    def buffer(self, value):
        if type(value) is not _Counted:
            value = _Counted(value)
        self.held = max(self.held, len(value))
        self.__dict__["buffer"] = value


def _events(reader: _Reader, timeout: float = 10) -> list:
    got = []
    while (event := reader.next(timeout)) not in ("eof", "bad", None):
        got.append(event)
    return got + [event]


def test_lines_near_the_limit_are_read_in_linear_work_holding_one_line(monkeypatch):
    monkeypatch.setattr(engine, "MAX_LINE", 4 << 20)
    monkeypatch.setattr(_Counted, "scanned", 0)
    big = "x" * ((4 << 20) - 200)
    lines = [_line({"t": "obs", "c": "t/1", "v": [big], "n": n}) for n in range(6)]
    cut = _line({"t": "end", "i": 0, "n": 6})[:10]  # a last line cut off by the run's end
    reader = _Watched(_feed([*lines, cut], piece=1 << 12), 1 << 30, KEY)  # a line in 1,000 writes
    got = _events(reader)
    assert [e["n"] for e in got[:-1]] == list(range(6)) and got[-1] == "eof"  # the end, no forgery
    assert got[0]["v"] == [big]  # reassembled from its pieces
    sent = sum(map(len, lines))
    assert _Counted.scanned <= 2 * sent, (_Counted.scanned, sent)  # each byte searched once
    assert reader.held <= (4 << 20) + CHUNK, reader.held


def test_a_line_over_the_limit_is_a_value_too_large_not_a_forgery(monkeypatch):
    monkeypatch.setattr(engine, "MAX_LINE", 1 << 20)
    reader = _Watched(_feed([_line({"t": "start", "i": 0, "n": 0}), b"y" * (3 << 20)]), 1 << 30, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "line"
    assert reader.held <= (1 << 20) + CHUNK, reader.held  # never the whole line


def test_a_line_past_the_limit_that_ends_in_the_same_read_is_too_large(monkeypatch):
    monkeypatch.setattr(engine, "MAX_LINE", 1000)
    reader = _Reader(_feed([_line({"t": "obs", "c": "t/1", "v": ["z" * 5000], "n": 0})]), 1 << 20, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "line"


def test_results_past_the_budget_are_said_as_such():
    lines = [_line({"t": "obs", "c": "t/1", "v": ["z" * 5000], "n": n}) for n in range(100)]
    reader = _Reader(_feed(lines), 100_000, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "results"


@pytest.mark.parametrize("stream", [
    _line({"t": "start", "i": 0, "n": 0}, key=b"w" * 32),  # signed with another key
    b'{"t": "done", "n": 0}\n',  # not signed at all
])
def test_a_line_not_signed_by_the_grader_is_a_forgery(stream):
    reader = _Reader(_feed([stream]), 1 << 20, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "events"


@pytest.mark.parametrize("numbers", [[1], [0, 0], [0, 2]])  # held back, repeated, left out
def test_a_signed_line_out_of_its_place_is_said_as_such(numbers):
    lines = [_line({"t": "start", "i": 0, "n": n}) for n in numbers]
    reader = _Reader(_feed(lines), 1 << 20, KEY)
    assert _events(reader)[-1] == "bad" and reader.problem == "order"


def test_bytes_dripping_in_do_not_hold_the_grader_past_its_deadline():
    # A byte every 20 ms for 8 s, then a line's end: the reader, given 0.5 s, stops waiting
    # at its deadline (it used to wait anew after each byte, until the line ended).
    reader = _Reader(_feed([b"x" * 400 + b"\n"], piece=1, pause=0.02), 1 << 20, KEY)
    try:
        assert reader.next(0.5) is None
    finally:
        reader.close()


def test_each_reason_is_its_own_message_to_the_student():
    said = {}
    for problem in ("line", "results", "events", "order"):
        outcome = engine.CellOutcome(started=True, stopped=problem)
        said[problem] = _why_task_failed(outcome, [], 60)
    assert "larger than the grader takes (16 MiB)" in said["line"]
    assert "more than the grader takes (32 MiB in all)" in said["results"]
    assert "not signed by the grader: your code wrote to it" in said["events"]
    assert "held back, repeated or moved" in said["order"] and len(set(said.values())) == 4


def test_a_value_too_large_fails_its_cell_and_the_next_cell_still_runs(demo_module, monkeypatch):
    """Through the real runner (outside the sandbox: the reader is what is tested)."""
    monkeypatch.setattr(engine, "MAX_LINE", 1 << 20)
    big = "import numpy as np\n__tf_check('a/1', [np.zeros(2**17) for _ in range(4)])"  # 4 MiB
    job = {
        "cells": [
            {"kind": "task", "task": "a", "source": big, "timeout": 60},
            {"kind": "task", "task": "b", "source": "__tf_check('b/1', 7)", "timeout": 60},
        ],
        "modes": {"a/1": ["value"], "b/1": ["value"]},
        "seeds": {},
    }
    record: RunRecord = run_job(job, cached_tree([demo_module], demo_module), Limits(), sandboxed=False)
    assert record.cells[0].stopped == "line" and "a/1" not in record.observations, record.to_json()
    assert record.cells[1].ended and record.observations["b/1"] == [[7]], record.to_json()
