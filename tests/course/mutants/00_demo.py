"""Seeded mutants of 00_demo: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # Only the hidden test catches this one: it proves hidden tests come back for grading.
    ('demo_relu', "return np.maximum(x, 0)", "return np.maximum(x, -1)"),
]
