"""`tinyflo course hub`: the configuration of a JupyterHub that serves the course with nbgrader's exchange.

Two files, for the administrator to put in place (the instructor guide's "A semester on a JupyterHub"):

* `jupyterhub_config.py`: students and the instructor log in as their own Unix users (PAM) and each
  one's JupyterLab runs as that user from the hub's environment (`--env`), in which the student kit
  is installed; so every file in the exchange is owned by the student who put it there, which is
  how `tinyflo course collect` knows a submission is theirs. With per-user limits (`--memory`,
  `--cpus`) each JupyterLab and its kernels run in a systemd unit of their own held to them
  (jupyterhub-systemdspawner); a machine without systemd is told so in a line, and serves with
  none only when asked (`--memory 0 --cpus 0`).
* `nbgrader_config.py`, for `<env>/etc/jupyter/`: where the exchange is and which course it serves,
  for every user's Assignments tab.
"""

from __future__ import annotations

import grp
import json
import re
import stat
import subprocess
from pathlib import Path

from tinyflo.core.checkpoints import atomic_write
from tinyflo.course.semester.nbgrader_run import COURSE_ID
from tinyflo.course.source import VALID_ID, CourseError

HUB_CONFIG = "jupyterhub_config.py"
USER_CONFIG = "nbgrader_config.py"  # for <env>/etc/jupyter/


MEMORY, CPUS = "1G", "1"  # per user: a JupyterLab (~150 MiB), two kernels and a milestone's data fit


def render_hub_config(env: Path, instructor: str, group: str, state: Path, config_dir: Path,
                      idle_minutes: int = 60, memory: str = MEMORY, cpus: str = CPUS) -> str:
    """jupyterhub_config.py for the course (see the module docstring); `memory` and `cpus` are
    checked (`per_user_limits`), "0" each for none."""
    singleuser = env / "bin" / "jupyterhub-singleuser"
    spawner = 'c.JupyterHub.spawner_class = "localprocess"\n'
    if per_user_limits(memory, cpus):
        spawner = (
            "\n# Each user's JupyterLab and its kernels run in a systemd unit of their own, as that Unix\n"
            "# user (not one systemd makes up: the exchange's files must be the student's), held to the\n"
            "# limits below: past the memory, its largest process (as a rule the kernel that grew) is\n"
            "# stopped and the server goes on; the CPU limit is a share of time, never a stop.\n"
            'c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"\n'
            "c.SystemdSpawner.dynamic_users = False\n"
            'c.SystemdSpawner.username_template = "{USERNAME}"\n'
            + (f"c.Spawner.mem_limit = {json.dumps(memory)}\n" if memory != "0" else "")
            + (f"c.Spawner.cpu_limit = {float(cpus)!r}\n" if float(cpus) else "")
        )
    culler = (
        f"\n# A student's JupyterLab left idle {idle_minutes} minutes is stopped (its memory freed; their files\n"
        "# stay): jupyterhub-idle-culler, a service of the hub's, with only the rights it needs.\n"
        'c.JupyterHub.load_roles = [{"name": "idle-culler", "services": ["idle-culler"], "scopes": [\n'
        '    "list:users", "read:users:activity", "read:servers", "delete:servers"]}]\n'
        f'c.JupyterHub.services = [{{"name": "idle-culler", "command": [{json.dumps(str(env / "bin" / "python3"))}, '
        f'"-m", "jupyterhub_idle_culler", "--timeout={idle_minutes * 60}"]}}]\n'
    ) if idle_minutes else ""
    return (
        "# JupyterHub for the tinyflo course, written by `tinyflo course hub`. As root:\n"
        f"#   {env / 'bin' / 'jupyterhub'} -f {config_dir / HUB_CONFIG}\n"
        "c = get_config()  # noqa: F821\n\n"
        "# Everyone logs in as their own Unix user and their JupyterLab runs as that user: the exchange's\n"
        "# files are then owned by whoever submitted them (tinyflo course collect checks that).\n"
        'c.JupyterHub.authenticator_class = "pam"\n'
        f"c.Authenticator.admin_users = {{{json.dumps(instructor)}}}\n"
        f"c.Authenticator.allowed_users = {{{json.dumps(instructor)}}}\n"
        f"c.LocalAuthenticator.allowed_groups = {{{json.dumps(group)}}}  # the students' Unix group\n"
        + spawner +
        "\n# JupyterLab from the hub's environment: JupyterLab, nbgrader (its Assignments tab) and the\n"
        "# student kit, whose settings switch nbgrader's instructor tools off; its python3 kernel is\n"
        "# the one the course's notebooks name.\n"
        f"c.Spawner.cmd = [{json.dumps(str(singleuser))}]\n"
        'c.Spawner.default_url = "/lab"\n'
        'c.Spawner.notebook_dir = "~"\n\n'
        "# The hub's own state in root's folder: no other user may read or write it.\n"
        f"c.JupyterHub.db_url = {json.dumps('sqlite:///' + str(state / 'jupyterhub.sqlite'))}\n"
        f"c.JupyterHub.cookie_secret_file = {json.dumps(str(state / 'jupyterhub_cookie_secret'))}\n"
        + culler
    )


def render_user_config(exchange: Path) -> str:
    """nbgrader_config.py for <env>/etc/jupyter/: the exchange every user's Assignments tab uses."""
    return (
        "# nbgrader for every user of the course's JupyterHub, written by `tinyflo course hub`.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.Exchange.root = {json.dumps(str(exchange))}\n"
        f"c.CourseDirectory.course_id = {json.dumps(COURSE_ID)}\n"
        "# A submission stays writable by its author only (nbgrader's own submit opens it to everyone).\n"
        'c.ExchangeFactory.submit = "tinyflo.course.semester.exchange.OwnSubmit"\n'
    )


def per_user_limits(memory: str, cpus: str) -> bool:
    """Whether `--memory` and `--cpus` ask for a limit ("0" each: none); a CourseError for a value
    JupyterHub would not take."""
    if not re.fullmatch(r"0|[0-9]+(\.[0-9]+)?[KMGT]", memory) or (memory != "0" and not float(memory[:-1])):
        raise CourseError(f"--memory: a size such as 1G or 512M expected (0: no limit), got {memory!r}")
    try:
        share = float(cpus)
    except ValueError:
        share = -1.0
    if not 0 <= share < float("inf"):
        raise CourseError(f"--cpus: a number of CPUs such as 1 or 0.5 expected (0: no limit), got {cpus!r}")
    return memory != "0" or share > 0


def runs_systemd() -> bool:
    """Whether this machine was booted with systemd (sd_booted: /run/systemd/system exists), which
    jupyterhub-systemdspawner needs to hold each server to its limits."""
    return Path("/run/systemd/system").is_dir()


def open_to_others(env: Path) -> Path | None:
    """The first folder of the hub's environment that a user other than root could write to: root
    runs its `bin/jupyterhub` and imports its packages, so whoever writes there becomes root."""
    for folder in (env, env / "bin", env / "lib", *sorted(env.glob("lib/python*")),
                   *sorted(env.glob("lib/python*/site-packages"))):
        if folder.exists() and (folder.stat().st_uid != 0 or folder.stat().st_mode & 0o022):
            return folder
    return None


def closed_to_students(env: Path, group: str) -> str:
    """What keeps a student's JupyterLab from starting out of the hub's environment ('' when
    nothing): the hub starts it as the student, who must enter every folder above its Python (the
    interpreter a virtual environment links to, and its standard library) and its packages, and run
    the interpreter. A member of `group` passes by the group's bits where the folder is the group's,
    by the others' bits elsewhere. Only what exists is looked at."""
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        gid = None
    places = [(env / "bin" / "python3").resolve(), *sorted(env.glob("lib/python*/site-packages"))]
    settings = env / "pyvenv.cfg"  # a virtual environment: its interpreter's own prefix too
    if settings.is_file():
        home = next((line.split("=", 1)[1].strip() for line in settings.read_text().splitlines()
                     if line.split("=", 1)[0].strip() == "home"), "")
        if home:
            places += sorted(Path(home).resolve().parent.glob("lib/python3*"))
    entered: set[Path] = set()  # the places share most of their folders: each is looked at once
    for place in places:
        if not place.exists():
            continue
        for folder in [*reversed(place.parents), *([place] if place.is_dir() else [])]:
            if folder in entered:
                continue
            entered.add(folder)
            info = folder.stat()
            bit = stat.S_IXGRP if info.st_gid == gid else stat.S_IXOTH
            if not info.st_mode & bit:
                return f"{folder} (mode {stat.S_IMODE(info.st_mode):o}) lets no student enter it"
        if place.is_file():
            info = place.stat()
            bits = (stat.S_IRGRP | stat.S_IXGRP) if info.st_gid == gid else (stat.S_IROTH | stat.S_IXOTH)
            if info.st_mode & bits != bits:
                return f"{place} (mode {stat.S_IMODE(info.st_mode):o}) cannot be run by a student"
    return ""


def write_hub_config(out: Path, env: Path, exchange: Path, instructor: str, group: str, config_dir: Path,
                     state: Path, idle_minutes: int = 60, memory: str = MEMORY, cpus: str = CPUS) -> list[Path]:
    """Write the hub's two files into `out`; their paths."""
    for option, value in (("--env", env), ("--exchange", exchange), ("--out", out),
                          ("--config-dir", config_dir), ("--state", state)):
        if not value.is_absolute() or any(ord(c) < 32 or ord(c) == 127 for c in str(value)):
            raise CourseError(f"{option}: an absolute path without control characters expected, got {str(value)!r}")
    for option, name in (("--instructor", instructor), ("--group", group)):
        if not VALID_ID.match(name):
            raise CourseError(f"{option}: a Unix user or group name expected, got {name!r}")
    written = []
    if (folder := open_to_others(env)) is not None:
        raise CourseError(f"--env: root runs the hub from {env}, and {folder} can be written by a user other than "
                          f"root, who would become root; expected it root's alone: chown -R root: {env} && "
                          f"chmod -R go-w {env}")
    if closed := closed_to_students(env, group):
        raise CourseError(f"--env: each student's JupyterLab runs from {env} as the student, and {closed}: their "
                          "servers would not start (the hub answers HTTP 500); expected every folder above the "
                          "environment's Python and packages enterable by the students (chmod o+x), or the "
                          "environment made with a Python installed where they can reach it (e.g. under /opt)")
    limited = per_user_limits(memory, cpus)
    if limited and not runs_systemd():
        raise CourseError("--memory, --cpus: each student's JupyterLab is held to them by systemd (jupyterhub-"
                          "systemdspawner), and this machine does not run systemd (no /run/systemd/system): serve "
                          "the hub from a machine booted with systemd, or give --memory 0 --cpus 0 for no limits")
    python = env / "bin" / "python3"
    for wanted, option, package, module, does, off in (
            (idle_minutes, "--idle-minutes", "jupyterhub-idle-culler", "jupyterhub_idle_culler",
             "stops idle servers", "--idle-minutes 0"),
            (limited, "--memory, --cpus", "jupyterhub-systemdspawner", "systemdspawner",
             "holds each server to them", "--memory 0 --cpus 0")):
        if wanted and python.exists() and subprocess.run(
                [str(python), "-c", f"import {module}"], capture_output=True, timeout=60).returncode:
            raise CourseError(f"{option}: the hub's environment {env} has no {package}, which {does}: install it "
                              f"there ({env / 'bin' / 'pip'} install {package}), or give {off}")
    for name, text in ((HUB_CONFIG, render_hub_config(env, instructor, group, state, config_dir, idle_minutes,
                                                      memory, cpus)),
                       (USER_CONFIG, render_user_config(exchange))):
        atomic_write(out / name, lambda handle, text=text: handle.write(text.encode("utf-8")))
        written.append(out / name)
    return written
