"""What students get: the student kit's wheel (`build`) and the student's loop of
`tinyflo module ...` commands (`student`), graded on the student's own machine by the grader."""
