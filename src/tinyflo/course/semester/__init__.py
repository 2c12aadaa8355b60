"""The instructor's semester, around nbgrader: `instructor` (the `tinyflo course` commands),
`nbgrader_run` and `nbgrader_steps` (nbgrader's runs and tinyflo's steps in its pipeline),
`settings` (course.toml: due dates, extensions, late work, titles), the intake (`exchange` on a
hub, `lms_zip` from an LMS's download), the hub's configuration (`hub`), copies
(`similarity`, on the code's `structure`), and a module as a Gradescope autograder graded by the grader (`gradescope`)."""
