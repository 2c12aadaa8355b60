"""`tinyflo course similarity`: planted copies rank above every pair of honest, independent solutions."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from tinyflo.course.semester.similarity import (
    ADDED,
    PAGE_POLICY,
    given_cells,
    joined,
    own_code,
    own_parts,
    pair_page,
    rank_pairs,
)
from tinyflo.course.semester.structure import structure

pytest.importorskip("copydetect")

# The stubs every student starts from (signatures and docstrings): shared by all, so they count for nothing.
STUBS = '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    raise NotImplementedError


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    raise NotImplementedError


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    raise NotImplementedError


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    raise NotImplementedError
'''

# Four students who wrote the same four functions on their own.
HONEST = {
    "ada": '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    total = math.sqrt(sum(float((g * g).sum()) for g in grads))
    if total > max_norm:
        factor = max_norm / (total + 1e-6)
        for g in grads:
            g *= factor
    return total


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    order, seen = [], set()

    def visit(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        for parent in node.parents:
            visit(parent)
        order.append(node)

    visit(root)
    return order
''',
    "bo": '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1)
    summed = np.sum(grad, axis=axes, keepdims=True)
    return summed.reshape(shape)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    top = np.amax(x, axis=axis, keepdims=True)
    out = np.exp(x - top)
    out /= np.sum(out, axis=axis, keepdims=True)
    return out


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    squares = [np.vdot(g, g) for g in grads]
    norm = np.sqrt(np.sum(squares))
    scale = min(1.0, max_norm / (norm + 1e-6))
    for i in range(len(grads)):
        grads[i][...] = grads[i] * scale
    return norm


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    result, done, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            result.append(node)
        elif id(node) not in done:
            done.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node.parents)
    return result
''',
    "cy": '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    g = grad
    lead = len(g.shape) - len(shape)
    if lead > 0:
        g = g.sum(axis=tuple(range(lead)))
    keep = [i for i, (a, b) in enumerate(zip(g.shape, shape)) if b == 1 and a > 1]
    if keep:
        g = g.sum(axis=tuple(keep), keepdims=True)
    return g


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    logsum = np.log(np.exp(x - x.max(axis, keepdims=True)).sum(axis, keepdims=True))
    return np.exp(x - x.max(axis, keepdims=True) - logsum)


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    flat = np.concatenate([g.ravel() for g in grads])
    n = np.linalg.norm(flat)
    if n <= max_norm:
        return n
    ratio = max_norm / (n + 1e-6)
    for g in grads:
        np.multiply(g, ratio, out=g)
    return n


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    indegree, nodes, frontier = {}, {}, [root]
    while frontier:
        node = frontier.pop()
        if id(node) in nodes:
            continue
        nodes[id(node)] = node
        for p in node.parents:
            indegree[id(p)] = indegree.get(id(p), 0) + 1
            frontier.append(p)
    ready = [root]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for p in node.parents:
            indegree[id(p)] -= 1
            if indegree[id(p)] == 0:
                ready.append(p)
    return order[::-1]
''',
    "di": '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    padded = (1,) * (grad.ndim - len(shape)) + tuple(shape)
    axes = [i for i, n in enumerate(padded) if n == 1 and grad.shape[i] != 1]
    return grad.sum(axis=tuple(axes), keepdims=True).reshape(shape) if axes else grad.reshape(shape)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    z = np.moveaxis(x, axis, -1)
    z = z - z.max(-1)[..., None]
    p = np.exp(z)
    p = p / p.sum(-1)[..., None]
    return np.moveaxis(p, -1, axis)


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    norm = 0.0
    for g in grads:
        norm += float(np.square(g).sum())
    norm **= 0.5
    if norm > max_norm:
        for g in grads:
            g[...] *= max_norm / (norm + 1e-6)
    return norm


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    from graphlib import TopologicalSorter

    graph, todo = {}, [root]
    while todo:
        node = todo.pop()
        if node not in graph:
            graph[node] = list(node.parents)
            todo.extend(node.parents)
    return list(TopologicalSorter(graph).static_order())
''',
}


def _renamed(code: str) -> str:
    """The same code with local names changed: what a copier does first."""
    for old, new in (("grad", "gradient"), ("shifted", "stable"), ("total", "length"), ("factor", "k"),
                     ("order", "sequence"), ("seen", "visited"), ("visit", "walk"), ("node", "n"),
                     ("parent", "up"), ("axis", "dim"), ("e", "ex")):
        code = re.sub(rf"\b{old}\b", new, code)
    return code


def _functions(code: str) -> list[str]:
    return ["def " + part.strip() + "\n" for part in code.split("\ndef ") if part.strip()]


def _reordered_and_recommented(code: str) -> str:
    """The functions in another order, each with comments of its own: what a copier does next."""
    parts = _functions(code.removeprefix("def "))
    parts = parts[2:] + parts[:2]
    return "\n\n".join(f"# my solution, part {i}\n{part.replace(chr(10) + '    ', chr(10) + '    # step' + chr(10) + '    ', 1)}"
                       for i, part in enumerate(parts))


def _half_copied(source: str, own: str) -> str:
    """Two functions copied (renamed), two written by the student."""
    copied, mine = _functions(_renamed(source).removeprefix("def ")), _functions(own.removeprefix("def "))
    return "\n\n".join(copied[:2] + mine[2:])


HAL_OWN = '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    size = sum(np.linalg.norm(g) ** 2 for g in grads) ** 0.5
    shrink = max_norm / max(size, max_norm)
    return size if shrink == 1 else [g.__imul__(shrink) for g in grads] and size


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    found = {}

    def depth(n):
        if id(n) not in found:
            found[id(n)] = (1 + max((depth(p) for p in n.parents), default=-1), n)
        return found[id(n)][0]

    depth(root)
    return [n for _, n in sorted(found.values(), key=lambda pair: pair[0])]
'''

PLANTED = {  # copier: the student copied from
    "eve": ("ada", _renamed(HONEST["ada"])),
    "fay": ("bo", _reordered_and_recommented(HONEST["bo"])),
    "gus": ("cy", _renamed(_reordered_and_recommented(HONEST["cy"]))),
    "hal": ("di", _half_copied(HONEST["di"], HAL_OWN)),
}


def test_every_planted_copy_ranks_above_every_honest_pair():
    codes = HONEST | {copier: code for copier, (_, code) in PLANTED.items()}
    pairs = rank_pairs(codes, STUBS)
    planted = {frozenset((copier, source)) for copier, (source, _) in PLANTED.items()}
    scores = {frozenset((p.first, p.second)): p.similarity for p in pairs}
    honest = [score for pair, score in scores.items() if pair <= set(HONEST)]
    lowest_copy = min(scores[pair] for pair in planted)
    assert lowest_copy > max(honest), ({tuple(sorted(p)): round(scores[p], 2) for p in planted},
                                       round(max(honest), 2))
    assert [frozenset((p.first, p.second)) for p in pairs[:len(planted)]] != [] and all(
        frozenset((p.first, p.second)) in planted for p in pairs[:3]), "the three whole copies come first"


def test_the_shared_stubs_count_for_nothing():
    just_stubs = rank_pairs({"a": STUBS, "b": STUBS}, STUBS)
    assert just_stubs[0].similarity == 0
    assert rank_pairs({"a": STUBS, "b": STUBS})[0].similarity == 1, "without the boilerplate they are one text"


def test_own_code_is_the_solution_cells_and_the_cells_a_student_added():
    notebook = {"cells": [
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": False, "locked": True}}, "source": "GIVEN = 1"},
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True}}, "source": ["def f():\n", "    return 2"]},
        {"cell_type": "markdown", "metadata": {}, "source": "prose"},
        {"cell_type": "code", "metadata": {}, "source": "helper = 3"},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "solution": False}}, "source": "assert f()"},
    ]}
    assert own_code(notebook) == "def f():\n    return 2\n\nhelper = 3\n"


# Given code as a module has it: a cell without nbgrader's marks, the same in every submission.
GIVEN = "def _check_shape(shape):\n" + "".join(f"    assert len(shape) < {n}, 'shape {n}'\n" for n in range(40, 80))


def _cell(cell_id: str, source: str, **marks) -> dict:
    metadata = {"nbgrader": {"grade": False, "locked": False, "schema_version": 3, **marks}} if marks else {}
    return {"id": cell_id, "cell_type": "code", "metadata": metadata, "source": source, "outputs": [],
            "execution_count": None}


def _notebook(*codes: str, tasks: tuple[str, ...] = ("tensor_ops",), given: str = GIVEN) -> dict:
    """A module's notebook: a locked setup cell, a cell of given code, and a solution cell per task."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        _cell("setup", "import numpy as np", solution=False, locked=True, grade_id="setup"),
        _cell("helpers", given),
        *(_cell(f"{task}-code", code, solution=True, grade_id=f"{task}_code") for task, code in zip(tasks, codes)),
        _cell("tests", "assert True", solution=False, grade=True, locked=True, grade_id=tasks[0], points=1)]}


def _similarity_of(tmp_path: Path, codes: dict[str, str], spec: str = "1") -> tuple[Path, subprocess.CompletedProcess]:
    """A course whose module 01 release holds STUBS and each student's submission holds their code;
    `tinyflo course similarity` run on it (it must succeed). The course folder and the run."""
    course = tmp_path / "course"
    (course / "release" / "01_tensor").mkdir(parents=True)
    (course / "release" / "01_tensor" / "tensor.ipynb").write_text(json.dumps(_notebook(STUBS)))
    for student, code in codes.items():
        folder = course / "submitted" / student / "01_tensor"
        folder.mkdir(parents=True)
        (folder / "tensor.ipynb").write_text(json.dumps(_notebook(code)))
    (course / "submitted" / "zed" / "01_tensor").mkdir(parents=True)  # no notebook in it
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "course", "similarity", spec, "--dir", str(course)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return course, done


def test_course_similarity_ranks_writes_a_page_per_alike_pair_and_says_what_it_left_out(tmp_path):
    course, done = _similarity_of(tmp_path, {"ada": HONEST["ada"], "bo": HONEST["bo"], "eve": PLANTED["eve"][1]})
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ada and eve") and lines[0].endswith("alike  (page written)"), lines
    assert "left out: student zed, 01_tensor: no tensor.ipynb (the folder is empty)" in done.stderr
    pages = course / "similarity" / "01_tensor"
    page = (pages / "ada--eve.html").read_text()
    assert "<mark>" in page and "ada" in page and "eve" in page
    # the students' own code, by task; the given code is left out, and said to be
    assert "<h2>task tensor_ops</h2>" in page and "_check_shape" not in page
    assert "The course's given code (3 cells, the same in every submission) is left out." in page
    index = (pages / "index.html").read_text()
    assert "ada--eve.html" in index and "3 submissions, 3 pairs." in index
    assert "Each pair at least 50% alike (a fixed share: 3 pairs are too few to stand out from) has a page" in index
    assert not (pages / "ada--bo.html").exists(), "an honest pair gets no page"
    assert lines[-1] == ("3 pairs compared; 1 at least 50% alike (a fixed share: 3 pairs are too few to stand out "
                         f"from), each with a page side by side: {pages / 'index.html'}")


def test_a_class_flags_its_own_outliers_and_every_flagged_pair_has_a_page(tmp_path):
    """Without --threshold, the pairs that stand out from the class's own scores (Tukey's upper
    fence) are flagged, each with a page: a copy only half kept (hal's, 55% alike) is flagged as well
    as the whole ones, where a fixed 60% would pass over it; no honest pair is."""
    from tinyflo.course.semester.similarity import class_flag

    course, done = _similarity_of(tmp_path, HONEST | {copier: code for copier, (_, code) in PLANTED.items()})
    pages = course / "similarity" / "01_tensor"
    written = {frozenset(page.stem.split("--")) for page in pages.glob("*--*.html")}
    assert written == {frozenset((copier, source)) for copier, (source, _) in PLANTED.items()}, written
    assert "\n28 pairs compared; 4 more than 23% alike " in done.stdout, done.stdout
    assert "(the class's outliers: above the third quartile of every pair's score" in done.stdout, done.stdout
    # the fence: Q3 + 1.5 (Q3 - Q1); a pair on it is not above it
    flag = class_flag([0.1] * 5 + [0.2] * 5 + [0.35])
    assert flag.threshold > 0.35 and flag.how.startswith("more than 35% alike"), flag
    assert class_flag([0.9] * 9).threshold == 0.5, "fewer than ten pairs: the fixed share"


@pytest.mark.parametrize("argv, expected", [
    (["--threshold", "2"], "argument --threshold: expected a number from 0 to 1, got '2'"),
    ([], "is not released yet ({dir}/release/01_tensor/tensor.ipynb is missing): its stubs are what every "
         "submission shares; run `tinyflo course release 01_tensor --dir {dir}` first"),
])
def test_course_similarity_refuses_in_one_line(tmp_path, argv, expected):
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "course", "similarity", "01", "--dir",
                           str(tmp_path), *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert expected.format(dir=tmp_path) in done.stderr, done.stderr



def test_own_code_ignores_what_is_not_a_notebooks_code():
    hostile = {"cells": [
        {"cell_type": "code", "metadata": {}, "source": {"not": "text"}},
        {"cell_type": "code", "metadata": {"nbgrader": "solution"}, "source": "x = 1"},
        {"cell_type": "code", "metadata": [], "source": ["a = ", 2]},
        "not a cell",
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True}}, "source": "kept = 1"},
    ]}
    assert own_code(hostile) == "kept = 1\n"
    assert own_code([]) == "\n" and own_code({"cells": None}) == "\n"
    release = {"cells": [{"cell_type": "code", "id": "given", "metadata": {}, "source": "b = 2"}]}
    odd_ids = {"cells": [{"cell_type": "code", "id": ["x"], "metadata": {}, "source": "a = 1"},
                         {"cell_type": "code", "id": {"y": 1}, "metadata": {}, "source": "b = 2"}]}
    assert own_code(odd_ids, release) == "a = 1\n", "an id that is no string is no given cell's"


def test_a_pair_page_shows_a_students_markup_as_text_and_odd_folder_names_are_left_out(tmp_path):
    planted = HONEST["ada"] + '\nNOTE = "</pre><script>alert(1)</script>"\n'
    course, done = _similarity_of(
        tmp_path, {"ada": HONEST["ada"], "mallory": planted, "bo": HONEST["bo"], "x y": HONEST["cy"]}, "01")
    assert "left out: student 'x y', 01_tensor: a student's folder is named by their id" in done.stderr
    page = (course / "similarity" / "01_tensor" / "ada--mallory.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # and whatever might get through, no page runs a script, loads anything or sends a form
    for name in ("ada--mallory.html", "index.html"):
        head = BeautifulSoup((course / "similarity" / "01_tensor" / name).read_text(), "html.parser").head
        assert head.find(True).attrs == {"http-equiv": "Content-Security-Policy", "content": PAGE_POLICY}
    assert "default-src 'none'" in PAGE_POLICY and "script-src" not in PAGE_POLICY


def test_a_pair_page_sets_each_task_side_by_side_and_folds_what_shares_nothing():
    """Module 01's page showed both whole notebooks (2,972 lines a side, the first mark at line 374):
    now a row per task, its two solution cells side by side, and the cells a student added."""
    stubs = _functions(STUBS.removeprefix("def "))
    release = _notebook(stubs[0], stubs[1], tasks=("unbroadcast", "softmax"))
    ada_code = _functions(HONEST["ada"].removeprefix("def "))
    ada = _notebook(ada_code[0], ada_code[1], tasks=("unbroadcast", "softmax"), given=GIVEN + "# my note\n")
    eve_code = _functions(_renamed(HONEST["ada"]).removeprefix("def "))  # unbroadcast copied, softmax their own
    eve = _notebook(eve_code[0], _functions(HONEST["cy"].removeprefix("def "))[1], tasks=("unbroadcast", "softmax"))
    eve["cells"].append(_cell("mine", "def helper(x):\n    return x.sum(axis=0, keepdims=True)\n"))
    parts = {"ada": own_parts(ada, release), "eve": own_parts(eve, release)}
    assert [part.label for part in parts["ada"]] == ["unbroadcast", "softmax"], "an edited given cell is not theirs"
    assert [part.label for part in parts["eve"]] == ["unbroadcast", "softmax", ADDED]
    assert [joined(parts["eve"])[p.start:p.start + len(p.source)] for p in parts["eve"]] == [
        p.source for p in parts["eve"]]
    pair = rank_pairs({name: joined(own) for name, own in parts.items()}, own_code(release, release))[0]
    stubs = {part.label: part.source for part in own_parts(release, release)}
    soup = BeautifulSoup(pair_page(pair, parts, "01_tensor", stubs, len(given_cells(release))), "html.parser")
    assert [h2.get_text() for h2 in soup.find_all("h2")] == ["task unbroadcast"]
    assert [s.get_text() for s in soup.find_all("summary")] == ["task softmax: nothing in common",
                                                                f"{ADDED}: nothing in common"]
    copied = soup.find("h2").find_next_sibling("div").find_all("div", recursive=False)
    assert [[mark.get_text() for mark in side.find_all("mark")][:3] for side in copied] == [
        ["def unbroadcast(grad, shape):", "while grad.ndim > len(shape):", "grad = grad.sum(axis=0)"],
        ["def unbroadcast(gradient, shape):", "while gradient.ndim > len(shape):", "gradient = gradient.sum(dim=0)"]
    ], "whole lines of the student's own code"
    assert all("Sum grad down" not in mark.get_text() for mark in soup.find_all("mark")), "not the stub's docstring"
    added = soup.find_all("details")[1].find("div", class_="row").find_all("div", recursive=False)
    assert added[0].get_text() == "no such cell" and "def helper(x):" in added[1].get_text()
    assert "_check_shape" not in str(soup) and "given code (3 cells" in soup.p.get_text()


# Copies disguised by refactoring. The hand-run semester found every planted copy above every honest pair
# by only 8 points, and splitting a solution into helper functions the disguise that worked best.

# Two more students who wrote the four functions on their own, with helpers of their own: one at module
# level, one nested. Inlining must not make them look like anyone else.
MORE_HONEST = {
    "ivy": '''def _axes_to_sum(grad_shape, shape):
    axes = []
    for k in range(1, len(grad_shape) + 1):
        if k > len(shape) or (shape[-k] == 1 and grad_shape[-k] != 1):
            axes.append(len(grad_shape) - k)
    return tuple(axes)


def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    axes = _axes_to_sum(grad.shape, shape)
    return np.reshape(np.sum(grad, axis=axes) if axes else grad, shape)


def _log_sum_exp(x, axis):
    peak = np.max(x, axis=axis, keepdims=True)
    return peak + np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True))


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    return np.exp(x - _log_sum_exp(x, axis))


def _global_norm(grads):
    total = 0.0
    for g in grads:
        total = total + float(np.sum(g ** 2))
    return total ** 0.5


def _scale_all(grads, by):
    for index, g in enumerate(grads):
        grads[index] = g * by


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    norm = _global_norm(grads)
    if norm > max_norm:
        _scale_all(grads, max_norm / (norm + 1e-6))
    return norm


def _collect(root):
    nodes, todo = {}, [root]
    while todo:
        node = todo.pop()
        if id(node) not in nodes:
            nodes[id(node)] = node
            todo.extend(node.parents)
    return list(nodes.values())


def _depth(node, memo):
    if id(node) not in memo:
        memo[id(node)] = 1 + max((_depth(p, memo) for p in node.parents), default=0)
    return memo[id(node)]


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    memo = {}
    return sorted(_collect(root), key=lambda node: _depth(node, memo))
''',
    "jo": '''def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    def fold_front(g):
        return fold_front(g.sum(axis=0)) if g.ndim > len(shape) else g

    g = fold_front(grad)
    for i in reversed(range(len(shape))):
        if shape[i] == 1 and g.shape[i] > 1:
            g = np.add.reduce(g, axis=i, keepdims=True)
    return g


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    def exps(v):
        return np.exp(v - np.max(v, axis=axis, keepdims=True))

    num = exps(x)
    return num / np.sum(num, axis=axis, keepdims=True)


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    def norm_of(arrays):
        return np.sqrt(sum(np.sum(a * a) for a in arrays))

    def shrink(arrays, coeff):
        for a in arrays:
            np.multiply(a, coeff, out=a)

    n = norm_of(grads)
    coeff = max_norm / (n + 1e-6)
    if coeff < 1:
        shrink(grads, coeff)
    return n


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    state, out, stack = {}, [], [root]

    def finish(node):
        state[id(node)] = "done"
        out.append(node)

    while stack:
        node = stack[-1]
        if state.get(id(node)) == "done":
            stack.pop()
        elif state.get(id(node)) == "open":
            stack.pop()
            finish(node)
        else:
            state[id(node)] = "open"
            stack.extend(p for p in node.parents if id(p) not in state)
    return out
''',
}

# (i) ada's solution split into helpers: each function's steps moved out into functions of their own.
SPLIT = '''def _sum_leading(grad, shape):
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    return grad


def _sum_stretched(grad, shape):
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def unbroadcast(grad, shape):
    """Sum grad down to shape."""
    grad = _sum_leading(grad, shape)
    return _sum_stretched(grad, shape)


def _shifted(x, axis):
    return x - x.max(axis=axis, keepdims=True)


def _normalised(e, axis):
    return e / e.sum(axis=axis, keepdims=True)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis, without overflow."""
    shifted = _shifted(x, axis)
    e = np.exp(shifted)
    return _normalised(e, axis)


def _global_norm(grads):
    return math.sqrt(sum(float((g * g).sum()) for g in grads))


def _scale(grads, factor):
    for g in grads:
        g *= factor


def clip_norm(grads, max_norm):
    """Scale every gradient so that their global norm is at most max_norm."""
    total = _global_norm(grads)
    if total > max_norm:
        _scale(grads, max_norm / (total + 1e-6))
    return total


def _visit(node, seen, order):
    if id(node) in seen:
        return
    seen.add(id(node))
    for parent in node.parents:
        _visit(parent, seen, order)
    order.append(node)


def topological_order(root):
    """Every node root depends on, inputs before the nodes they feed."""
    order, seen = [], set()
    _visit(root, seen, order)
    return order
'''

def _edited(code: str, edits: list[tuple[str, str]]) -> str:
    """``code`` with each ``before`` replaced by its ``after``: a copier's edits, one by one."""
    for before, after in edits:
        assert before in code, before
        code = code.replace(before, after)
    return code


# (ii) ivy's helpers merged back into the functions that call them: each definition gone, its lines where
# its call was.
MERGED = _edited(MORE_HONEST["ivy"], [
    ("def _axes_to_sum(grad_shape, shape):\n    axes = []\n    for k in range(1, len(grad_shape) + 1):\n"
     "        if k > len(shape) or (shape[-k] == 1 and grad_shape[-k] != 1):\n            axes.append(len(grad_shape) - k)"
     "\n    return tuple(axes)\n\n\n", ""),
    ("    axes = _axes_to_sum(grad.shape, shape)\n", "    axes = []\n    for k in range(1, grad.ndim + 1):\n"
     "        if k > len(shape) or (shape[-k] == 1 and grad.shape[-k] != 1):\n            axes.append(grad.ndim - k)\n"
     "    axes = tuple(axes)\n"),
    ("def _log_sum_exp(x, axis):\n    peak = np.max(x, axis=axis, keepdims=True)\n"
     "    return peak + np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True))\n\n\n", ""),
    ("    return np.exp(x - _log_sum_exp(x, axis))\n", "    peak = np.max(x, axis=axis, keepdims=True)\n"
     "    log_sum_exp = peak + np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True))\n"
     "    return np.exp(x - log_sum_exp)\n"),
    ("def _global_norm(grads):\n    total = 0.0\n    for g in grads:\n        total = total + float(np.sum(g ** 2))\n"
     "    return total ** 0.5\n\n\ndef _scale_all(grads, by):\n    for index, g in enumerate(grads):\n"
     "        grads[index] = g * by\n\n\n", ""),
    ("    norm = _global_norm(grads)\n", "    total = 0.0\n    for g in grads:\n        total = total + float(np.sum(g ** 2))\n"
     "    norm = total ** 0.5\n"),
    ("        _scale_all(grads, max_norm / (norm + 1e-6))\n", "        by = max_norm / (norm + 1e-6)\n"
     "        for index, g in enumerate(grads):\n            grads[index] = g * by\n"),
    ("def _collect(root):\n    nodes, todo = {}, [root]\n    while todo:\n        node = todo.pop()\n"
     "        if id(node) not in nodes:\n            nodes[id(node)] = node\n            todo.extend(node.parents)\n"
     "    return list(nodes.values())\n\n\n", ""),
    ("    memo = {}\n    return sorted(_collect(root), key=", "    nodes, todo = {}, [root]\n    while todo:\n"
     "        node = todo.pop()\n        if id(node) not in nodes:\n            nodes[id(node)] = node\n"
     "            todo.extend(node.parents)\n    memo = {}\n    return sorted(list(nodes.values()), key="),
])

# (iv) bo's solution split into helpers (then renamed, reordered and recommented by the test): each run
# of lines moved out into a helper defined before its function, and called where the lines were.
BO_SPLIT = _edited(HONEST["bo"], [
    ("    extra = grad.ndim - len(shape)\n    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) "
     "if n == 1)\n    summed = np.sum(grad, axis=axes, keepdims=True)\n",
     "    summed = np.sum(grad, axis=_axes_to_sum(grad, shape), keepdims=True)\n"),
    ("def unbroadcast(", "def _axes_to_sum(grad, shape):\n    extra = grad.ndim - len(shape)\n"
     "    return tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1)\n\n\ndef unbroadcast("),
    ("    top = np.amax(x, axis=axis, keepdims=True)\n    out = np.exp(x - top)\n", "    out = _stable_exp(x, axis)\n"),
    ("def softmax(", "def _stable_exp(x, axis):\n    top = np.amax(x, axis=axis, keepdims=True)\n"
     "    return np.exp(x - top)\n\n\ndef softmax("),
    ("    squares = [np.vdot(g, g) for g in grads]\n    norm = np.sqrt(np.sum(squares))\n", "    norm = _norm(grads)\n"),
    ("    for i in range(len(grads)):\n        grads[i][...] = grads[i] * scale\n", "    _rescale(grads, scale)\n"),
    ("def clip_norm(", "def _norm(grads):\n    squares = [np.vdot(g, g) for g in grads]\n    return np.sqrt(np.sum(squares))"
     "\n\n\ndef _rescale(grads, scale):\n    for i in range(len(grads)):\n        grads[i][...] = grads[i] * scale"
     "\n\n\ndef clip_norm("),
    ("            done.add(id(node))\n            stack.append((node, True))\n"
     "            stack.extend((p, False) for p in node.parents)\n", "            _push_parents(node, stack, done)\n"),
    ("def topological_order(", "def _push_parents(node, stack, done):\n    done.add(id(node))\n"
     "    stack.append((node, True))\n    stack.extend((p, False) for p in node.parents)\n\n\ndef topological_order("),
])

# (iv) jo's nested helpers merged into the functions that hold them (then renamed and reordered).
JO_MERGED = _edited(MORE_HONEST["jo"], [
    ("    def exps(v):\n        return np.exp(v - np.max(v, axis=axis, keepdims=True))\n\n    num = exps(x)\n",
     "    num = np.exp(x - np.max(x, axis=axis, keepdims=True))\n"),
    ("    def norm_of(arrays):\n        return np.sqrt(sum(np.sum(a * a) for a in arrays))\n\n"
     "    def shrink(arrays, coeff):\n        for a in arrays:\n            np.multiply(a, coeff, out=a)\n\n"
     "    n = norm_of(grads)\n", "    n = np.sqrt(sum(np.sum(a * a) for a in grads))\n"),
    ("        shrink(grads, coeff)\n", "        for a in grads:\n            np.multiply(a, coeff, out=a)\n"),
    ("\n    def finish(node):\n        state[id(node)] = \"done\"\n        out.append(node)\n\n", ""),
    ("            finish(node)\n", "            state[id(node)] = \"done\"\n            out.append(node)\n"),
])

TASKS = {"unbroadcast", "softmax", "clip_norm", "topological_order"}  # the graded names: a copier keeps them


def _every_name_renamed(code: str) -> str:
    """Every name the code binds but the tasks' (parameters, variables, helpers) changed, the layout
    ``ast.unparse``'s: a thorough copier."""
    tree = ast.parse(code)
    bound = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    bound |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    bound |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)} - TASKS
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound:
            node.id = node.id.strip("_")[::-1] + "_"
        elif isinstance(node, ast.arg):
            node.arg = node.arg.strip("_")[::-1] + "_"
        elif isinstance(node, ast.FunctionDef) and node.name in bound:
            node.name = node.name.strip("_")[::-1] + "_"
    return ast.unparse(tree) + "\n"


DISGUISED = {  # copier: the student copied from, and how it was disguised
    "ken": ("ada", SPLIT),  # (i)
    "lou": ("ivy", MERGED),  # (ii)
    "max": ("cy", _reordered_and_recommented(_every_name_renamed(HONEST["cy"]))),  # (iii)
    "ned": ("bo", _reordered_and_recommented(_every_name_renamed(BO_SPLIT))),  # (iv)
    "oz": ("jo", _reordered_and_recommented(_every_name_renamed(JO_MERGED))),  # (iv)
}
CLASS = HONEST | MORE_HONEST  # six students who wrote their own, three of them with helpers of their own

# How far the lowest disguised copy stands above the highest honest pair. Measured: 0.72 (lou's merged copy
# of ivy at 89%; ada and jo at 16%). Before helpers were inlined it was 0.30 (ned's split, renamed and
# reordered copy of bo at 49%, against 19%), and 0.35 to 0.52 for each split or merged copy on its own,
# which fail here; a copy only renamed and reordered stood 0.85 above both before and after.
MARGIN = 0.6


@pytest.mark.parametrize("copier", DISGUISED)
def test_a_copy_disguised_by_refactoring_ranks_far_above_every_honest_pair_and_is_flagged(copier):
    """Splitting into helpers, merging helpers, renaming every name and reordering (and all of them
    at once) leave the copy far above every pair of the class's own work, and the class's outlier."""
    from tinyflo.course.semester.similarity import class_flag

    source, code = DISGUISED[copier]
    ast.parse(code)  # a disguise that still runs
    pairs = rank_pairs(CLASS | {copier: code}, STUBS)
    scores = {frozenset((p.first, p.second)): p.similarity for p in pairs}
    copy = scores[frozenset((copier, source))]
    honest = max(score for pair, score in scores.items() if copier not in pair)
    assert copy >= honest + MARGIN, (round(copy, 2), round(honest, 2))
    flag = class_flag([p.similarity for p in pairs])
    assert {pair for pair, score in scores.items() if score >= flag.threshold} == {frozenset((copier, source))}


def test_a_class_with_every_disguise_flags_the_copies_and_no_one_else(tmp_path):
    course, done = _similarity_of(tmp_path, CLASS | {copier: code for copier, (_, code) in DISGUISED.items()})
    planted = {frozenset((copier, source)) for copier, (source, _) in DISGUISED.items()}
    pages = course / "similarity" / "01_tensor"
    assert {frozenset(page.stem.split("--")) for page in pages.glob("*--*.html")} == planted, done.stdout
    rows = [re.fullmatch(r"(\S+) and (\S+) +(\d+)% alike.*", line) for line in done.stdout.splitlines()]
    scores = {frozenset(row.group(1, 2)): int(row.group(3)) for row in rows if row}
    assert len(scores) > len(planted), done.stdout  # the most alike pairs, the most alike first
    lowest = min(scores[pair] for pair in planted)
    assert lowest >= max(score for pair, score in scores.items() if pair not in planted) + 100 * MARGIN, done.stdout


def test_a_function_split_into_helpers_reads_as_the_function():
    ada = _functions(HONEST["ada"].removeprefix("def "))
    assert structure("\n\n".join(ada[:3])) == structure(SPLIT.split("def _visit")[0])
    ivy = MORE_HONEST["ivy"].split("def _collect")[0]
    assert structure(ivy) == structure(ivy.replace("def unbroadcast", "def unbroadcast_")), "a name is a name"
    shuffled = "\n\n".join(reversed(_functions(ivy.removeprefix("def "))))
    assert structure(shuffled) == structure(ivy), "the order of definitions does not count"
    assert structure("x += 1  # more\ns = f'{x} apples'\n") == structure('x = x + 1\ns = "pears"\n')


def test_a_split_copys_page_shows_what_each_wrote_and_marks_the_helpers_lines(tmp_path):
    course, _ = _similarity_of(tmp_path, {"ada": HONEST["ada"], "bo": HONEST["bo"], "ken": SPLIT})
    soup = BeautifulSoup((course / "similarity" / "01_tensor" / "ada--ken.html").read_text(), "html.parser")
    ada, ken = soup.find("h2").find_next_sibling("div").find_all("div", recursive=False)
    assert ken.find("pre").get_text() == SPLIT, "the student's own code, as they wrote it"
    marked = [mark.get_text() for mark in ken.find_all("mark")]
    assert {"grad = grad.sum(axis=0)", "shifted = _shifted(x, axis)", "return x - x.max(axis=axis, keepdims=True)",
            "g *= factor"} <= set(marked), "the helpers' lines, and the calls that stand for them"
    assert {"while grad.ndim > len(shape):", "e = np.exp(shifted)", "g *= factor"} <= {
        mark.get_text() for mark in ada.find_all("mark")}
    assert "compared by structure (helper functions put where they are called" in soup.p.get_text()


def test_a_block_that_does_not_parse_stays_text_and_the_rest_is_compared_by_structure():
    broken = "%timeit softmax(x)\n\ndef unfinished(:\n    pass\n\n"
    text = structure(broken + SPLIT)
    assert text.startswith(structure(SPLIT)) and text.endswith("%timeit softmax(x)\n\ndef unfinished(:\n    pass\n")
    assert rank_pairs({"ada": HONEST["ada"], "ken": broken + SPLIT}, STUBS)[0].similarity > 0.8


@pytest.mark.parametrize("code", ["x = " + "-" * 100_000 + "1\n", "x = " + "1 + " * 5_000 + "1\n",
                                  "these lines are prose, not code\n" * 2_000])
def test_code_too_deep_or_too_broken_to_walk_is_compared_as_its_text(code):
    assert structure(code) == code


def test_helpers_that_call_helpers_many_times_are_inlined_only_so_far():
    chain = ["def f4(x):\n    y = x + 1\n    return y\n"] + [
        f"def f{level}(x):\n" + "".join(f"    x = f{level + 1}(x) * {i}\n" for i in range(10)) + "    return x\n"
        for level in range(3, -1, -1)]  # inlined all the way, f0 would be 10,000 copies of f4
    code = "\n".join(chain)
    assert len(structure(code)) < 10 * len(code)


def test_a_list_built_by_a_loop_reads_as_the_comprehension():
    loop = "def f(xs, n):\n    out = []\n    for i, x in enumerate(xs):\n        if x > n:\n            out.append(x * i)\n    return out\n"
    assert structure(loop) == structure("def f(xs, n):\n    out = [x * i for i, x in enumerate(xs) if x > n]\n    return out\n")
    assert "for " in structure("out = []\nfor x in xs:\n    out.append(len(out) * x)\n"), "a loop that reads the list"
