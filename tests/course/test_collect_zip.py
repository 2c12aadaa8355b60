"""`tinyflo course collect MODULE --zip FILE`: Canvas's and Moodle's downloads placed in submitted/,
and every way a hostile download could reach further left out with one line.

The zips are made here in the shapes the two LMSs give. Grading what lands in submitted/ is
proven by the grading tests; these take seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import unicodedata
import warnings
import zipfile
from pathlib import Path

import nbformat
import pytest
from course_support import FIXTURE_MODULES, call_cli
from intake_cases import WORST, worst_case

from tinyflo.course.notebooks import instructor_notebook
from tinyflo.course.semester import lms_zip
from tinyflo.course.source import discover_modules

SLUG, NOTEBOOK = "00_demo", "demo.ipynb"  # the fixture module
STUDENTS = [  # id, first name, last name, LMS user id
    ("alice", "Alice", "Liddell", "1001"),
    ("bob", "Bob", "Builder", "1002"),
    ("carol", "Carol", "Danvers", "1003"),
    ("zoe", "Zoë", "Ångström", "1004"),
    ("dave1", "Dave", "Smith", "1005"),
    ("dave2", "Dave", "Smith", "1006"),
    ("erin", "Erin", "Ochoa", "1007"),
    ("frank", "Frank", "Ocean", "1008"),
    ("gus", "Gus", "Twin", "1009"),
    ("hal", "Hal", "Twin", "1009"),  # two roster rows with one Canvas id
    ("ivy", "Ivy", "Lee", "1010"),
    ("jay", "Jay", "Bird", "1011"),
]


def _notebook(text: str) -> bytes:
    """A small notebook whose bytes say whose it is."""
    cell = {"cell_type": "markdown", "id": "a1", "metadata": {}, "source": text}
    return json.dumps(
        {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    ).encode()


def _roster(course: Path, monkeypatch) -> None:
    """The roster in nbgrader's student table, as `course roster` puts it (proven in test_lms),
    made with nbgrader's API to save an nbgrader run."""
    from nbgrader.api import Gradebook

    from tinyflo.course.semester.instructor import COURSE_ID

    monkeypatch.setenv(
        "PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        for student, first, last, lms_id in STUDENTS:
            gradebook.update_or_create_student(
                student,
                first_name=first,
                last_name=last,
                email=f"{student}@example.edu",
                lms_user_id=lms_id,
            )


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A built course with the roster in; `root` holds it and outside/, which nothing may touch."""
    root = tmp_path_factory.mktemp("collect")
    course = root / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    with pytest.MonkeyPatch.context() as monkeypatch:
        _roster(course, monkeypatch)
    (root / "outside").mkdir()
    (root / "outside" / "secret.txt").write_text("the instructor's own file\n")
    return root, course, common


def _collect(course, archive: Path) -> tuple[int, str]:
    """`tinyflo course collect 0 --zip archive`: its exit status and output."""
    return call_cli("course", "collect", "0", "--zip", str(archive), *course[2])


def _zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        warnings.simplefilter("ignore")  # a name twice is one of the attacks
        for name, data in members:
            archive.writestr(name, data)
    return path


def _entry(name: str, mode: int) -> zipfile.ZipInfo:
    """A member whose Unix mode says it is a link, a fifo, ..."""
    info = zipfile.ZipInfo(name)
    info.create_system, info.external_attr = 3, mode << 16
    return info


def _patch_headers(path: Path, name: bytes, patch) -> None:
    """Rewrite the local and central headers of member `name` in place: patch(header, flags
    offset, uncompressed size offset)."""
    data = bytearray(path.read_bytes())
    for signature, name_at, flags_at, size_at, length_at in (
        (b"PK\x03\x04", 30, 6, 22, 26),
        (b"PK\x01\x02", 46, 8, 24, 28),
    ):
        start = data.find(signature)
        while start >= 0:
            length = int.from_bytes(data[start + length_at : start + length_at + 2], "little")
            if data[start + name_at : start + name_at + length] == name:
                patch(data, start + flags_at, start + size_at)
            start = data.find(signature, start + 1)
    path.write_bytes(bytes(data))


def _files(root: Path) -> dict[str, bytes | str]:
    """Everything under root, links not followed: path -> bytes, link target or "folder"."""
    found: dict[str, bytes | str] = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(folder, name)
            found[str(path.relative_to(root))] = (
                f"-> {os.readlink(path)}"
                if path.is_symlink()
                else "folder"
                if path.is_dir()
                else path.read_bytes()
            )
    return found


def _assert_only_written(root: Path, before: dict, students: set[str]) -> None:
    """Nothing changed under root but nbgrader's downloaded/<module>/ and the folders
    submitted/<student>/<module>/ of `students`."""
    after = _files(root)
    allowed = [f"course/downloaded/{SLUG}", *(f"course/submitted/{s}/{SLUG}" for s in students)]
    folders = {
        f for p in allowed for f in (p, *map(str, Path(p).parents))
    }  # they and where they are
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    stray = [
        p for p in changed if p not in folders and not p.startswith(tuple(f"{a}/" for a in allowed))
    ]
    assert not stray, f"written outside {allowed}: {stray}"


def _left_out(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("left out: ")]


def _reset(course) -> Path:
    """submitted/ emptied (the tests share one course); its path."""
    submitted = course[1] / "submitted"
    shutil.rmtree(submitted, ignore_errors=True)  # links in it go, not what they point to
    return submitted


def test_canvas_download_places_each_students_notebook(course, tmp_path):
    root, folder, _ = course
    submitted = _reset(course)
    old = submitted / "alice" / SLUG
    old.mkdir(parents=True)
    (old / NOTEBOOK).write_bytes(_notebook("alice, first try"))
    (old / "stale.txt").write_text("from an earlier collect")
    untouched = submitted / "carol" / SLUG
    untouched.mkdir(parents=True)
    (untouched / NOTEBOOK).write_bytes(_notebook("carol, not in this download"))
    notebooks = {
        "liddellalice_1001_9001_demo.ipynb": _notebook("alice"),
        "builderbob_LATE_1002_9002_demo (1).ipynb": _notebook("bob"),
        "ochoaerin_1007_9003_demo-1.ipynb": _notebook("erin, second upload"),
        "ochoaerin_1007_9004_scratch.ipynb": _notebook("erin's scratch"),
        "oceanfrank_1008_9005_lab_1_2_demo.ipynb": _notebook(
            "frank"
        ),  # reads two ways; the name decides
    }
    archive = _zip(
        tmp_path / "submissions.zip",
        [*notebooks.items(), ("ochoaerin_1007_9006_notes.pdf", b"%PDF-1.4")],
    )
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 1, out  # the PDF is left out
    placed = {
        "alice": "liddellalice_1001_9001_demo.ipynb",
        "bob": "builderbob_LATE_1002_9002_demo (1).ipynb",
        "erin": "ochoaerin_1007_9003_demo-1.ipynb",
        "frank": "oceanfrank_1008_9005_lab_1_2_demo.ipynb",
    }
    for student, name in placed.items():
        assert (submitted / student / SLUG / NOTEBOOK).read_bytes() == notebooks[name], student
        assert f"placed {name!r} as submitted/{student}/{SLUG}/{NOTEBOOK}" in out
    assert "(named 'demo (1).ipynb' by the student; late, says Canvas)" in out
    assert "(named 'lab_1_2_demo.ipynb' by the student)" in out
    assert sorted(p.name for p in (submitted / "alice" / SLUG).iterdir()) == [
        NOTEBOOK
    ]  # replaced whole
    assert (untouched / NOTEBOOK).read_bytes() == _notebook("carol, not in this download")
    assert _left_out(out) == ["left out: 'ochoaerin_1007_9006_notes.pdf': not a notebook (.ipynb)"]
    assert f"collected 4 submissions of {SLUG} from submissions.zip" in out
    _assert_only_written(root, before, set(placed))


def test_canvas_marks_late_in_lower_case_as_it_writes_it_today(course, tmp_path):
    root, folder, _ = course
    submitted = _reset(course)
    name = "liddellalice_late_1001_9001_demo.ipynb"
    archive = _zip(tmp_path / "submissions.zip", [(name, _notebook("alice"))])
    code, out = _collect(course, archive)
    assert code == 0, out
    assert (submitted / "alice" / SLUG / NOTEBOOK).read_bytes() == _notebook("alice")
    assert f"placed {name!r} as submitted/alice/{SLUG}/{NOTEBOOK} (late, says Canvas)" in out


def test_moodle_download_places_each_students_notebook(course, tmp_path):
    root, folder, _ = course
    submitted = _reset(course)
    zoe = unicodedata.normalize("NFD", "ZOË  ÅNGSTRÖM")  # as a Mac might write it, in capitals
    notebooks = {
        "Alice Liddell_501_assignsubmission_file_demo.ipynb": _notebook("alice"),
        "Bob Builder_502_assignsubmission_file_my work.ipynb": _notebook("bob"),
        f"{zoe}_503_assignsubmission_file_demo.ipynb": _notebook("zoe"),
    }
    archive = _zip(
        tmp_path / "moodle.zip",
        [
            *notebooks.items(),
            (
                "Alice Liddell_501_assignsubmission_onlinetext_onlinetext.html",
                b"<p>see the notebook</p>",
            ),
        ],
    )
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 1, out
    for (name, data), student in zip(notebooks.items(), ("alice", "bob", "zoe")):
        assert (submitted / student / SLUG / NOTEBOOK).read_bytes() == data, student
        assert f"placed {name!r} as submitted/{student}/{SLUG}/{NOTEBOOK}" in out
    assert "(named 'my work.ipynb' by the student; Moodle participant 502, matched by name only)" in out
    assert "(Moodle participant 501, matched by name only)" in out  # no id the roster has: said
    assert _left_out(out) == [
        "left out: 'Alice Liddell_501_assignsubmission_onlinetext_onlinetext.html': "
        "not a notebook (.ipynb)"
    ]
    _assert_only_written(root, before, {"alice", "bob", "zoe"})


def test_moodle_download_in_folders_places_each_students_notebook(course, tmp_path):
    root, folder, _ = course
    submitted = _reset(course)
    notebooks = {
        "Alice Liddell_501_assignsubmission_file_/demo.ipynb": _notebook("alice"),
        "Bob Builder_502_assignsubmission_file_/work/demo.ipynb": _notebook("bob"),
        "Erin Ochoa_507_assignsubmission_file_/demo.ipynb": _notebook("erin"),
        "Erin Ochoa_507_assignsubmission_file_/draft.ipynb": _notebook("erin's draft"),
    }
    folders = [
        (f"{name}_{n}_assignsubmission_file_/", b"")
        for name, n in (("Alice Liddell", 501), ("Bob Builder", 502), ("Erin Ochoa", 507))
    ]
    archive = _zip(tmp_path / "moodle-folders.zip", [*folders, *notebooks.items()])
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 0 and not _left_out(out), out  # folder entries are no files to leave out
    for name, student in zip(list(notebooks)[:3], ("alice", "bob", "erin")):
        assert (submitted / student / SLUG / NOTEBOOK).read_bytes() == notebooks[name], student
    _assert_only_written(root, before, {"alice", "bob", "erin"})


def test_moodle_41_download_in_folders_places_each_students_notebook(course, tmp_path):
    """Moodle 4.1 and later name the folder without a trailing underscore
    (<full name>_<participant id>_assignsubmission_file/), in folders by default; an online
    text's folder and a file that carries a folder's name are left out, each with a line."""
    root, folder, _ = course
    submitted = _reset(course)
    notebooks = {
        "Alice Liddell_501_assignsubmission_file/demo.ipynb": _notebook("alice"),
        "Bob Builder_502_assignsubmission_file/work/my demo.ipynb": _notebook("bob"),
    }
    folders = [("Alice Liddell_501_assignsubmission_file/", b""), ("Bob Builder_502_assignsubmission_file/", b"")]
    others = [
        ("Alice Liddell_501_assignsubmission_onlinetext/onlinetext.html", b"<p>see the notebook</p>"),
        ("Erin Ochoa_507_assignsubmission_file", _notebook("erin")),
    ]
    archive = _zip(tmp_path / "moodle-41.zip", [*folders, *notebooks.items(), *others])
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 1, out
    for name, student in zip(notebooks, ("alice", "bob")):
        assert (submitted / student / SLUG / NOTEBOOK).read_bytes() == notebooks[name], student
        assert f"placed {name!r} as submitted/{student}/{SLUG}/{NOTEBOOK}" in out
    assert "(named 'my demo.ipynb' by the student; Moodle participant 502, matched by name only)" in out
    assert _left_out(out) == [
        "left out: 'Alice Liddell_501_assignsubmission_onlinetext/onlinetext.html': not a notebook (.ipynb)",
        "left out: 'Erin Ochoa_507_assignsubmission_file': not a notebook (.ipynb)",
    ]
    _assert_only_written(root, before, {"alice", "bob"})


def test_moodles_grading_worksheet_places_each_file_by_its_senders_email(course, tmp_path):
    """A name is all Moodle's download says of who sent a file, and a student may change theirs:
    ivy, renamed "Carol Danvers", is placed as the absent carol by the name alone (said in the line).
    With the grading worksheet, each participant's email decides: ivy's file is ivy's."""
    root, folder, _ = course
    submitted = _reset(course)
    notebooks = {
        "Alice Liddell_501_assignsubmission_file/demo.ipynb": _notebook("alice"),
        "Carol Danvers_601_assignsubmission_file/demo.ipynb": _notebook("ivy, as carol"),
        "Jay Bird_701_assignsubmission_file/demo.ipynb": _notebook("jay, not in the worksheet"),
    }
    archive = _zip(tmp_path / "moodle.zip", list(notebooks.items()))
    code, out = _collect(course, archive)
    assert "as submitted/carol/00_demo/demo.ipynb (Moodle participant 601, matched by name only)" in out, out
    worksheet = tmp_path / "worksheet.csv"
    worksheet.write_text("\ufeffIdentifier,Full name,Email address,Status,Grade\n"  # Moodle writes a BOM
                         "Participant 501,Alice Liddell,alice@example.edu,Submitted,\n"
                         "Participant 601,Carol Danvers,IVY@example.edu,Submitted,\n", encoding="utf-8")
    submitted = _reset(course)
    code, out = call_cli("course", "collect", "0", "--zip", str(archive), "--worksheet", str(worksheet), *course[2])
    assert code == 1, out
    assert (submitted / "ivy" / SLUG / NOTEBOOK).read_bytes() == _notebook("ivy, as carol")
    assert not (submitted / "carol").exists(), "the name shown in the download decides nothing"
    assert ("as submitted/ivy/00_demo/demo.ipynb (Moodle participant 601 (IVY@example.edu), matched by email)"
            in out), out
    assert "(Moodle participant 501 (alice@example.edu), matched by email)" in out, out
    assert _left_out(out) == ["left out: 'Jay Bird_701_assignsubmission_file/demo.ipynb': Moodle participant 701 "
                              "is not in the grading worksheet"]
    worksheet.write_text("Name,Grade\nAlice,5\n")
    code, out = call_cli("course", "collect", "0", "--zip", str(archive), "--worksheet", str(worksheet), *course[2])
    assert code == 2 and ("--worksheet: expected Moodle's grading worksheet, with Identifier and Email address "
                          "columns;") in out, out
    code, out = call_cli("course", "collect", "0", "--worksheet", str(worksheet), *course[2])
    assert code == 2 and "--worksheet: Moodle's grading worksheet goes with its download: give --zip too" in out


def test_a_file_named_as_a_moodle_folder_is_no_ones_submission():
    """The folder's name alone, on a notebook, names no file the student gave: left out."""
    roster = {"erin": {"first_name": "Erin", "last_name": "Ochoa"}}
    placed, left_out = lms_zip.plan({"00001.ipynb": "Erin Ochoa_507_assignsubmission_file"}, roster, "demo.ipynb")
    assert not placed
    assert left_out == ["'Erin Ochoa_507_assignsubmission_file': a Moodle submission folder's name on a file"]


BIG = bytes(16 * 1024 * 1024 + 1)  # one byte over the notebook limit: a few kB once deflated
NOTE = _notebook("not theirs to place")


def _ways_in(outside: Path) -> list[tuple[str, list, str]]:
    """One row per way in: what it tries, its members (name or ZipInfo, bytes), and how the line
    about it starts after `left out: `. A ~ and a ! in a name are patched into the zip later."""

    def file(name, reason, data=NOTE, shown=None):
        return [(name, data)], f"{shown or name!r}: {reason}"

    control = "a control or invisible character in its name"
    return [
        ("climbs out with ..", *file("../../outside/climbed.ipynb", "'..' in its path")),
        (
            "climbs out of a Moodle folder",
            *file("Alice Liddell_501_assignsubmission_file_/../../x.ipynb", "'..' in its path"),
        ),
        ("an absolute path", *file(str(outside / "absolute.ipynb"), "an absolute path")),
        ("a Windows drive", *file("C:/Users/demo.ipynb", "an absolute path")),
        ("backslashes", *file("..\\..\\outside\\demo.ipynb", "a backslash in its name")),
        (
            "a link to a file outside",
            *file(
                _entry("liddellalice_1001_1_demo.ipynb", stat.S_IFLNK | 0o777),
                "a symbolic link, not a file",
                str(outside / "secret.txt").encode(),
                "liddellalice_1001_1_demo.ipynb",
            ),
        ),
        (
            "a fifo",
            *file(
                _entry("builderbob_1002_2_demo.ipynb", stat.S_IFIFO | 0o644),
                "not a regular file (a device, fifo or socket entry)",
                b"",
                "builderbob_1002_2_demo.ipynb",
            ),
        ),
        ("a newline", *file("liddellalice_1001_3_demo\n.ipynb", control)),
        ("a terminal escape", *file("\x1b[2J\x1b[Hdemo.ipynb", control)),
        ("a right-to-left override", *file("liddellalice_1001_4_\u202ebnypi.ipynb", control)),
        (
            "a NUL",
            *file(
                "liddellalice_1001_5_demo~.ipynb",
                control,
                shown="liddellalice_1001_5_demo\x00.ipynb",
            ),
        ),
        # zipfile reads a name without the UTF-8 flag as cp437, so Latin-1's é shows as Θ
        (
            "a name not in UTF-8",
            *file(
                "liddellalice_1001_6_d!mo.ipynb",
                "its name is not UTF-8",
                shown="liddellalice_1001_6_d\u0398mo.ipynb",
            ),
        ),
        (
            "a notebook over the limit",
            *file("ochoaerin_1007_7_demo.ipynb", "larger than 16 MiB, the notebook limit", BIG),
        ),
        (
            "a size the header understates",
            *file("ochoaerin_1007_8_demo.ipynb", "cannot be unpacked (BadZipFile", BIG),
        ),
        (
            "an encrypted member",
            *file("oceanfrank_1008_9_demo.ipynb", "encrypted (password-protected)"),
        ),
        (
            "a zip inside",
            *file("builderbob_1002_10_demo.zip", "an archive inside the download, not unpacked"),
        ),
        (
            "a file that is no notebook",
            *file("builderbob_1002_11_demo.py", "not a notebook (.ipynb)"),
        ),
        (
            "a Canvas id not in the roster",
            *file(
                "nobody_4242_12_demo.ipynb", "Canvas user 4242 is no roster student's lms_user_id"
            ),
        ),
        (
            "a Canvas id of two roster rows",
            *file(
                "twingus_1009_13_demo.ipynb",
                "reads as the Canvas user id of "
                "more than one roster student: gus (1009), hal (1009)",
            ),
        ),
        (
            "a Canvas name ending in someone's id",
            *file(
                "mal_1001_4343_14_demo.ipynb",
                "reads as Canvas users 1001, 4343, and its name part 'mal' is not alice's "
                "('liddellalice')",
            ),
        ),
        (
            "anonymous grading",
            *file("anon_Xy12z_15_demo.ipynb", "anonymous grading hides who sent it"),
        ),
        (
            "a Moodle name not in the roster",
            *file(
                "Mallory Moe_601_assignsubmission_file_demo.ipynb",
                "no roster student is named 'Mallory Moe'",
            ),
        ),
        (
            "a Moodle name two students share",
            *file(
                "Dave Smith_602_assignsubmission_file_demo.ipynb",
                "2 roster students are named 'Dave Smith' (dave1, dave2)",
            ),
        ),
        (
            "someone's Moodle name inside a submission",
            *file(
                "Mallory Moe_601_assignsubmission_file_sub/"
                "Carol Danvers_605_assignsubmission_file_demo.ipynb",
                "no roster student is named 'Mallory Moe'",
            ),
        ),
        (
            "Moodle's blind marking",
            *file(
                "Participant_608_assignsubmission_file_demo.ipynb",
                "no roster student is named 'Participant' (blind marking hides who sent it)",
            ),
        ),
        (
            "a student's Moodle name taken by another participant",
            [
                ("Zoë Ångström_603_assignsubmission_file_demo.ipynb", NOTE),
                ("Zoë Ångström_604_assignsubmission_file_demo.ipynb", _notebook("zoe")),
            ],
            "student zoe: files from Moodle participant 603 and Moodle participant 604, "
            "not one sender",
        ),
        (
            "two notebooks, neither the module's",
            [(f"Bob Builder_606_assignsubmission_file_/{n}.ipynb", NOTE) for n in "ab"],
            "student bob: 2 notebooks and none is demo.ipynb",
        ),
        (
            "one name twice",
            [
                ("Erin Ochoa_607_assignsubmission_file_demo.ipynb", data)
                for data in (NOTE, _notebook("erin"))
            ],
            "student erin: 2 notebooks and more than one is demo.ipynb",
        ),
        (
            "a student folder that is a link",
            *file(
                "leeivy_1010_16_demo.ipynb",
                f"submitted/ivy/{SLUG} is a link or a file, not a folder",
            ),
        ),
    ]


def _hostile(folder: Path, outside: Path) -> tuple[Path, list[tuple[str, list, str]]]:
    """A download with every way in, and carol's honest notebook."""
    ways = _ways_in(outside)
    members = [m for _, those, _ in ways for m in those]
    archive = _zip(
        folder / "hostile.zip", [*members, ("danverscarol_1003_17_demo.ipynb", _notebook("carol"))]
    )
    archive.write_bytes(
        archive.read_bytes().replace(b"_demo~.", b"_demo\x00.").replace(b"_d!mo.", b"_d\xe9mo.")
    )

    def encrypted(data, flags, size):
        data[flags] |= 0x1

    def understated(data, flags, size):
        data[size : size + 4] = (100).to_bytes(4, "little")

    _patch_headers(archive, b"oceanfrank_1008_9_demo.ipynb", encrypted)
    _patch_headers(archive, b"ochoaerin_1007_8_demo.ipynb", understated)
    return archive, ways


def test_every_way_in_is_left_out_with_a_line_naming_the_file(course, tmp_path):
    root, folder, _ = course
    submitted = _reset(course)
    (submitted / "ivy").mkdir(parents=True)
    (submitted / "ivy" / SLUG).symlink_to(root / "outside", target_is_directory=True)
    archive, ways = _hostile(tmp_path, root / "outside")
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 1, out
    lines = _left_out(out)
    missing = [
        f"{what}: no line starting `left out: {start}`"
        for what, _, start in ways
        if not any(line.startswith(f"left out: {start}") for line in lines)
    ]
    assert not missing, "\n".join(missing) + "\n--- output ---\n" + out
    assert (submitted / "carol" / SLUG / NOTEBOOK).read_bytes() == _notebook("carol")
    assert sorted(p.name for p in submitted.iterdir()) == ["carol", "ivy"]
    assert sorted(p.name for p in (root / "outside").iterdir()) == ["secret.txt"]
    assert f"{len(lines)} left out (above)" in out
    _assert_only_written(root, before, {"carol"})


def test_a_notebook_autograde_would_refuse_is_left_out_with_its_reason(course, tmp_path):
    root, folder, _ = course
    submitted = _reset(course)
    honest = json.loads(nbformat.writes(instructor_notebook(discover_modules(FIXTURE_MODULES)[0])))
    senders = ["liddellalice_1001", "builderbob_1002", "angstromzoe_1004", "smithdave_1005",
               "smithdave_1006", "ochoaerin_1007", "oceanfrank_1008", "leeivy_1010", "birdjay_1011"]
    assert len(senders) >= len(WORST)
    cases = {f"{sender}_{n}_demo.ipynb": (case, *worst_case(honest, case))
             for n, (sender, case) in enumerate(zip(senders, WORST))}
    archive = _zip(tmp_path / "worst.zip", [*((name, data) for name, (_, data, _) in cases.items()),
                                            ("danverscarol_1003_99_demo.ipynb", _notebook("carol"))])
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 1, out
    lines = _left_out(out)
    missing = [case for name, (case, _, said) in cases.items()
               if not any(line.startswith(f"left out: {name!r}: student ") and
                          "'s notebook is not a readable notebook (" in line and said in line for line in lines)]
    assert not missing, f"no line for {missing}\n{out}"
    assert len(lines) == len(cases) and all(len(line) < 400 for line in lines), out
    assert sorted(p.name for p in submitted.iterdir()) == ["carol"], "autograde's screen would refuse the others"
    _assert_only_written(root, before, {"carol"})


def test_a_zip_bomb_stops_at_the_total_and_places_nothing(course, tmp_path, monkeypatch):
    root, folder, _ = course
    submitted = _reset(course)
    monkeypatch.setattr(lms_zip, "TOTAL_LIMIT", 1024 * 1024)
    archive = _zip(
        tmp_path / "bomb.zip",
        [(f"liddellalice_1001_{n}_demo.ipynb", bytes(600_000)) for n in range(2)],
    )
    before = _files(root)
    code, out = _collect(course, archive)
    assert (
        code == 2
        and "--zip: expected a zip file (Canvas's or Moodle's download of all submissions); "
        f"{archive} unpacks to more than 1 MiB of notebooks (a zip bomb?)"
        in out
    ), out
    assert not submitted.exists() and not any(
        (folder / "downloaded" / SLUG / "extracted").iterdir()
    )
    _assert_only_written(root, before, set())


def _text(path: Path) -> Path:
    path.write_text("id,name\n")
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link(path: Path) -> Path:
    _zip(path.with_name("real.zip"), [("liddellalice_1001_1_demo.ipynb", _notebook("alice"))])
    path.symlink_to(path.with_name("real.zip"))
    return path


WHOLE_ARCHIVE = {  # the --zip argument, made in a folder; what the line says came
    "not a zip": (_text, "is not a zip (File is not a zip file)"),
    "an empty zip": (lambda p: _zip(p, []), "is an empty zip"),
    "a link": (_link, "is a symbolic link (give the file it points to)"),
    "a fifo": (_fifo, "is not a regular file (a fifo, socket or device)"),
    "a folder": (_folder, "is a folder"),
    "not there": (lambda p: p, "is not there"),
    "too many files": (
        lambda p: _zip(p, [(f"x{n}.ipynb", b"{}") for n in range(4)]),
        "holds 4 files; at most 3 are read (a zip bomb?)",
    ),
}


@pytest.mark.parametrize("kind", WHOLE_ARCHIVE)
def test_a_download_that_is_not_a_readable_zip_is_refused_whole(
    course, tmp_path, monkeypatch, kind
):
    root, folder, _ = course
    monkeypatch.setattr(lms_zip, "MEMBER_LIMIT", 3)
    make, came = WHOLE_ARCHIVE[kind]
    archive = make(tmp_path / "submissions.zip")
    before = _files(root)
    code, out = _collect(course, archive)
    assert code == 2, out
    assert (
        "--zip: expected a zip file (Canvas's or Moodle's download of all submissions); "
        f"{archive} {came}" in out
    )
    assert _files(root) == before


def test_without_a_roster_the_download_cannot_be_matched(tmp_path):
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    archive = _zip(
        tmp_path / "submissions.zip", [("liddellalice_1001_1_demo.ipynb", _notebook("alice"))]
    )
    code, out = call_cli("course", "collect", "0", "--zip", str(archive), *common)
    assert (
        code == 2 and "--zip: placing a download needs the roster (names and LMS user ids)" in out
    ), out
    assert "run `tinyflo course roster FILE --dir" in out and not (course / "submitted").exists()
