"""Write modules/RULES.md: every hidden check's rule and the line of its task that states it.

    python scripts/hidden_rules.py

tests/course/test_module_structure.py fails while the file is out of date.
"""

from pathlib import Path

from tinyflo.course.grader.rules import rules_table
from tinyflo.course.source import discover_modules

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    target = REPO / "modules" / "RULES.md"
    partial = target.with_name(".RULES.md.partial")
    partial.write_text(rules_table(discover_modules(REPO / "modules")), encoding="utf-8")
    partial.replace(target)
    print(f"wrote {target}")
