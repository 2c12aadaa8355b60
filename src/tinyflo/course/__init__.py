"""Course tooling: export modules to the package, build notebooks, grade them.

    tinyflo export [--check]          modules/NN_name/name.py -> src/tinyflo/core/name.py
    tinyflo module list               the student's loop, in ./workspace (or $TINYFLO_WORKSPACE,
    tinyflo module start N            or --workspace): start writes the release notebook and
    tinyflo module test N             never overwrites; test grades it with the hidden tests;
    tinyflo module reset N            reset backs it up and starts fresh; complete exports the
    tinyflo module complete N         student's code to <workspace>/package/tinyflo/core/
    tinyflo course build|release|autograde|report   the instructor's loop over nbgrader

After `tinyflo module complete`, setting TINYFLO_WORKSPACE makes `import tinyflo.core.X`
load the student's own code for every completed module (the generated
`tinyflo/core/__init__.py` puts the workspace folder first on the package path).

The package is grouped by who uses it; each part imports only the parts above it:

    source, checks, notebooks, export   what every part reads: modules, their cells and
                                        checks, the notebooks made of them, the exporter
    grader/      the trusted grading side: the grading tree, the sandbox and the runner in
                 it, scenarios and verdicts, `grade`, the rules audit
    kit/         what students get: the kit's wheel (build) and the student's loop (student)
    semester/    the instructor's semester: the commands (instructor), nbgrader's steps and
                 runs, the exchange and the hub, LMS downloads, course.toml (settings), copies,
                 the Gradescope autograder

Only `source` and `export` need nothing beyond the standard library; notebook building
and grading need the `course` extra (`pip install 'tinyflo[course]'`).
"""
