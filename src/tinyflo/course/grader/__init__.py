"""The trusted grading side: what runs a submission and decides its points.

`tree` builds the package a run imports; `sandbox` says where the code runs (bubblewrap, or a
container confined by Landlock) and `runner` is the process there; `engine` drives runs and
reads their signed results; `scenarios` turns a module's grade cells into what runs and what
is compared, `verdicts` compares, `grading.grade` puts it together; `rules` audits that every
hidden check's rule is stated.
Nothing here imports the kit or the semester.
"""
