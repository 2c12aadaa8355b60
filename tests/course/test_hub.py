"""A semester's module on a real JupyterHub: real Unix users, nbgrader's real exchange, tinyflo's commands.

An instructor and three students are made as Unix users. Root sets the hub up with the instructor
guide's commands as written: a new virtual environment and one `pip install` of JupyterHub, its idle
culler and spawner and the student kit, from the package index; the files `tinyflo course hub` wrote,
installed with the steps it printed; the hub started with the command it printed. The test changes
only paths (a folder of its own for /opt, /etc and /var), adds the hub's ports and start time limits,
and serves without per-user limits (`--memory 0 --cpus 0`): those are systemd's, and the machines
this runs on boot without it, so the limits `course hub` writes for a machine with systemd are read
by the environment's own SystemdSpawner, not enforced.

Each student logs in through the hub's login form with their Unix password (PAM), starts their
JupyterLab and acts only through the cookies their session gets, as their browser would; no one acts
with an admin's token. Module 01 goes out with `tinyflo course release`; each student fetches and
submits from their own JupyterLab (the reference, the blank release, one with a bug) through
nbgrader's Assignments API, as the Assignments tab does; the instructor collects, grades and returns
feedback with `tinyflo course collect / autograde / feedback`; each student fetches their own page.
One student tries to read the others' work and to hand in a submission in another's name. Chromium
logs in as a student and finds module 01 in the Assignments tab.

Needs root (it makes the users), python3 and the package index (the hub's environment),
configurable-http-proxy (npm) and bubblewrap; skipped without them, a failure with
TINYFLO_REQUIRE_HUB=1 (as in CI).
"""

from __future__ import annotations

import csv
import http.cookiejar
import json
import os
import pwd
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from course_support import FIXTURE_MODULES, MUTANTS, REPO, apply_mutant, call_cli, secret_lines
from traitlets.config import Config

from tinyflo.course.grader.sandbox import bwrap_works
from tinyflo.course.kit.build import build_student_kit
from tinyflo.course.notebooks import instructor_notebook, write_notebook
from tinyflo.course.semester import hub as course_hub
from tinyflo.course.source import discover_modules

pytestmark = pytest.mark.slow

MODULES = discover_modules(REPO / "modules")
MODULE = next(m for m in MODULES if m.slug == "01_tensor")
ASSIGNMENT = {"course_id": "tinyflo", "assignment_id": MODULE.slug}
PASSWORD = secrets.token_urlsafe(12)
BIN = Path(sys.executable).parent
# Root's commands run without this test's virtual environment on PATH, as on a machine that has none.
ROOT_PATH = os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if Path(p) != BIN)


def _missing() -> str | None:
    """Why this machine cannot run a hub with real users (None when it can)."""
    if os.geteuid() != 0:
        return "the hub test makes Unix users: it needs root"
    for tool in ("useradd", "userdel", "groupadd", "groupdel", "chpasswd", "setpriv", "pkill"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
    if shutil.which("configurable-http-proxy") is None:
        return "no configurable-http-proxy on PATH (npm install -g configurable-http-proxy)"
    if shutil.which("python3", path=ROOT_PATH) is None:
        return "no python3 on PATH to make the hub's environment with"
    return bwrap_works() or None


@dataclass
class Site:
    """The machine the hub serves: its folder, the users by role, the students' group."""

    root: Path
    users: dict[str, str]  # role -> Unix user name
    group: str

    def home(self, role: str) -> Path:
        return Path(pwd.getpwnam(self.users[role]).pw_dir)

    @property
    def course(self) -> Path:
        return self.home("instructor") / "course"

    @property
    def exchange(self) -> Path:
        return self.root / "exchange"


@pytest.fixture(scope="module")
def site():
    """An instructor and three students as Unix users (homes closed to others), removed afterwards."""
    problem = _missing()
    if problem:
        if os.environ.get("TINYFLO_REQUIRE_HUB") == "1":
            pytest.fail(f"TINYFLO_REQUIRE_HUB=1, but {problem}")
        pytest.skip(problem)
    root = Path(tempfile.mkdtemp(prefix="tinyflo-hub-"))  # not pytest's: closed to other users
    os.chmod(root, 0o755)
    (root / "home").mkdir()
    tag = secrets.token_hex(3)
    users = {"instructor": f"tfi{tag}", "ada": f"tfa{tag}", "ben": f"tfb{tag}", "cy": f"tfc{tag}"}
    group = f"tfg{tag}"
    subprocess.run(["groupadd", group], check=True)
    try:
        for role, name in users.items():
            member = [] if role == "instructor" else ["-G", group]
            home = root / "home" / name
            subprocess.run(["useradd", "-m", "-d", str(home), "-s", "/bin/sh", *member, name], check=True)
            # students' homes their own; the instructor's open to all, as many systems make homes:
            # the course folder in it must close itself
            os.chmod(home, 0o755 if role == "instructor" else 0o700)
        subprocess.run(["chpasswd"], input="".join(f"{name}:{PASSWORD}\n" for name in users.values()),
                       text=True, check=True)
        yield Site(root, users, group)
    finally:
        for name in users.values():
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            subprocess.run(["userdel", "-r", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _as(site: Site, role: str, *command: str) -> subprocess.CompletedProcess:
    """`command` run as that user, with their home and a plain environment."""
    user = pwd.getpwnam(site.users[role])
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name, "LANG": "C.UTF-8",
           "PATH": f"{BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin"}
    return subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--", *command],
        cwd=user.pw_dir, env=env, capture_output=True, text=True, timeout=300,
    )


def _course(site: Site, *args: str, code: int = 0) -> str:
    """`tinyflo course ARGS` as the instructor, in their course folder; its output (its exit status `code`)."""
    done = _as(site, "instructor", "tinyflo", "course", *args, "--dir", str(site.course),
               "--modules", str(REPO / "modules"))
    assert done.returncode == code, f"tinyflo course {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _as_root(*command: str) -> None:
    """`command` run as root, as the guide has the administrator run it; its output shown if it fails."""
    done = subprocess.run(command, env=dict(os.environ, PATH=ROOT_PATH), capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _hub_environment(site: Site) -> Path:
    """The hub's environment, made word for word as the guide has root make it: a new virtual
    environment, then one pip install of JupyterHub, its idle culler and spawner, and the student
    kit with its course extra (JupyterLab, nbgrader), from the package index."""
    env = site.root / "env"
    kit = build_student_kit(site.root / "kit", [MODULE])  # the module this semester has released
    _as_root("python3", "-m", "venv", "--upgrade-deps", str(env))
    _as_root(str(env / "bin" / "pip"), "install", "jupyterhub", "jupyterhub-idle-culler",
             "jupyterhub-systemdspawner", f"{kit}[course]")
    return env


# What the environment's own SystemdSpawner makes of a configuration with per-user limits.
SPAWNER_READS = """
import json, logging, sys, types
from jupyterhub.app import JupyterHub
from traitlets.config.loader import PyFileConfigLoader
logging.basicConfig()  # a setting the spawner does not know is said on stderr
config = PyFileConfigLoader(sys.argv[1]).load_config()
spawner = JupyterHub(config=config).spawner_class(config=config, user=types.SimpleNamespace(name=sys.argv[2], id=1))
print(json.dumps({"class": type(spawner).__name__, "mem_limit": spawner.mem_limit, "cpu_limit": spawner.cpu_limit,
                  "dynamic_users": spawner.dynamic_users, "cmd": spawner.cmd,
                  "user": spawner._expand_user_vars(spawner.username_template)}))
"""


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for probe in sockets:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in sockets]
    for probe in sockets:
        probe.close()
    return ports


class Hub:
    """A running JupyterHub, started as root with the command `course hub` printed; the test adds
    only its ports and patience for servers starting on a busy machine."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.port, hub_port, api_port = _free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*command, "--ip=127.0.0.1", f"--port={self.port}", f"--JupyterHub.hub_port={hub_port}",
             f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{api_port}", "--Spawner.start_timeout=180",
             "--Spawner.http_timeout=180"],
            cwd=log.parent, env=dict(os.environ, PATH=ROOT_PATH), stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.log = log
        deadline = time.monotonic() + 90
        while True:
            try:  # the hub's API says its version to anyone
                urllib.request.urlopen(f"{self.url}/hub/api/", timeout=10).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the hub did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.3)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Student:
    """One student at the hub, as their browser is: logged in with their Unix password through the
    hub's login form, then acting only through the cookies the hub and their own JupyterLab set."""

    def __init__(self, hub: Hub, name: str) -> None:
        self.hub, self.name = hub, name
        self.cookies = http.cookiejar.CookieJar()
        self.browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def request(self, method: str, path: str, body: bytes | None = None, kind: str = "application/json") -> bytes:
        """`path` on the hub, with this student's cookies and, as their pages send it, the _xsrf
        token the page set for that path."""
        headers = {"Content-Type": kind}
        tokens = sorted((c for c in self.cookies if c.name == "_xsrf" and path.startswith(c.path)),
                        key=lambda c: len(c.path))
        if tokens:
            headers["X-XSRFToken"] = tokens[-1].value
        request = urllib.request.Request(f"{self.hub.url}{path}", method=method, data=body, headers=headers)
        with self.browser.open(request, timeout=120) as reply:
            return reply.read()

    def log_in(self, password: str = PASSWORD) -> None:
        """The hub's login page, its form sent with their password, then Start My Server."""
        self.request("GET", "/hub/login")
        form = {"username": self.name, "password": password,
                "_xsrf": next(c.value for c in self.cookies if c.name == "_xsrf")}
        self.request("POST", "/hub/login?next=/hub/home", urllib.parse.urlencode(form).encode(),
                     "application/x-www-form-urlencoded")
        assert any(c.name == "jupyterhub-hub-login" for c in self.cookies), f"{self.name} was not logged in"
        self.request("POST", f"/hub/api/users/{self.name}/server", b"{}")

    def open_lab(self, deadline: float) -> None:
        """Once their JupyterLab is up, open it: the hub's OAuth hands it their session."""
        while not (json.loads(self.request("GET", "/hub/api/user"))["servers"].get("") or {}).get("ready"):
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}'s server did not start:\n{self.hub.log.read_text()[-3000:]}")
            time.sleep(0.5)
        self.request("GET", f"/user/{self.name}/lab")

    def call(self, method: str, path: str, body: bytes | None = None, kind: str = "application/json"):
        """`path` in their JupyterLab."""
        return json.loads(self.request(method, f"/user/{self.name}{urllib.parse.quote(path)}", body, kind))

    def assignments(self, action: str) -> dict:
        """fetch, submit or fetch_feedback of module 01, as the Assignments tab asks for it."""
        reply = self.call("POST", f"/assignments/{action}", urllib.parse.urlencode(ASSIGNMENT).encode(),
                          "application/x-www-form-urlencoded")
        assert reply["success"], f"{action}: {reply}"
        return reply

    def save(self, path: str, notebook: dict) -> None:
        self.call("PUT", f"/api/contents/{path}",
                  json.dumps({"type": "notebook", "format": "json", "content": notebook}).encode())

    def read(self, path: str) -> dict:
        return self.call("GET", f"/api/contents/{path}")


def _handed_in(role: str, tmp: Path) -> dict | None:
    """What each student hands in: the reference, the untouched release (None), code with a bug."""
    if role == "ben":
        return None
    notebook = instructor_notebook(MODULE)
    if role == "cy":
        mutant = MUTANTS[MODULE.slug][0]
        notebook = apply_mutant(notebook, mutant.old, mutant.new, f"{MODULE.slug} (hub)")
    write_notebook(notebook, tmp / f"{role}.ipynb")
    return json.loads((tmp / f"{role}.ipynb").read_text())


# What a student tries against the others, run as that student: each listing must be refused.
PRYING = """
import os, sys
for path in sys.argv[1:]:
    try:
        print("READ", path, os.listdir(path))
    except PermissionError:
        print("refused", path)
victim = os.environ.get("VICTIM")
if victim:  # a submission in another's name, newer than theirs
    inbound = os.environ["INBOUND"]
    forged = f"{inbound}/{victim}+01_tensor+2099-01-01 00:00:00.000000 UTC+forged"
    os.mkdir(forged)
    open(forged + "/tensor.ipynb", "w").write(open(os.environ["BLANK"]).read())
    print("planted", forged)
    # and the victim's own submission, whose name he has learned: add to it, empty it, rename it
    theirs = os.environ["THEIRS"]
    for name, tamper in (("add", lambda: open(theirs + "/extra.py", "w").close()),
                         ("remove", lambda: os.unlink(theirs + "/tensor.ipynb")),
                         ("rename", lambda: os.rename(theirs, theirs + "-moved"))):
        try:
            tamper()
            print("TAMPERED", name)
        except PermissionError:
            print("kept", name)
"""


def _pry(site: Site, *paths: Path, **forge: str) -> str:
    """Ben lists each of `paths` (and plants a submission in another's name); what he got."""
    done = _as(site, "ben", "env", *(f"{k}={v}" for k, v in forge.items()), sys.executable, "-c", PRYING,
               *map(str, paths))
    assert "READ" not in done.stdout and done.stdout.count("refused") == len(paths), done.stdout + done.stderr
    return done.stdout


def test_a_module_goes_out_comes_back_graded_and_each_student_sees_only_their_own(site, browser, tmp_path,
                                                                                   monkeypatch):
    started = time.monotonic()

    def mark(step: str) -> None:
        print(f"{time.monotonic() - started:6.1f} s  {step}")
    students = ["ada", "ben", "cy"]
    instructor = site.users["instructor"]
    # The administrator, once: the hub's environment, while the instructor builds the course and
    # loads its roster; then the hub's configuration and the steps it prints.
    with ThreadPoolExecutor(1) as pool:
        making = pool.submit(_hub_environment, site)
        _course(site, "build")
        # the instructor's home is open (755), as useradd makes it: the course folder is made closed
        assert stat.S_IMODE(site.course.stat().st_mode) == 0o700
        roster = site.home("instructor") / "students.csv"  # as the guide has it: ids are the Unix logins
        roster.write_text("id,first_name,last_name,email,lms_user_id\n" + "".join(
            f"{site.users[s]},{s.capitalize()},Student,{s}@example.edu,{900 + n}\n" for n, s in enumerate(students)))
        shutil.chown(roster, instructor)
        assert "3 students in the gradebook's roster" in _course(site, "roster", str(roster))
        mark("built, with its roster")
        env = making.result()
    mark("hub environment")
    (site.course / "course.toml").write_text(f'exchange = "{site.exchange}"\n')
    shutil.chown(site.course / "course.toml", instructor)
    hub_dir = site.home("instructor") / "hub"  # written by the instructor, installed by root
    config_dir, state = site.root / "etc-jupyterhub", site.root / "var-jupyterhub"  # root's, as /etc and /var
    # The per-user limits, as `course hub` writes them on a machine booted with systemd, read by the
    # environment's own SystemdSpawner (this machine has no systemd to start a server in a unit).
    monkeypatch.setattr(course_hub, "runs_systemd", lambda: True)
    (site.root / "limited").mkdir()
    limited = course_hub.write_hub_config(site.root / "limited", env, site.exchange, instructor, site.group,
                                          config_dir, state)[0]
    done = subprocess.run([str(env / "bin" / "python3"), "-c", SPAWNER_READS, str(limited), site.users["ada"]],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "not recognized" not in done.stderr, done.stdout + done.stderr
    assert json.loads(done.stdout) == {
        "class": "SystemdSpawner", "mem_limit": 2**30, "cpu_limit": 1.0, "dynamic_users": False,
        "cmd": [str(env / "bin" / "jupyterhub-singleuser")], "user": site.users["ada"]}, done.stdout
    # the hub itself serves without limits, as on a machine without systemd
    done = _as(site, "instructor", str(BIN / "tinyflo"), "course", "hub", "--env", str(env), "--instructor",
               instructor, "--group", site.group, "--out", str(hub_dir), "--config-dir", str(config_dir),
               "--state", str(state), "--memory", "0", "--cpus", "0", "--dir", str(site.course),
               "--modules", str(REPO / "modules"))
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert steps[0] == f"install -d -m 1777 {site.exchange}", done.stdout
    assert steps[-1] == f"{env / 'bin' / 'jupyterhub'} -f {config_dir / 'jupyterhub_config.py'}", done.stdout
    for step in steps[:-1]:  # the exchange, the course's folder in it, root's folders, the settings
        _as_root(*shlex.split(step))
    # the course's folder in the exchange is the instructor's before any student can make it
    assert (site.exchange / "tinyflo").stat().st_uid == pwd.getpwnam(instructor).pw_uid
    hub = Hub(shlex.split(steps[-1]), site.root / "hub.log")
    try:
        # what root runs and keeps is root's: the instructor can change none of it
        for path, mode in ((config_dir / "jupyterhub_config.py", 0o644), (config_dir, 0o755), (state, 0o700)):
            assert path.stat().st_uid == 0 and stat.S_IMODE(path.stat().st_mode) == mode, path
        assert {p.name for p in state.iterdir()} >= {"jupyterhub.sqlite", "jupyterhub_cookie_secret"}
        for target in (config_dir / "jupyterhub_config.py", config_dir / "extra.py", state / "jupyterhub.sqlite"):
            tried = _as(site, "instructor", "sh", "-c", f"echo 'import os' >> '{target}'")
            assert tried.returncode != 0, f"the instructor wrote {target}"
        for _ in range(50):  # the hub starts its services as it comes up
            culler = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                      if "jupyterhub_idle_culler" in (p.info["cmdline"] or [])]
            if culler:
                break
            time.sleep(0.2)
        assert culler and "--timeout=3600" in culler[0], culler  # the hub runs its idle culler, an hour's patience
        mark("hub up")
        semester = time.monotonic()  # from here, the module's round: out, in, graded, back
        sessions = {s: Student(hub, site.users[s]) for s in students}
        for session in sessions.values():  # each logs in with their password; their JupyterLab starts
            session.log_in()
        with ThreadPoolExecutor(1) as pool:  # and only with it (PAM makes a wrong one wait 3 s)
            guessed = pool.submit(Student(hub, site.users["ben"]).log_in, f"not {PASSWORD}")
            out = _course(site, "release", "01")  # while the students' servers start
            assert "in the exchange: 01_tensor" in out, out
            with pytest.raises(urllib.error.HTTPError, match="403"):
                guessed.result()
        mark("released")
        deadline = time.monotonic() + 180
        for session in sessions.values():
            session.open_lab(deadline)
        mark("servers up")
        # each student's JupyterLab before a kernel starts: what sizing a hub (the guide's table) rests on
        uids = {pwd.getpwnam(site.users[s]).pw_uid: s for s in students}
        resident = dict.fromkeys(students, 0)
        for process in psutil.process_iter(["uids", "memory_info"]):
            if process.info["uids"] and process.info["uids"].real in uids and process.info["memory_info"]:
                resident[uids[process.info["uids"].real]] += process.info["memory_info"].rss
        assert all(resident.values()), resident
        print("servers' resident memory: " + ", ".join(f"{s} {rss / 2**20:.0f} MiB" for s, rss in resident.items()))
        for student, session in sessions.items():
            session.assignments("fetch")
            notebook = _handed_in(student, tmp_path)
            if notebook is not None:
                session.save(f"{MODULE.slug}/{MODULE.name}.ipynb", notebook)
            session.assignments("submit")

        inbound = site.exchange / "tinyflo" / "inbound"
        blank = site.home("ben") / MODULE.slug / f"{MODULE.name}.ipynb"
        theirs = next(inbound.glob(f"{site.users['ada']}+*"))
        assert stat.S_IMODE(theirs.stat().st_mode) == 0o755 and inbound.stat().st_mode & stat.S_ISVTX
        said = _pry(site, inbound, site.home("ada"), site.home("cy"), site.course,
                    VICTIM=site.users["ada"], INBOUND=inbound, BLANK=blank, THEIRS=theirs)
        assert "planted" in said and "TAMPERED" not in said and said.count("kept") == 3, said
        mark("submitted")
        out = _course(site, "collect", "01", code=1)  # 1: a submission was left out
        assert f"made by {site.users['ben']}, not by {site.users['ada']}" in out, out
        assert "collected 01_tensor: 3 submissions" in out, out
        mark("collected")
        out = _course(site, "autograde", "01", "--jobs", "3")
        graded = out.split("autograded 01_tensor: ", 1)[1].splitlines()[0]
        scores = dict(part.rsplit(" ", 1) for part in graded.split(", "))
        full = scores[site.users["ada"]].split("/")[1]
        assert scores[site.users["ada"]] == f"{full}/{full}", out
        assert scores[site.users["ben"]] == f"0/{full}", out
        assert 0 < float(scores[site.users["cy"]].split("/")[0]) < float(full), out
        mark("autograded")
        out = _course(site, "feedback", "01")
        assert "feedback of 01_tensor in the exchange" in out, out
        _course(site, "report", "--format", "canvas", "--csv", "grades.csv")
        canvas = list(csv.DictReader((site.home("instructor") / "grades.csv").open()))[1:]  # after Points Possible
        assert {row["SIS Login ID"]: (row["ID"], row[MODULE.slug]) for row in canvas} == {
            site.users[s]: (str(900 + n), scores[site.users[s]].split("/")[0]) for n, s in enumerate(students)
        }, canvas  # every graded student reaches Canvas by their Canvas id, with their points
        mark("feedback")

        _pry(site, site.exchange / "tinyflo" / "feedback")
        hidden, _ = secret_lines(MODULE)
        for student, session in sessions.items():
            session.assignments("fetch_feedback")
            folder = session.read(f"{MODULE.slug}/feedback")["content"]
            assert len(folder) == 1, folder  # one submission's feedback: their own
            page = session.read(f"{folder[0]['path']}/{MODULE.name}.html")["content"]
            points, most = map(float, scores[site.users[student]].split("/"))
            assert f"Score: {points:.1f} / {most:.1f}" in page, page[-2000:]
            assert not [line for line in hidden if line in page]
        semester = time.monotonic() - semester
        mark(f"each student has their feedback: the module's round took {semester:.0f} s")

        _assignments_tab(browser, hub, site.users["ada"])
        mark("browser")
    finally:
        hub.stop()
    assert semester < 120, f"the module's round took {semester:.0f} s, more than two minutes"


def _assignments_tab(browser, hub: Hub, name: str) -> None:
    """Log in as `name` in Chromium and find module 01 in JupyterLab's Assignments tab."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    browser.set_page_load_timeout(90)
    browser.get(f"{hub.url}/hub/login")
    browser.find_element(By.ID, "username_input").send_keys(name)
    browser.find_element(By.ID, "password_input").send_keys(PASSWORD)
    browser.find_element(By.ID, "login_submit").click()
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel"))

    def menu(label: str, selector: str):
        return wait.until(lambda b: next((e for e in b.find_elements(By.CSS_SELECTOR, selector)
                                          if e.text == label), None))

    menu("Nbgrader", ".lm-MenuBar-itemLabel").click()
    menu("Assignment List", ".lm-Menu-itemLabel").click()
    wait.until(lambda b: MODULE.slug in b.find_element(By.TAG_NAME, "body").text)


def _written(folder: Path) -> dict[str, Config]:
    """The settings of the hub's two files in `folder`, as traitlets reads them."""
    settings = {}
    for name in ("jupyterhub_config.py", "nbgrader_config.py"):
        config = settings[name] = Config()
        exec((folder / name).read_text(), {"get_config": lambda config=config: config})
    return settings


def test_the_hub_configuration_is_written_for_the_exchange_course_toml_names(tmp_path, monkeypatch):
    monkeypatch.setattr(course_hub, "runs_systemd", lambda: True)  # a machine booted with systemd
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    hub = ["course", "hub", "--env", "/opt/tinyflo-hub", "--instructor", "prof", "--group", "students",
           "--out", str(tmp_path / "hub"), *common]
    code, out = call_cli(*hub)
    assert code == 2 and "names no exchange: add exchange = " in out, out
    (course / "course.toml").write_text('exchange = "/srv/nbgrader/exchange"\n')
    code, out = call_cli(*hub)
    assert code == 0, out
    assert "install -d -m 1777 /srv/nbgrader/exchange" in out
    assert "install -m 644 " + str(tmp_path / "hub" / "nbgrader_config.py") in out
    settings = _written(tmp_path / "hub")
    hub_config, user_config = settings["jupyterhub_config.py"], settings["nbgrader_config.py"]
    # each user's JupyterLab in a systemd unit, as their own Unix user, held to 1 GiB and one CPU
    assert hub_config.JupyterHub.spawner_class == "systemdspawner.SystemdSpawner"
    assert hub_config.SystemdSpawner.dynamic_users is False
    assert hub_config.SystemdSpawner.username_template == "{USERNAME}"
    assert (hub_config.Spawner.mem_limit, hub_config.Spawner.cpu_limit) == ("1G", 1.0)
    assert hub_config.Spawner.cmd == ["/opt/tinyflo-hub/bin/jupyterhub-singleuser"]
    assert hub_config.LocalAuthenticator.allowed_groups == {"students"}
    assert hub_config.Authenticator.admin_users == {"prof"}
    assert user_config.Exchange.root == "/srv/nbgrader/exchange" and user_config.CourseDirectory.course_id == "tinyflo"
    assert f"install -d -m 755 -o prof {Path('/srv/nbgrader/exchange/tinyflo')}" in out
    # what root runs and keeps goes into root's folders, not the instructor's
    assert "install -d -m 700 -o root -g root /var/lib/jupyterhub" in out
    assert ("install -D -m 644 -o root -g root " + str(tmp_path / "hub" / "jupyterhub_config.py")
            + " /etc/jupyterhub/jupyterhub_config.py") in out
    assert out.rstrip().endswith("/opt/tinyflo-hub/bin/jupyterhub -f /etc/jupyterhub/jupyterhub_config.py")
    assert hub_config.JupyterHub.db_url == "sqlite:////var/lib/jupyterhub/jupyterhub.sqlite"
    assert hub_config.JupyterHub.cookie_secret_file == "/var/lib/jupyterhub/jupyterhub_cookie_secret"
    assert user_config.ExchangeFactory.submit == "tinyflo.course.semester.exchange.OwnSubmit"
    # an idle student's server is stopped after an hour, by a service with only the rights it needs
    assert hub_config.JupyterHub.services == [{"name": "idle-culler", "command": [
        "/opt/tinyflo-hub/bin/python3", "-m", "jupyterhub_idle_culler", "--timeout=3600"]}]
    assert hub_config.JupyterHub.load_roles == [{"name": "idle-culler", "services": ["idle-culler"], "scopes": [
        "list:users", "read:users:activity", "read:servers", "delete:servers"]}]
    code, out = call_cli(*hub, "--idle-minutes", "0")
    assert code == 0, out
    assert "services" not in _written(tmp_path / "hub")["jupyterhub_config.py"].JupyterHub, "--idle-minutes 0: no culler"
    # a hub environment another user could write to would make them root
    open_env = tmp_path / "env"
    (open_env / "bin").mkdir(parents=True)
    os.chmod(open_env / "bin", 0o777)
    args = list(hub)
    args[args.index("--env") + 1] = str(open_env)
    code, out = call_cli(*args)
    assert code == 2 and f"--env: root runs the hub from {open_env}, and {open_env / 'bin'} can be written" in out, out
    # an environment whose Python or packages the students cannot reach: their servers would never start
    top = Path(tempfile.mkdtemp(dir="/tmp"))  # not under pytest's own folder, which is closed to others
    try:
        os.chmod(top, 0o755)
        closed_env = top / "home-of-root" / "hub"
        (closed_env / "bin").mkdir(parents=True)
        (closed_env / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        (closed_env / "bin" / "python3").write_text("#!/bin/sh\n")
        for folder in (closed_env, closed_env / "bin", closed_env / "lib", closed_env / "lib" / "python3.11",
                       closed_env / "lib" / "python3.11" / "site-packages"):
            os.chmod(folder, 0o755)
        os.chmod(closed_env / "bin" / "python3", 0o755)
        os.chmod(top / "home-of-root", 0o700)
        args[args.index("--env") + 1] = str(closed_env)
        code, out = call_cli(*args)
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert (f"--env: each student's JupyterLab runs from {closed_env} as the student, and {top / 'home-of-root'} "
                "(mode 700) lets no student enter it: their servers would not start (the hub answers HTTP 500)") in out
        os.chmod(top / "home-of-root", 0o711)  # enterable, not listable: enough
        os.chmod(closed_env / "bin" / "python3", 0o700)
        code, out = call_cli(*args)
        assert code == 2 and f"{closed_env / 'bin' / 'python3'} (mode 700) cannot be run by a student" in out, out
        os.chmod(closed_env / "bin" / "python3", 0o755)
        assert call_cli(*args)[0] == 0
        # a Python that cannot import the idle culler: the hub would start without it, said in a line
        (closed_env / "bin" / "python3").write_text("#!/bin/sh\nexit 1\n")
        code, out = call_cli(*args)
        assert code == 2 and (f"--idle-minutes: the hub's environment {closed_env} has no jupyterhub-idle-culler"
                              in out), out
        # nor the spawner that holds servers to their limits
        code, out = call_cli(*args, "--idle-minutes", "0")
        assert code == 2 and (f"--memory, --cpus: the hub's environment {closed_env} has no "
                              "jupyterhub-systemdspawner" in out), out
        assert call_cli(*args, "--idle-minutes", "0", "--memory", "0", "--cpus", "0")[0] == 0
    finally:
        shutil.rmtree(top)
    for bad, said in ((["--env", "opt/hub"], "--env: an absolute path without control characters expected, got 'opt/hub'"),
                      (["--env", "/opt/hub\nimport os"], "--env: an absolute path without control characters expected"),
                      (["--instructor", "prof; rm"], "--instructor: a Unix user or group name expected, got 'prof; rm'")):
        args = list(hub)
        args[args.index(bad[0]) + 1] = bad[1]
        code, out = call_cli(*args)
        assert code == 2 and said in out and len(out.strip().splitlines()) == 1, out


def test_per_user_limits_are_held_by_systemd_and_a_machine_without_it_is_told_so(tmp_path, monkeypatch):
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    (course / "course.toml").write_text('exchange = "/srv/nbgrader/exchange"\n')
    hub = ["course", "hub", "--env", "/opt/tinyflo-hub", "--instructor", "prof", "--group", "students",
           "--out", str(tmp_path / "hub"), *common]
    monkeypatch.setattr(course_hub, "runs_systemd", lambda: False)  # a container, say
    code, out = call_cli(*hub)
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert ("this machine does not run systemd (no /run/systemd/system): serve the hub from a machine booted "
            "with systemd, or give --memory 0 --cpus 0 for no limits") in out, out
    assert call_cli(*hub, "--memory", "0", "--cpus", "0")[0] == 0
    config = _written(tmp_path / "hub")["jupyterhub_config.py"]
    assert config.JupyterHub.spawner_class == "localprocess" and "SystemdSpawner" not in config, config
    assert "mem_limit" not in config.Spawner and "cpu_limit" not in config.Spawner
    monkeypatch.setattr(course_hub, "runs_systemd", lambda: True)
    for memory, cpus, limits in (("512M", "0", {"mem_limit": "512M"}), ("0", "0.5", {"cpu_limit": 0.5}),
                                 ("1.5G", "2", {"mem_limit": "1.5G", "cpu_limit": 2.0})):
        assert call_cli(*hub, "--memory", memory, "--cpus", cpus)[0] == 0
        config = _written(tmp_path / "hub")["jupyterhub_config.py"]
        assert config.JupyterHub.spawner_class == "systemdspawner.SystemdSpawner"
        assert {k: v for k, v in config.Spawner.items() if k.endswith("_limit")} == limits
    for option, value, said in (("--memory", "1GB", "--memory: a size such as 1G or 512M expected (0: no limit)"),
                                ("--memory", "0G", "--memory: a size such as 1G or 512M expected"),
                                ("--memory", "-1G", "--memory: a size such as 1G or 512M expected"),
                                ("--cpus", "-1", "--cpus: a number of CPUs such as 1 or 0.5 expected (0: no limit)"),
                                ("--cpus", "nan", "--cpus: a number of CPUs such as 1 or 0.5 expected"),
                                ("--cpus", "inf", "--cpus: a number of CPUs such as 1 or 0.5 expected")):
        code, out = call_cli(*hub, f"{option}={value}")
        assert code == 2 and said in out and len(out.strip().splitlines()) == 1, out


def test_collect_without_an_exchange_or_a_zip_says_what_it_needs(tmp_path):
    course = tmp_path / "course"
    common = ["--dir", str(course), "--modules", str(FIXTURE_MODULES)]
    assert call_cli("course", "build", *common)[0] == 0
    code, out = call_cli("course", "collect", *common)
    assert code == 2 and "names no exchange" in out and "--zip FILE" in out, out
    code, out = call_cli("course", "collect", "--zip", str(tmp_path / "x.zip"), *common)
    assert code == 2 and "--zip: name the module the download holds" in out, out
