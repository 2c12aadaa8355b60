"""Submitted notebooks that once ended a whole class's run, for the intake tests.

Each is a small honest notebook changed in one way a reader of it trips on: nesting that
exhausts Python's recursion (nbformat's reader recursed per level), an output whose data is a
list (nbformat raised jsonschema's ValidationError), 90,000 added cells (85 s of autograde and
a 48 MB feedback page), a cell id that is a list (nbformat's validator raised TypeError), a lone
surrogate (no UTF-8 writer can write it back), nbgrader metadata of the wrong type, numbers
JSON has not (NaN, and 1e400 read as infinity: both written back as no JSON reader takes them),
and a million tiny lists (hundreds of MB to read). They graded, or stopped everyone, before.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# case -> what the line leaving it out says (after "is not a readable notebook (")
WORST = {
    "nested 500 deep": "nested at most 64 levels deep expected; more came",
    "an output whose data is a list": "at cells/{code}/outputs/0/data: ['x'] is not of type 'object'",
    "90,000 cells": "at most 2000 cells expected; ",
    "a cell id that is a list": "at cells/{code}/id: ['x'] is not of type 'string'",
    "a lone surrogate": "text in UTF-8 expected; a lone surrogate",
    "a grade id that is a list": "cell {cell}: nbgrader metadata in nbgrader's shape expected; ['x'] is not of type",
    "NaN in the metadata": "JSON expected; NaN came",
    "a number past a float's range": "a finite number expected; 1e400 came",
    "a million empty lists": "at most 500000 JSON values expected; 1000",
}


def worst_case(honest: dict[str, Any], case: str) -> tuple[bytes, str]:
    """The notebook `honest` (plain JSON) changed as `case` (a key of WORST) says; its bytes and
    what the line leaving it out says."""
    notebook = copy.deepcopy(honest)
    code = next(n for n, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code")
    cell = notebook["cells"][code]
    text = ""
    if case == "nested 500 deep":
        text = json.dumps(notebook)[:-1] + ', "deep": ' + "[" * 500 + "]" * 500 + "}"
    elif case == "an output whose data is a list":
        cell["outputs"] = [{"output_type": "display_data", "data": ["x"], "metadata": {}}]
    elif case == "90,000 cells":
        notebook["cells"] += [{"cell_type": "raw", "id": f"x{n}", "metadata": {}, "source": "x"} for n in range(90_000)]
    elif case == "a cell id that is a list":
        cell["id"] = ["x"]
    elif case == "a lone surrogate":
        notebook["metadata"]["x"] = "\ud800"  # json.dumps writes it as the escape \ud800
    elif case == "a grade id that is a list":
        cell["metadata"]["nbgrader"] = {"schema_version": 3, "grade": False, "locked": False, "solution": True,
                                        "grade_id": ["x"]}
    elif case == "NaN in the metadata":
        notebook["metadata"]["x"] = float("nan")  # json.dumps writes NaN, which JSON has not
    elif case == "a number past a float's range":
        text = json.dumps(notebook).replace('"metadata": {', '"metadata": {"x": 1e400, ', 1)
    elif case == "a million empty lists":
        notebook["metadata"]["x"] = [[]] * 1_000_000
    else:
        raise KeyError(case)
    return (text or json.dumps(notebook)).encode(), WORST[case].format(code=code, cell=code + 1)
