"""nbgrader's exchange on a JupyterHub: release into it, collect from it, return feedback through it.

The exchange is a folder every user may write to (`exchange/<course>/inbound/` takes each student's
`nbgrader submit`), so what a collect finds there is hostile until shown otherwise: anyone may put a
folder there under another student's name, with any time in its name, holding links to the
instructor's files. nbgrader's own collect warns about a folder owned by someone else and still takes
it, trusts the time in the name and copies through links; `OwnedCollect` replaces it for
`tinyflo course collect`:

* a submission counts only when its folder is a real folder owned by the student it names (their
  Unix user, as on a hub where each student logs in as themselves); every other one is left out
  with a line, and cannot hide the student's own submissions;
* of a submission only the module's notebooks and its `submission_secret.txt` (the key to the
  student's feedback page) are taken, as regular files opened without following a link, and only
  when each was written by the student (a file another user put in their folder leaves the whole
  submission out);
* its time is the one in its name only when its files were not changed later than that; otherwise
  the time they were last changed (which no user can set back) is taken and said.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import parse_utc

from tinyflo.course.semester.nbgrader_run import COURSE_ID, nbgrader
from tinyflo.course.semester.settings import COURSE_FILE, read_semester
from tinyflo.course.source import NOTEBOOK_LIMIT, VALID_ID, CourseError, Module, read_regular

MARK = "tinyflo-collect: "  # the lines of OwnedCollect that `collect_exchange` passes on
SECRET = "submission_secret.txt"
SECRET_LIMIT = 4096  # bytes
# Seconds between the time nbgrader's submit puts in a submission's name (as it starts) and the last
# change to its files (as its copy ends): within them the two agree, and nothing is said.
COPY_SECONDS = 2


class OwnedCollect(ExchangeCollect):
    """nbgrader's collect, taking a submission only from its student's own folder (module docstring)."""

    def _say(self, line: str) -> None:
        self.log.info(MARK + line)

    @staticmethod
    def _user(uid_or_name: int | str) -> pwd.struct_passwd | None:
        try:
            return pwd.getpwuid(uid_or_name) if isinstance(uid_or_name, int) else pwd.getpwnam(uid_or_name)
        except KeyError:
            return None

    def init_src(self) -> None:
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        assignment = self.coursedir.assignment_id
        self.notebooks = sorted(
            path.name for path in Path(self.coursedir.format_path(
                self.coursedir.release_directory, ".", assignment)).glob("*.ipynb")
        )
        newest: dict[str, dict] = {}  # student -> nbgrader's record of their newest usable submission
        with os.scandir(self.inbound_path) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            parts = name.rsplit("+", 3)
            if len(parts) < 3 or parts[1] != assignment:
                continue
            student, claimed = parts[0], parts[2]
            where = f"{assignment}: {name!r}"
            if not VALID_ID.match(student):
                self._say(f"left out {where}: {student!r} is not a student id")
                continue
            try:
                timestamp = parse_utc(claimed)
            except (ValueError, OverflowError, TypeError):
                self._say(f"left out {where}: {claimed!r} is not a time")
                continue
            try:
                info = os.lstat(os.path.join(self.inbound_path, name))
            except OSError:  # gone since the listing
                continue
            if not stat.S_ISDIR(info.st_mode):
                self._say(f"left out {where}: not a folder (a link or a file)")
                continue
            user = self._user(student)
            if self.check_owner and (user is None or info.st_uid != user.pw_uid):
                owner = self._user(info.st_uid)
                self._say(f"left out {where}: made by {owner.pw_name if owner else info.st_uid}, not by {student}")
                continue
            if problem := self._unfit(os.path.join(self.inbound_path, name)):
                self._say(f"left out {where}: {problem}")
                continue
            record = {"username": student, "filename": name, "timestamp": timestamp}
            if student not in newest or timestamp > newest[student]["timestamp"]:
                newest[student] = record
        self.src_records = list(newest.values())
        self.chosen = {record["filename"]: record for record in self.src_records}  # for do_copy

    def _unfit(self, folder: str) -> str:
        """Why the submission folder cannot be taken ('' when it can): each notebook of the release must
        be in it as a regular file of one name under the size limit (do_copy checks again as it reads)."""
        for notebook in self.notebooks:
            try:
                info = os.lstat(os.path.join(folder, notebook))
            except OSError:
                return f"no {notebook} in it"
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > NOTEBOOK_LIMIT:
                return f"its {notebook} is not a regular file of one name of at most {NOTEBOOK_LIMIT} bytes"
        return ""

    def do_copy(self, src: str, dest: str, log=None) -> None:
        """The module's notebooks and the feedback key of the submission folder `src`, into `dest`,
        and its time as nbgrader's timestamp.txt: when its folder and files last changed (their
        status-change time, which the kernel sets and no user can set back), not the time in its
        name, which its student wrote; said in a line where the two disagree."""
        released = self.notebooks
        name = os.path.basename(src)
        student, claimed = self.chosen[name]["username"], self.chosen[name]["timestamp"]
        try:
            folder = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # made a link, or removed, since it was chosen: one student's, not everyone's, collect
            self._say(f"left out {self.coursedir.assignment_id}: {name!r}: not a folder any more")
            return
        files: dict[str, bytes] = {}
        forged = ""
        try:
            changed, author = os.fstat(folder).st_ctime, os.fstat(folder).st_uid
            for wanted in [*released, SECRET]:
                try:
                    found = os.stat(wanted, dir_fd=folder, follow_symlinks=False)
                except FileNotFoundError:
                    self._say(f"{student}, {self.coursedir.assignment_id}: no {wanted} in the submission")
                    continue
                if found.st_uid != author:  # put there by another user (the folder was theirs to write to)
                    owner = self._user(found.st_uid)
                    forged = f"{wanted} was written by {owner.pw_name if owner else f'uid {found.st_uid}'}"
                    continue
                try:
                    files[wanted] = read_regular(wanted, SECRET_LIMIT if wanted == SECRET else NOTEBOOK_LIMIT,
                                                 dir_fd=folder)
                    # read first: whatever was written into what was read changed it no later than this
                    changed = max(changed, os.stat(wanted, dir_fd=folder, follow_symlinks=False).st_ctime)
                except OSError as error:
                    self._say(f"{student}, {self.coursedir.assignment_id}: not taken: {error}")
            others = sorted(set(os.listdir(folder)) - {*released, SECRET, "timestamp.txt"})
        finally:
            os.close(folder)
        if forged:  # the whole submission: another user had a hand in it
            self._say(f"left out {student}, {self.coursedir.assignment_id}: {forged}, not by {student}")
            with contextlib.suppress(OSError):  # the student's folder nbgrader made for it, if it is empty
                os.rmdir(os.path.dirname(dest))
            return
        if others:
            shown = ", ".join(map(repr, others[:3])) + (" ..." if len(others) > 3 else "")
            self._say(f"{student}, {self.coursedir.assignment_id}: only the notebook is taken, not {shown}")
        when = datetime.fromtimestamp(changed, timezone.utc).replace(tzinfo=None)
        if abs((when - claimed).total_seconds()) > COPY_SECONDS:
            self._say(f"{student}, {self.coursedir.assignment_id}: its name says it was submitted at {claimed} "
                      f"UTC, its files were last written at {when:%Y-%m-%d %H:%M:%S} UTC, which no one can set "
                      "back: that time is taken")
        os.makedirs(dest)
        for filename, data in [*files.items(), ("timestamp.txt", f"{when:%Y-%m-%d %H:%M:%S.%f} UTC".encode())]:
            fd = os.open(os.path.join(dest, filename), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)


def _exchange_option(root: Path) -> str:
    """nbgrader's option naming the course's exchange, `root`, which must be there."""
    if not root.is_dir():
        raise CourseError(f"exchange: {root} (from {COURSE_FILE}) is not a folder; an administrator makes it "
                          f"once: install -d -m 1777 {root}")
    return f"--Exchange.root={root}"


def exchange_root(course_dir: Path, modules: list[Module]) -> Path | None:
    """The exchange course.toml names, or None."""
    return read_semester(course_dir, modules).exchange


class OwnSubmit(ExchangeSubmit):
    """nbgrader's submit, leaving the submission writable by its author only.

    nbgrader makes a submission's folder writable by everyone (so that an instructor who does not
    own it can delete it); then anyone who learns its name can add to it or empty it. Every user's
    nbgrader on the hub submits through this (`tinyflo course hub` names it in their settings)."""

    def copy_files(self) -> None:
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), 0o755)


def release_to_exchange(course_dir: Path, root: Path, chosen: list[Module]) -> None:
    """`nbgrader release_assignment` of each chosen module into the exchange `root`: students see it
    in their Assignments tab. The inbound folder is made sticky: a student may add their own folder
    there, never rename or remove another's."""
    option = _exchange_option(root)
    for module in chosen:
        nbgrader(course_dir, "release_assignment", module.slug, "--force", option)
        print(f"in the exchange: {module.slug} (students fetch it from their Assignments tab)")
    inbound = root / COURSE_ID / "inbound"
    if inbound.is_dir() and not inbound.is_symlink() and inbound.stat().st_uid == os.geteuid():
        os.chmod(inbound, stat.S_IMODE(inbound.stat().st_mode) | stat.S_ISVTX)


def collect_exchange(course_dir: Path, modules: list[Module], chosen: list[Module]) -> int:
    """`nbgrader collect` of each chosen module through OwnedCollect, the newest submission of each
    student; the number of submissions left out."""
    root = exchange_root(course_dir, modules)
    if root is None:
        raise CourseError(f"{course_dir / COURSE_FILE} names no exchange (exchange = \"/srv/nbgrader/exchange\"); "
                          "without one, collect takes an LMS's download: --zip FILE")
    option = _exchange_option(root)
    left_out = 0
    for module in chosen:
        if not (course_dir / "release" / module.slug).is_dir():
            if len(chosen) == 1:
                raise CourseError(f"{module.slug} is not released yet: nothing of it can be in the exchange")
            continue
        output = nbgrader(course_dir, "collect", module.slug, "--update", option,
                          f"--ExchangeFactory.collect={OwnedCollect.__module__}.{OwnedCollect.__name__}")
        for line in output.splitlines():
            if MARK in line:
                said = line.split(MARK, 1)[1]
                left_out += said.startswith("left out")
                print(said, file=sys.stderr if said.startswith("left out") else sys.stdout)
        students = sorted(path.parent.name for path in (course_dir / "submitted").glob(f"*/{module.slug}"))
        print(f"collected {module.slug}: {len(students)} submission{'s' if len(students) != 1 else ''}"
              + (f" ({', '.join(students)})" if students else ""))
    return left_out


def _unreleasable(folder: Path) -> str:
    """Why the feedback folder of one submission cannot go to the exchange ('' when it can): nbgrader
    names a page there by the submission's key and reads its time, and stops for everyone without them."""
    if not VALID_ID.match(folder.parent.name):
        return "its folder is not named by a student id"
    for name in (SECRET, "timestamp.txt"):
        if not os.path.lexists(folder / name):
            return (f"no {name} (the key to the student's page comes with a submission through the exchange; "
                    "return this page by hand)" if name == SECRET else f"no {name}")
        try:
            read_regular(folder / name, SECRET_LIMIT)
        except OSError as error:  # a link, a fifo, a hard link, too large
            return str(error).replace(str(folder / name), name)
    return ""


def release_feedback(course_dir: Path, root: Path, chosen: list[Module]) -> list[str]:
    """`nbgrader release_feedback` into the exchange `root`: each student fetches their own pages from
    their Assignments tab. A page that cannot go there is its student's line (returned, and said);
    the others go."""
    option = _exchange_option(root)
    left_out = []
    for module in chosen:
        folders = sorted({page.parent for page in (course_dir / "feedback").glob(f"*/{module.slug}/*.html")})
        problems = {folder.parent.name: problem for folder in folders if (problem := _unreleasable(folder))}
        for student, problem in problems.items():
            left_out.append(f"student {student}, {module.slug}: feedback not released: {problem}")
            print(f"left out: {left_out[-1]}", file=sys.stderr)
        if len(problems) < len(folders):
            exclude = [f"--CourseDirectory.student_id_exclude={','.join(problems)}"] if problems else []
            nbgrader(course_dir, "release_feedback", module.slug, option, *exclude)
            print(f"feedback of {module.slug} in the exchange (students fetch it from their Assignments tab)")
    return left_out
