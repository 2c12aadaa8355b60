"""The semester in one file, course.toml: due dates, extensions, the late penalty, the exchange.

`read_semester` reads and checks it (every mistake is one line naming the key); `apply_semester`
puts the due dates and extensions into nbgrader's gradebook before `tinyflo course autograde`
runs nbgrader, whose AssignLatePenalties step then charges the penalty (the course's
`LatePenalty` plugin reads `[late]` from this file when nbgrader grades, so an edit needs no
rebuild). Lateness is nbgrader's: the submission's timestamp.txt less the student's due date.

This file needs nbgrader only in `apply_semester`.
"""

from __future__ import annotations

import math
import re
import sys
import warnings
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from tinyflo.course.semester.nbgrader_run import COURSE_ID, nbgrader_api
from tinyflo.course.source import VALID_ID, CourseError, Module, resolve_module

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, before it joined the standard library
    import tomli as tomllib

COURSE_FILE = "course.toml"  # in the course folder, beside nbgrader_config.py
PENALTIES = '"none", "zero" or "N% per day" with N above 0 and at most 100 (e.g. "10% per day")'
_PER_DAY = re.compile(r"(\d+(?:\.\d+)?)\s*%\s*per\s+day", re.IGNORECASE)
_DUE = "a date and time with its UTC offset, unquoted (e.g. 2026-09-14T23:59:00-04:00)"
DAY = 86400  # seconds


@dataclass(frozen=True)
class Semester:
    """What course.toml says: the exchange, each module's due date, each extension, the penalty."""

    exchange: Path | None = None
    # module slug -> its due date; (student id, module slug) -> theirs (each with its UTC offset)
    deadlines: dict[str, datetime] = field(default_factory=dict)
    extensions: dict[tuple[str, str], datetime] = field(default_factory=dict)
    late: str = "none"  # "none", "zero" or "N% per day", as normalised by `read_penalty`
    titles: dict[str, str] = field(default_factory=dict)  # module slug -> its assignment's title in the LMS


def _load(path: Path) -> dict:
    """course.toml as a dict ({} when there is none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        raise CourseError(
            f"{path}: cannot read it ({getattr(error, 'strerror', None) or error})"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CourseError(f"{path}: not valid TOML ({error})") from None


def _fail(path: Path, key: str, expected: str, got: str) -> CourseError:
    return CourseError(f"{path}: {key}: expected {expected}; got {got}")


def _table(path: Path, key: str, value: object, holds: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(path, key, f"a table {key} of {holds}", repr(value))
    return value


def _due(path: Path, key: str, value: object) -> datetime:
    """A due date: a TOML date-time with its UTC offset."""
    if isinstance(value, datetime) and value.utcoffset() is not None:
        return value
    if isinstance(value, datetime):
        got = f"{value.isoformat()} (no UTC offset)"
    elif isinstance(value, date):
        got = f"{value.isoformat()} (a date without a time)"
    elif isinstance(value, str):
        got = f"the text {value!r} (write the date without quotes)"
    else:
        got = repr(value)
    raise _fail(path, key, _DUE, got)


def _penalty(path: Path, late: object) -> str:
    """[late]'s penalty, normalised: "none", "zero" or "N% per day"."""
    late = _table(path, "[late]", late, "penalty = ...")
    for key in late:
        if key != "penalty":
            raise _fail(path, f"[late] {key}", "only penalty in [late]", "an unknown key")
    value = late.get("penalty", "none")
    text = " ".join(value.lower().split()) if isinstance(value, str) else ""
    if text in ("none", "zero"):
        return text
    per_day = _PER_DAY.fullmatch(text)
    if per_day and 0 < float(per_day.group(1)) <= 100:
        return f"{float(per_day.group(1)):g}% per day"
    raise _fail(path, "[late] penalty", PENALTIES, repr(value))


def read_penalty(course_file: Path) -> str:
    """The late penalty course.toml names ("none" when it names none or there is no file)."""
    return _penalty(course_file, _load(course_file).get("late", {}))


def _slug(path: Path, where: str, spec: str, modules: list[Module]) -> str:
    """The slug of the module a key of course.toml names, by any of its aliases."""
    try:
        return resolve_module(modules, spec).slug
    except CourseError as error:
        raise CourseError(f"{path}: {where}: {error}") from None


def _modules_table(path: Path, key: str, table: dict, modules: list[Module]) -> dict[str, datetime]:
    """A table of module = due date, keyed by each module's slug."""
    dates: dict[str, datetime] = {}
    given: dict[str, str] = {}
    for spec, value in table.items():
        where = f"{key} {spec!r}"
        slug = _slug(path, where, spec, modules)
        if slug in dates:
            raise _fail(path, where, f"each module once in {key}", f"{slug} as {given[slug]!r} too")
        dates[slug], given[slug] = _due(path, where, value), spec
    return dates


def read_semester(course_dir: Path, modules: list[Module]) -> Semester:
    """The course's course.toml, checked; an empty Semester when there is none."""
    path = course_dir / COURSE_FILE
    data = _load(path)
    known = ("exchange", "deadlines", "extensions", "late", "titles")
    for key, value in data.items():
        if key not in known:
            shown = f"[{key}]" if isinstance(value, dict) else key
            top = "exchange, [deadlines], [extensions.<student>], [late] or [titles]"
            raise _fail(path, shown, f"{top} at the top level", "an unknown key")
    exchange = data.get("exchange")
    if exchange is not None and not (isinstance(exchange, str) and Path(exchange).is_absolute()):
        raise _fail(
            path,
            "exchange",
            'an absolute path in quotes (e.g. "/srv/nbgrader/exchange")',
            repr(exchange),
        )
    deadlines = _modules_table(
        path,
        "[deadlines]",
        _table(path, "[deadlines]", data.get("deadlines", {}), "module = due date"),
        modules,
    )
    extensions: dict[tuple[str, str], datetime] = {}
    for student, table in _table(
        path, "[extensions]", data.get("extensions", {}), "[extensions.<student>] tables"
    ).items():
        key = f"[extensions.{student}]"
        if not VALID_ID.match(student):
            raise _fail(
                path,
                key,
                "a student id as their folder in submitted/ is named "
                "(letters, digits and . _ @ + -)",
                repr(student),
            )
        dates = _modules_table(path, key, _table(path, key, table, "module = due date"), modules)
        for slug, due in dates.items():
            where = f"{key} {slug!r}"
            if slug not in deadlines:
                raise _fail(
                    path,
                    where,
                    f"a due date for {slug} in [deadlines] (an extension replaces it)",
                    "none there",
                )
            if due < deadlines[slug]:
                raise _fail(
                    path,
                    where,
                    f"a date no earlier than {slug}'s due date {deadlines[slug].isoformat()}",
                    f"{due.isoformat()}, before it",
                )
            extensions[student, slug] = due
    return Semester(
        Path(exchange) if exchange is not None else None,
        deadlines,
        extensions,
        _penalty(path, data.get("late", {})),
        _titles(path, _table(path, "[titles]", data.get("titles", {}), "module = \"title in the LMS\""), modules),
    )


def _titles(path: Path, table: dict, modules: list[Module]) -> dict[str, str]:
    """[titles]: each module's assignment title in the LMS's gradebook, one line, each title once."""
    titles: dict[str, str] = {}
    for spec, title in table.items():
        where = f"[titles] {spec!r}"
        slug = _slug(path, where, spec, modules)
        if not isinstance(title, str) or not title.strip() or not title.isprintable() or len(title) > 255:
            raise _fail(path, where, "the assignment's title in the LMS, in quotes, on one line of at most "
                        "255 characters (e.g. \"Module 1: Tensor (4521)\")", repr(title)[:80])
        if slug in titles or title.strip() in titles.values():
            raise _fail(path, where, "each module once, each with a title of its own", "a repeat")
        titles[slug] = title.strip()
    return titles


def late_points(penalty: str, score: float, seconds_late: float) -> float | None:
    """The points a notebook scoring `score` loses `seconds_late` seconds late (None: no penalty).

    "zero": all of them; "N% per day": N% of them per day or part of a day late, at most all.
    """
    if penalty == "none" or seconds_late <= 0:
        return None
    if penalty == "zero":
        return score
    percent = float(penalty.split("%", 1)[0])
    return min(score, score * percent * math.ceil(seconds_late / DAY) / 100)


def closed_from(semester: Semester, slug: str) -> datetime | None:
    """When no submission of the module can earn points any more: its last due date (every
    extension's included), and with "N% per day" the day late work is worth nothing. None when
    that never comes: no due date, or late work kept without penalty ("none")."""
    if slug not in semester.deadlines or semester.late == "none":
        return None
    last = max([semester.deadlines[slug], *(due for (_, module), due in semester.extensions.items()
                                              if module == slug)])
    if semester.late == "zero":
        return last
    percent = float(semester.late.split("%", 1)[0])
    return last + timedelta(days=math.ceil(100 / percent))


def _utc(when: datetime | None) -> datetime | None:
    """A due date as nbgrader stores one: UTC, without a zone."""
    return None if when is None else when.astimezone(timezone.utc).replace(tzinfo=None)


def apply_semester(course_dir: Path, semester: Semester, graded: dict[str, list[str]]) -> None:
    """The due dates and extensions of the modules about to be graded into the gradebook, before
    nbgrader grades them: a module course.toml gives no date has none, a student it gives none
    has no extension. Other modules are left as they were graded.

    `graded` maps a module to the students about to be graded; for those with an extension the
    submission is made now if the gradebook has none yet, so the first grading sees it.
    """
    database = course_dir / "gradebook.db"
    if not database.is_file():
        return  # nothing released: nbgrader will say so
    api = nbgrader_api()
    with (
        api.Gradebook(f"sqlite:///{database}", course_id=COURSE_ID) as gradebook,
        warnings.catch_warnings(),
    ):
        # nbgrader's add_submission makes SQLAlchemy warn about its own session handling
        warnings.filterwarnings("ignore", message=".*not in session.*")
        released = {assignment.name for assignment in gradebook.assignments}
        for slug in sorted(set(graded) & released):
            deadline = semester.deadlines.get(slug)
            assignment = gradebook.update_or_create_assignment(slug, duedate=_utc(deadline))
            for student in graded[slug]:
                if (student, slug) in semester.extensions:
                    gradebook.update_or_create_student(student)
                    gradebook.update_or_create_submission(slug, student)
            for submission in assignment.submissions:
                due = semester.extensions.get((submission.student.id, slug))
                later = due is not None and deadline is not None and due > deadline
                submission.extension = due - deadline if later else None
        gradebook.db.commit()


def write_template(course_dir: Path, modules: list[Module]) -> Path | None:
    """A commented course.toml for the instructor to fill in; None when one is there (never
    replaced)."""
    path = course_dir / COURSE_FILE
    example = modules[0].slug if modules else "01_tensor"
    text = f"""\
# The semester, read by `tinyflo course` release, collect, autograde and report; yours to edit
# (`tinyflo course build` never rewrites it). Dates are TOML date-times with their UTC offset.

# nbgrader's exchange on a JupyterHub (an absolute path):
# exchange = "/srv/nbgrader/exchange"

[deadlines]  # a module (01_tensor, 01, 1 or tensor) = its due date
# "{example}" = 2026-09-14T23:59:00-04:00

[extensions]  # a student's own due dates, replacing the module's
# [extensions.alice]
# "{example}" = 2026-09-16T23:59:00-04:00

[late]  # a submission is late when its timestamp.txt is after the student's due date
# "none", "zero", or "N% per day" (of the points earned, per day or part of a day late)
penalty = "none"

[titles]  # a module = its assignment's title in the LMS, heading its column in `report --format`
# "{example}" = "Module 1: Tensor (4521)"
"""
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        return None
    return path
