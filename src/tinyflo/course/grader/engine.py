"""Run a grading job (a notebook's cells and scenarios) in the sandbox, within its limits.

The runner (tinyflo.course.grader.runner) sends events on a pipe; this side reads them with a byte
cap, stops a cell that runs past its time (the runner says where the student's code was),
and starts the runner again after the stopped cell, with the code that looped marked so that
a later cell calling it fails at once instead of waiting out its own limit. A notebook has a
time budget on top of the limit per cell. Nothing a submission writes is read from disk.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinyflo.course.grader.runner import MAX_LINE, SHOWN_MESSAGE
from tinyflo.course.grader.sandbox import (
    CONTAINER,
    Limits,
    kill_leftovers,
    remove_leftovers,
    runner_command,
)

GRACE = 3.0  # seconds past a cell's limit before the grader kills the runner itself
MAX_RESTARTS = 20


@dataclass
class CellOutcome:
    """What happened to one cell of a job."""

    started: bool = False
    ended: bool = False
    raised: dict | None = None  # {"type", "mro", "message", "at"}
    timeout: list | None = None  # where the student's code was: [cell, line, first line] or None
    skipped: list | None = None  # looped code it called
    # Why it did not finish: "budget", "crash", or why its results were refused (_Reader.problem).
    stopped: str | None = None


@dataclass
class RunRecord:
    """Everything a run of a job sent, as data, per cell and per check."""

    cells: list[CellOutcome]
    observations: dict[str, list[Any]] = field(default_factory=dict)  # check id -> records
    reached: dict[str, int] = field(default_factory=dict)
    problem: str | None = None  # the run as a whole went wrong (for the grader, not the student)

    def to_json(self) -> dict:
        return {
            "cells": [vars(cell) for cell in self.cells],
            "observations": self.observations,
            "reached": self.reached,
            "problem": self.problem,
        }

    @classmethod
    def from_json(cls, data: dict) -> RunRecord:
        return cls(
            [CellOutcome(**cell) for cell in data["cells"]],
            data["observations"],
            data["reached"],
            data.get("problem"),
        )


class _Reader:
    """Events from the runner's pipe, one JSON object a line signed with the run's key, within a
    byte budget.

    Linear in what arrives: bytes are appended to one buffer and each is searched for the end of
    its line once. It holds at most one line (MAX_LINE) and one chunk: a line longer than that
    ends the run, as the budget does. `problem` says why a run's results were refused: "line"
    (one value too large), "results" (the budget), "events" (a line not signed with the run's
    key: the submission's code wrote to the pipe), "order" (a signed line held back, repeated
    or moved).
    """

    CHUNK = 1 << 20

    def __init__(self, fd: int, budget: int, key: bytes):
        self.fd = fd
        self.key = key
        self.number = 0  # the runner numbers its lines from 0
        self.budget = budget
        self.buffer = bytearray()
        self.searched = 0  # bytes of the buffer known to hold no newline
        self.closed = False
        self.problem: str | None = None
        self.selector = selectors.DefaultSelector()
        self.selector.register(fd, selectors.EVENT_READ)

    def _line(self) -> bytes | None:
        end = self.buffer.find(b"\n", self.searched)
        if end < 0:
            self.searched = len(self.buffer)
            return None
        with memoryview(self.buffer) as view:  # one copy of the line, not a slice and a copy
            line = bytes(view[:end])
        del self.buffer[: end + 1]
        self.searched = 0
        return line

    def next(self, timeout: float) -> dict | None | str:
        """An event; None at the deadline; "eof"; "bad" for a line that is not an event (`problem`
        says why)."""
        # One deadline for the whole line: bytes dripping in must not keep the grader waiting
        # past it, one wait at a time.
        deadline = time.monotonic() + timeout
        while (line := self._line()) is None:
            if self.closed:
                return "eof"
            if len(self.buffer) > MAX_LINE:
                self.problem = "line"
                return "bad"
            if not self.selector.select(max(deadline - time.monotonic(), 0)):
                return None
            chunk = os.read(self.fd, self.CHUNK)
            if not chunk:
                self.closed = True  # a last line without its end was cut off by the run's end
                continue
            self.budget -= len(chunk)
            if self.budget < 0:
                self.problem = "results"
                return "bad"
            self.buffer += chunk
        if len(line) > MAX_LINE:  # it ended within the chunk that took it past the limit
            self.problem = "line"
            return "bad"
        data, _, tag = line.rpartition(b" ")
        expected = hmac.digest(self.key, data, "sha256").hex().encode()
        if not hmac.compare_digest(tag, expected):
            self.problem = "events"  # not written by the runner: the submission's code wrote to the pipe
            return "bad"
        try:
            event = json.loads(data)
        except ValueError:
            self.problem = "events"
            return "bad"
        if not isinstance(event, dict) or event.get("n") != self.number:
            self.problem = "order"  # the runner's line, but held back, repeated or moved
            return "bad"
        self.number += 1
        return event

    def close(self) -> None:
        self.selector.close()
        os.close(self.fd)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            process.kill()
    process.wait()


def run_job(
    job: dict,
    tree: Path,
    limits: Limits,
    sandboxed: bool | str = True,
    slot: int = 0,
) -> RunRecord:
    """Run `job` (see tinyflo.course.grader.runner) until every cell ran, was stopped or the budget
    ran out; restarts the runner after a cell that had to be stopped."""
    cells = job["cells"]
    record = RunRecord([CellOutcome() for _ in cells])
    budget_end = time.monotonic() + limits.notebook_timeout
    results_left = limits.results
    tripwires: list[list] = []
    start = 0
    for _ in range(MAX_RESTARTS):
        if start >= len(cells):
            break
        outcome = _one_run(
            dict(job, start=start, tripwires=tripwires),
            tree,
            limits,
            sandboxed,
            slot,
            record,
            budget_end,
            results_left,
        )
        current, results_left, looped, finished = outcome
        if finished:
            break
        if current is None and start > 0:
            # The code crashed again while the cells before `start` ran once more for their
            # definitions: what was graded stands, the rest cannot run.
            for later in record.cells[start:]:
                later.stopped = later.stopped or "crash"
            break
        if current is None:
            record.problem = record.problem or "the runner stopped before running any cell"
            break
        if record.cells[current].stopped == "budget":
            for later in record.cells[current + 1 :]:
                later.stopped = "budget"
            break
        if looped:
            tripwires.append([f"<cell {looped[0]}>", looped[2]])
        start = current + 1
    else:
        record.problem = "the runner had to be restarted too often"
    return record


def _one_run(
    job: dict,
    tree: Path,
    limits: Limits,
    sandboxed: bool | str,
    slot: int,
    record: RunRecord,
    budget_end: float,
    results_left: int,
) -> tuple[int | None, int, list | None, bool]:
    """One runner process; returns (the cell it was in when it ended, result bytes left,
    where the code looped, whether it finished the job)."""
    read_end, write_end = os.pipe()
    with tempfile.TemporaryDirectory(prefix="tinyflo-run-") as scratch:
        argv, env, cwd = runner_command(tree, write_end, limits, slot, sandboxed, scratch)
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_end,),
            env=env or None,
            cwd=cwd if sandboxed is True else scratch,
            start_new_session=True,
        )
        os.close(write_end)
        key = secrets.token_bytes(32)  # a new one for each process: lines cannot be replayed
        payload = json.dumps(dict(job, key=key.hex())).encode()

        def feed() -> None:
            try:
                process.stdin.write(payload)
                process.stdin.close()
            except OSError:
                pass

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        reader = _Reader(read_end, results_left, key)
        current: int | None = None
        deadline = budget_end
        looped = None
        finished = False
        start = job["start"]
        try:
            while True:
                now = time.monotonic()
                wait = min(deadline, budget_end) - now
                event = reader.next(wait)
                if event is None:  # past the cell's limit (and the runner did not say so) or budget
                    if current is not None:
                        cell = record.cells[current]
                        if time.monotonic() >= budget_end:
                            cell.stopped = "budget"
                        elif cell.timeout is None:
                            cell.timeout = []
                    break
                if event == "eof":
                    if current is not None and not record.cells[current].ended:
                        cell = record.cells[current]
                        if time.monotonic() >= deadline - GRACE and cell.timeout is None:
                            cell.timeout = []  # the runner's watchdog ended it past the cell's limit
                        elif cell.timeout is None:
                            cell.stopped = cell.stopped or "crash"
                    break
                if event == "bad":
                    if current is not None:
                        record.cells[current].stopped = reader.problem
                    break
                kind = event.get("t")
                index = event.get("i")
                if kind == "done":
                    finished = True
                    break
                if kind in ("start", "end", "raised", "timeout", "skipped"):
                    if not isinstance(index, int) or not 0 <= index < len(record.cells):
                        continue
                    if index < start:
                        continue  # a cell before the restart point, run again for its definitions
                    cell = record.cells[index]
                if kind == "start":
                    current = index
                    cell.started = True
                    timeout = job["cells"][index]["timeout"]
                    deadline = time.monotonic() + timeout + GRACE
                elif kind == "end":
                    cell.ended = True
                    deadline = budget_end
                elif kind == "raised":
                    cell.raised = {
                        "type": one_line(event.get("type"), 100),
                        "mro": [str(n)[:200] for n in event.get("mro", [])][:50]
                        if isinstance(event.get("mro"), list)
                        else [],
                        "message": one_line(event.get("message"), SHOWN_MESSAGE),
                        "at": _place(event.get("at")),
                    }
                elif kind == "timeout":
                    cell.timeout = _place(event.get("at")) or []
                    looped = _place(event.get("at"))
                    break
                elif kind == "skipped":
                    cell.skipped = _place(event.get("at")) or []
                elif kind == "obs" and current is not None and current >= start:
                    check = event.get("c")
                    if isinstance(check, str) and len(check) < 200:
                        record.observations.setdefault(check, []).append(event.get("v"))
                elif kind == "reached" and current is not None and current >= start:
                    check = event.get("c")
                    if isinstance(check, str) and len(check) < 200:
                        record.reached[check] = record.reached.get(check, 0) + 1
        finally:
            _kill(process)
            if sandboxed == CONTAINER:
                kill_leftovers(slot)  # no pid namespace ends what it left behind in a session of its own
                remove_leftovers(slot)  # nor a tmpfs of its own what it left in /tmp; its working folder too
            reader.close()
            feeder.join(1)
        if current is not None and record.cells[current].timeout is not None and looped is None:
            looped = record.cells[current].timeout or None
        return current, max(reader.budget, 0), looped, finished


def one_line(value: Any, limit: int) -> str:
    """A text the run sent, as one line of at most `limit` characters ('' for anything else)."""
    if not isinstance(value, str):
        return ""
    # Control and format characters (a terminal's escape sequences, a right-to-left override)
    # are shown as their escapes: the text reaches terminals and pages.
    text = " ".join("".join(ch if ch.isprintable() or ch.isspace() else ascii(ch)[1:-1] for ch in value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _place(value: Any) -> list | None:
    """[cell, line, first line of its function] as the runner sent it, checked."""
    if (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, int) and 0 <= v < 10**7 for v in value)
    ):
        return value
    return None
