"""`tinyflo course collect MODULE --zip FILE`: an LMS's download of one module's submissions,
each student's notebook placed in submitted/<student>/<module>/<name>.ipynb.

Canvas's "Download Submissions" and Moodle's "Download all submissions" go through nbgrader's
own `zip_collect`, with the two plugins of this file in place of nbgrader's, which trust the zip:

* ZipExtractor reads the zip member by member and writes each notebook under a generated name
  (00001.ipynb) into downloaded/<module>/extracted/; no path is ever made from a member's name.
  manifest.json, beside that folder, keeps each file's name in the zip and a line for every
  member left out (links, climbing or odd names, other files, archives, oversized notebooks).
* LmsCollector tells from each name in the zip whose it is (Canvas: the LMS user id, Moodle: the
  full name, both looked up in the roster) and gives nbgrader the student's roster id and the
  module's notebook name; nothing of the name in the zip becomes part of a path. A notebook
  autograde would refuse (source.read_notebook_bytes) is left out here, with the same reason.
  What it decided goes into decisions.json.

`collect_zip` runs in tinyflo's process and prints those decisions; the plugins run in nbgrader's.
"""

from __future__ import annotations

import csv
import io
import json
import lzma
import os
import re
import shutil
import stat
import sys
import unicodedata
import zipfile
import zlib
from collections import defaultdict
from dataclasses import asdict, dataclass
from io import BytesIO
from pathlib import Path

from traitlets import Int, Unicode

from tinyflo.course.notebooks import require
from tinyflo.course.semester.nbgrader_run import course_command, nbgrader, students
from tinyflo.course.source import (
    NOTEBOOK_LIMIT,
    VALID_ID,
    CourseError,
    Module,
    NotebookError,
    read_notebook_bytes,
    read_regular,
)

plugins = require("nbgrader.plugins")

ARCHIVE_LIMIT = 1 << 30  # bytes of the downloaded zip itself
TOTAL_LIMIT = 2 << 30  # bytes of all its notebooks once unpacked: a zip bomb stops here
MEMBER_LIMIT = 10_000  # files in the zip
ARCHIVES = (".zip", ".gz", ".tgz", ".tar", ".bz2", ".xz", ".7z", ".rar")
MANIFEST = "manifest.json"  # in downloaded/<module>/, beside extracted/ (which nbgrader walks)
DECISIONS = "decisions.json"
WORKSHEET = "worksheet.json"  # beside them: Moodle participant id -> email, from its grading worksheet
PARTICIPANT = re.compile(r"Participant ([0-9]+)")  # the worksheet's Identifier column
SHOWN_NAME = 160  # characters of a name in the zip shown in a line

# Canvas: <sortable name>_[late_]<user id>_<file id>_<file name>, the name lower case with only
# word characters (Canvas writes `late`, older exports `LATE`). Both the name and the file name are
# the student's, so every place where `_[late_]<digits>_<digits>_` occurs is a way to read it (see
# _canvas_owner).
CANVAS_IDS = re.compile(r"(?=_(?:(?P<late>[Ll][Aa][Tt][Ee])_)?(?P<user>[0-9]+)_[0-9]+_(?P<file>.+))", re.S)
# Moodle: <full name>_<participant id>_assignsubmission_file_ and then the file name; or, with
# "download submissions in folders" (the default since Moodle 3.1), a folder holding the files,
# named <full name>_<participant id>_assignsubmission_file (Moodle 4.1 on, mod/assign's
# downloader) or with a trailing underscore (before). Moodle turns the underscores of a name into
# spaces, so the name ends at the first underscore.
MOODLE = re.compile(
    r"(?P<name>[^_]+)_(?P<participant>[0-9]+)_assignsubmission_file(?:_(?P<file>.*))?", re.S
)
RESUBMITTED = re.compile(
    r"-[0-9]+(?=\.ipynb\Z)", re.I
)  # Canvas's tensor-1.ipynb for a second upload


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


def _shown(name: str) -> str:
    """A name from the zip for a one-line message: quoted, escaped, cut when very long."""
    return repr(name) if len(name) <= SHOWN_NAME else repr(name[:SHOWN_NAME]) + "..."


def _name_problem(name: str) -> str:
    """Why a member's name is refused ('' when it is a plain relative name)."""
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in name):
        return "a control or invisible character in its name"
    if "\\" in name:
        return "a backslash in its name"
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in name.split("/"):
        return "'..' in its path"
    return ""


def _decoded(info: zipfile.ZipInfo) -> str | None:
    """The member's name as its maker wrote it: UTF-8, also where the zip does not flag it as
    such (zipfile then reads it as cp437); None when it is not UTF-8."""
    if info.flag_bits & 0x800:
        return info.orig_filename
    try:
        return info.orig_filename.encode("cp437").decode("utf-8")
    except UnicodeError:
        return None


def open_archive(data: bytes, member_limit: int) -> zipfile.ZipFile:
    """`data` as a zip with 1 to `member_limit` members; ValueError says what came instead."""
    try:
        archive = zipfile.ZipFile(BytesIO(data))
    except zipfile.BadZipFile as error:
        raise ValueError(f"is not a zip ({error})") from None
    except UnicodeDecodeError:
        raise ValueError(
            "is a zip whose list of files cannot be read (a name is not UTF-8)"
        ) from None
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"is a damaged zip ({error})") from None
    count = len(archive.infolist())
    if count == 0:
        raise ValueError("is an empty zip")
    if count > member_limit:
        raise ValueError(f"holds {count} files; at most {member_limit} are read (a zip bomb?)")
    return archive


@dataclass
class Manifest:
    """What the extractor did: extracted file name -> name in the zip, the members left out,
    and a problem with the whole archive (which leaves nothing extracted)."""

    files: dict[str, str]
    left_out: list[str]
    error: str = ""

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> Manifest:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


class ZipExtractor(plugins.ExtractorPlugin):
    """nbgrader's extractor for a hostile zip: each notebook member is read under the size
    limits and written as a new regular file with a generated name; nothing is followed, made
    from a member's name or unpacked twice."""

    notebook_limit = Int(NOTEBOOK_LIMIT, help="bytes of one notebook").tag(config=True)
    total_limit = Int(TOTAL_LIMIT, help="bytes of all notebooks of the download").tag(config=True)
    member_limit = Int(MEMBER_LIMIT, help="files in one zip").tag(config=True)
    archive_limit = Int(ARCHIVE_LIMIT, help="bytes of one zip").tag(config=True)

    def extract(self, archive_path: str, extracted_path: str) -> None:
        folder = Path(extracted_path)
        manifest = Manifest({}, [])
        total = 0
        for entry in sorted(os.scandir(archive_path), key=lambda e: e.name):
            try:
                archive = open_archive(
                    read_regular(entry.path, self.archive_limit), self.member_limit
                )
            except OSError as error:
                manifest.error = f"cannot be read ({error})"
                break
            except ValueError as error:
                manifest.error = str(error)
                break
            for info in archive.infolist():
                name, data = self._read(archive, info)
                if isinstance(data, str):
                    manifest.left_out.append(f"{_shown(name)}: {data}")
                if not isinstance(data, bytes):
                    continue  # left out, or a folder (its files are members of their own)
                total += len(data)
                if total > self.total_limit:
                    manifest.error = (
                        f"unpacks to more than {_mib(self.total_limit)} of notebooks (a zip bomb?)"
                    )
                    break
                target = folder / f"{len(manifest.files) + 1:05d}.ipynb"
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                manifest.files[target.name] = name
            if manifest.error:
                break
        if manifest.error:  # nothing of a refused archive is collected
            for name in manifest.files:
                os.unlink(folder / name)
            manifest.files, manifest.left_out = {}, []
        manifest.write(folder.parent / MANIFEST)

    def _read(
        self, archive: zipfile.ZipFile, info: zipfile.ZipInfo
    ) -> tuple[str, bytes | str | None]:
        """A member's name and its bytes, or why it is left out, or None for a folder."""
        name = _decoded(info)
        if name is None:
            return info.orig_filename, "its name is not UTF-8"
        if problem := _name_problem(name):
            return name, problem
        kind = stat.S_IFMT(info.external_attr >> 16)
        if info.is_dir() or kind == stat.S_IFDIR:
            return name, None
        if kind == stat.S_IFLNK:
            return name, "a symbolic link, not a file"
        if kind not in (0, stat.S_IFREG):
            return name, "not a regular file (a device, fifo or socket entry)"
        if not name.lower().endswith(".ipynb"):
            if name.lower().endswith(ARCHIVES):
                return (
                    name,
                    "an archive inside the download, not unpacked (a submission is the notebook)",
                )
            return name, "not a notebook (.ipynb)"
        if info.flag_bits & 0x1:
            return name, "encrypted (password-protected)"
        # The header's sizes are the zip maker's word: read at most one byte past the limit.
        try:
            with archive.open(info) as stream:
                data = stream.read(self.notebook_limit + 1)
        except (
            zipfile.BadZipFile,
            zlib.error,
            lzma.LZMAError,
            NotImplementedError,
            EOFError,
            OSError,
            ValueError,
            RuntimeError,
        ) as error:
            return name, f"cannot be unpacked ({type(error).__name__}: {error})"
        if len(data) > self.notebook_limit:
            return name, f"larger than {_mib(self.notebook_limit)}, the notebook limit"
        return name, data


@dataclass
class Placed:
    """One student's notebook, chosen from the files the zip holds for them."""

    student: str
    file: str  # the extracted file (00001.ipynb)
    original: str  # its name in the zip
    filename: str  # the name the student gave it
    late: bool = False  # marked late by Canvas
    sender: str = ""  # the LMS's id of who sent it: Canvas user id or Moodle participant id
    by_name: bool = False  # a Moodle file matched by the name shown in the download alone


def _folded(name: str) -> str:
    """A person's name for comparing: NFC, case folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", name).casefold().split())


@dataclass
class Roster:
    """The roster as the two LMSs name students."""

    by_user_id: dict[str, list[str]]  # lms_user_id -> roster ids
    by_name: dict[str, list[str]]  # folded "first last" -> roster ids
    canvas_name: dict[str, str]  # roster id -> "lastfirst", as Canvas writes it in a file name
    by_email: dict[str, list[str]]  # email, case folded -> roster ids

    @classmethod
    def of(cls, students: dict[str, dict[str, str]]) -> Roster:
        roster = cls(defaultdict(list), defaultdict(list), {}, defaultdict(list))
        for student, info in sorted(students.items()):
            if email := (info.get("email") or "").strip().casefold():
                roster.by_email[email].append(student)
            first, last = info.get("first_name") or "", info.get("last_name") or ""
            if lms_id := (info.get("lms_user_id") or "").strip():
                roster.by_user_id[lms_id].append(student)
            if full := _folded(f"{first} {last}"):
                roster.by_name[full].append(student)
            roster.canvas_name[student] = re.sub(r"\W", "", _folded(f"{last}, {first}"))
        return roster


def _moodle_owner(parts: list[str], depth: int, match: re.Match, roster: Roster,
                  emails: dict[str, str] | None = None) -> Placed | str:
    """The student a Moodle name is of, or why it cannot be told: by the sender's email in the
    grading worksheet (`emails`: participant id -> email) when there is one, else by the name the
    download shows, which its student may have changed."""
    if depth == len(parts) - 1 and match["file"] is None:
        return "a Moodle submission folder's name on a file"
    filename = match["file"] if depth == len(parts) - 1 else parts[-1]
    participant = match["participant"]
    if emails is not None:
        if participant not in emails:
            return f"Moodle participant {participant} is not in the grading worksheet"
        email = emails[participant]
        students = roster.by_email.get(email.casefold(), [])
        if len(students) != 1:
            return (f"Moodle participant {participant}'s email {email!r} (the grading worksheet's) is "
                    + (f"the roster's email of {', '.join(students)}" if students else "no roster student's"))
        return Placed(students[0], "", "", filename, sender=f"Moodle participant {participant} ({email})")
    name = " ".join(match["name"].split())
    students = roster.by_name.get(_folded(name), [])
    if len(students) > 1:
        return f"{len(students)} roster students are named {name!r} ({', '.join(students)})"
    if not students:
        blind = " (blind marking hides who sent it)" if _folded(name) == "participant" else ""
        return f"no roster student is named {name!r}{blind}"
    return Placed(students[0], "", "", filename, sender=f"Moodle participant {participant}", by_name=True)


def _canvas_owner(base: str, roster: Roster) -> Placed | str:
    """The student a Canvas file name is of, or why it cannot be told.

    A student chooses their file's name and, where Canvas lets them, their own: one of them could
    read as someone else's user id (`mal_1001_1010_77_demo.ipynb`). So every reading is tried:
    all must agree on one roster student, and where the name reads as several user ids its name
    part must be that student's.
    """
    if base.startswith("anon_"):
        return "anonymous grading hides who sent it"
    readings = [(base[: m.start()], m) for m in CANVAS_IDS.finditer(base)]
    if not readings:
        return (
            "named neither as Canvas (lastfirst_userid_fileid_file) nor as Moodle "
            "(Full Name_id_assignsubmission_file_...) names a submission"
        )
    users = list(dict.fromkeys(m["user"] for _, m in readings))
    found = {
        s: (name, m) for name, m in reversed(readings) for s in roster.by_user_id.get(m["user"], [])
    }
    if not found:
        return f"Canvas user {users[0]} is no roster student's lms_user_id"
    if len(found) > 1:
        whose = ", ".join(f"{s} ({m['user']})" for s, (_, m) in sorted(found.items()))
        return f"reads as the Canvas user id of more than one roster student: {whose}"
    student, (name, match) = next(iter(found.items()))
    if len(users) > 1 and _folded(name) != roster.canvas_name[student]:
        return (
            f"reads as Canvas users {', '.join(users)}, and its name part {name!r} is not "
            f"{student}'s ({roster.canvas_name[student]!r})"
        )
    return Placed(
        student, "", "", match["file"], bool(match["late"]), f"Canvas user {match['user']}"
    )


def _owner(original: str, roster: Roster, emails: dict[str, str] | None = None) -> Placed | str:
    """Whose file `original` is (the Placed's file and original not yet filled in), or why it
    cannot be told. A name with Moodle's mark is read only as Moodle's: the first folder or file
    name in the shape of Moodle's is the one Moodle made, what follows is the student's."""
    parts = original.split("/")
    for depth, part in enumerate(parts):
        if match := MOODLE.fullmatch(part):
            return _moodle_owner(parts, depth, match, roster, emails)
    if "_assignsubmission_" in original:
        return "not a file submission of Moodle's (assignsubmission_file)"
    return _canvas_owner(parts[-1], roster)


def plan(
    files: dict[str, str], students: dict[str, dict[str, str]], notebook: str,
    emails: dict[str, str] | None = None,
) -> tuple[list[Placed], list[str]]:
    """Each student's notebook among the extracted `files` (extracted name -> name in the zip),
    and a line for every file or student left out.

    Canvas names are matched by the roster's lms_user_id, Moodle names by its
    `first_name last_name`. A student with one notebook has it taken whatever it is called;
    with several, the one called `notebook`.
    """
    roster = Roster.of(students)
    found: dict[str, list[Placed]] = defaultdict(list)
    left_out = []
    for file, original in sorted(files.items()):
        owner = _owner(original, roster, emails)
        if isinstance(owner, str):
            left_out.append(f"{_shown(original)}: {owner}")
        elif not VALID_ID.match(owner.student):
            left_out.append(
                f"{_shown(original)}: its roster id {owner.student!r} is no student id "
                "(letters, digits and . _ @ + -)"
            )
        else:
            owner.file, owner.original = file, original
            found[owner.student].append(owner)
    placed = []
    for student, notebooks in sorted(found.items()):
        shown = ", ".join(_shown(p.original) for p in notebooks)
        senders = sorted({p.sender for p in notebooks})
        named = [
            p
            for p in notebooks
            if RESUBMITTED.sub("", p.filename).casefold() == notebook.casefold()
        ]
        if len(senders) > 1:  # two Moodle participants of one name: one of them is not the student
            left_out.append(
                f"student {student}: files from {' and '.join(senders)}, not one sender: {shown}"
            )
        elif len(notebooks) == 1 or len(named) == 1:
            placed.append(notebooks[0] if len(notebooks) == 1 else named[0])
        else:
            left_out.append(
                f"student {student}: {len(notebooks)} notebooks and "
                f"{'none' if not named else 'more than one'} is {notebook}: {shown}"
            )
    return placed, left_out


class LmsCollector(plugins.FileNameCollectorPlugin):
    """nbgrader's collector for Canvas's and Moodle's download names: each extracted file goes
    to the roster student it belongs to, as the module's notebook, or is left out."""

    notebook = Unicode("", help="the module's notebook, e.g. tensor.ipynb").tag(config=True)

    def collect(self, submitted_file: str) -> dict[str, str] | None:
        if not hasattr(self, "_chosen"):
            self._chosen = self._decide(Path(submitted_file).parent)
        student = self._chosen.get(Path(submitted_file).name)
        return {"student_id": student, "file_id": self.notebook} if student else None

    def _decide(self, extracted: Path) -> dict[str, str]:
        """Plan the whole download once (a student's files are chosen among each other), write
        the decisions beside the manifest, and return extracted file -> student."""
        folder = extracted.parent
        manifest = Manifest.read(folder / MANIFEST)
        coursedir = self.parent.coursedir
        emails = json.loads((folder / WORKSHEET).read_text(encoding="utf-8")) if (folder / WORKSHEET).is_file() else None
        placed, left_out = plan(manifest.files, students(Path(coursedir.root)), self.notebook, emails)
        root = Path(coursedir.root)
        for chosen in list(placed):  # what autograde would refuse is refused here, where the file is named
            try:
                read_notebook_bytes(read_regular(extracted / chosen.file, NOTEBOOK_LIMIT))
            except (OSError, NotebookError) as error:
                placed.remove(chosen)
                left_out.append(f"{_shown(chosen.original)}: student {chosen.student}'s notebook is not a "
                                f"readable notebook ({error})")
        for chosen in list(placed):  # nbgrader would write through a link: its target is not ours
            student_dir = Path(coursedir.submitted_directory) / chosen.student
            for path in (student_dir, student_dir / coursedir.assignment_id):
                if os.path.lexists(root / path) and not stat.S_ISDIR(os.lstat(root / path).st_mode):
                    placed.remove(chosen)
                    left_out.append(
                        f"{_shown(chosen.original)}: {path} is a link or a file, not a "
                        "folder; remove it and collect again"
                    )
                    break
        decisions = {"placed": [asdict(p) for p in placed], "left_out": left_out}
        (folder / DECISIONS).write_text(json.dumps(decisions, indent=1), encoding="utf-8")
        return {p.file: p.student for p in placed}


def _archive_kind(path: Path, error: OSError) -> str:
    """What `path` is, in words, when it cannot be read as a regular file."""
    if path.is_symlink():
        return "is a symbolic link (give the file it points to)"
    if not path.exists():
        return "is not there"
    if path.is_dir():
        return "is a folder"
    if not path.is_file():
        return "is not a regular file (a fifo, socket or device)"
    return "is " + str(error).rsplit(": ", 1)[-1]  # a hard link, too large


def _roster(course_dir: Path) -> None:
    """CourseError unless a roster gave the gradebook's students names or LMS ids."""
    if (course_dir / "gradebook.db").is_file():
        known = students(course_dir)
        if any(
            info.get(k)
            for info in known.values()
            for k in ("first_name", "last_name", "lms_user_id")
        ):
            return
    raise CourseError(
        f"--zip: placing a download needs the roster (names and LMS user ids) in the gradebook; "
        f"{course_dir} has none: run `{course_command('roster FILE', course_dir)}` first "
        "(columns id,first_name,last_name,email,lms_user_id)"
    )


def read_worksheet(path: Path) -> dict[str, str]:
    """Moodle's grading worksheet (Grading actions → Download grading worksheet): participant id
    -> email, from its Identifier ("Participant 123") and Email address columns."""
    try:
        text = read_regular(path, ARCHIVE_LIMIT).decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise CourseError(f"--worksheet: cannot read {path} ({getattr(error, 'strerror', None) or error})") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    header = list(rows[0]) if rows else []
    if not {"Identifier", "Email address"} <= set(header):
        raise CourseError(f"--worksheet: expected Moodle's grading worksheet, with Identifier and Email address "
                          f"columns; {path} has {header or 'no rows'}")
    emails = {}
    for row in rows:
        found = PARTICIPANT.fullmatch((row.get("Identifier") or "").strip())
        if found and (row.get("Email address") or "").strip():
            emails[found.group(1)] = row["Email address"].strip()
    return emails


def collect_zip(course_dir: Path, module: Module, archive: Path, worksheet: Path | None = None) -> int:
    """Place each student's notebook from an LMS download of `module` in submitted/ (a Moodle
    download's files by their senders' emails in `worksheet`, when given); the number of files and
    students left out, each said in one line."""
    _roster(course_dir)
    emails = read_worksheet(worksheet) if worksheet is not None else None
    expected = "--zip: expected a zip file (Canvas's or Moodle's download of all submissions)"
    try:
        data = read_regular(archive, ARCHIVE_LIMIT)
        open_archive(data, MEMBER_LIMIT)
    except OSError as error:
        raise CourseError(f"{expected}; {archive} {_archive_kind(archive, error)}") from None
    except ValueError as error:
        raise CourseError(f"{expected}; {archive} {error}") from None
    work = course_dir / "downloaded" / module.slug
    try:  # nbgrader's folders for this module: the download alone in archive/, no earlier results
        if os.path.lexists(work / "archive"):
            shutil.rmtree(work / "archive")
        for name in (MANIFEST, DECISIONS, WORKSHEET):
            (work / name).unlink(missing_ok=True)
        (work / "archive").mkdir(parents=True)
        (work / "archive" / "download.zip").write_bytes(data)
        if emails is not None:
            (work / WORKSHEET).write_text(json.dumps(emails), encoding="utf-8")
    except OSError as error:
        raise CourseError(f"--zip: cannot prepare {work}: {error.strerror or error}") from None
    nbgrader(
        course_dir,
        "zip_collect",
        module.slug,
        "--force",
        "--log-level=ERROR",  # our lines, not its
        f"--ZipCollectApp.extractor_plugin={__name__}.ZipExtractor",
        f"--ZipCollectApp.collector_plugin={__name__}.LmsCollector",
        f"--LmsCollector.notebook={module.name}.ipynb",
        f"--ZipExtractor.notebook_limit={NOTEBOOK_LIMIT}",
        f"--ZipExtractor.total_limit={TOTAL_LIMIT}",
        f"--ZipExtractor.member_limit={MEMBER_LIMIT}",
        f"--ZipExtractor.archive_limit={ARCHIVE_LIMIT}",
    )
    manifest = Manifest.read(work / MANIFEST)
    if manifest.error:
        raise CourseError(f"{expected}; {archive} {manifest.error}")
    decisions = (
        json.loads((work / DECISIONS).read_text(encoding="utf-8"))
        if (work / DECISIONS).is_file()
        else {}
    )
    left_out = manifest.left_out + decisions.get("left_out", [])
    placed = 0
    for chosen in (Placed(**p) for p in decisions.get("placed", [])):
        target = Path("submitted") / chosen.student / module.slug / f"{module.name}.ipynb"
        if not (course_dir / target).is_file():
            left_out.append(f"{_shown(chosen.original)}: nbgrader did not place it at {target}")
            continue
        notes = (
            [f"named {chosen.filename!r} by the student"] if chosen.filename != target.name else []
        )
        notes += ["late, says Canvas"] if chosen.late else []
        if chosen.sender.startswith("Moodle"):  # the download's name alone, or the worksheet's email
            notes += [f"{chosen.sender}, matched by name only" if chosen.by_name else f"{chosen.sender}, matched by email"]
        print(
            f"placed {_shown(chosen.original)} as {target}"
            + (f" ({'; '.join(notes)})" if notes else "")
        )
        placed += 1
    for line in left_out:
        print(f"left out: {line}", file=sys.stderr)
    print(
        f"collected {placed} submission{'s' if placed != 1 else ''} of {module.slug} "
        f"from {archive.name} into {course_dir / 'submitted'}"
    )
    if left_out:
        print(
            f"{len(left_out)} left out (above): place those notebooks by hand as "
            f"submitted/<student>/{module.slug}/{module.name}.ipynb, or fix the roster and "
            "collect again"
        )
    return len(left_out)
