"""The instructor's side of the course: the problem sets' student versions and the autograder.

- ``assignments``  each problem set's questions, and the student version made from its instructor version
                   (``python -m bayesattn_lite.instructor.assignments``)
- ``grading``      the autograder (``python -m bayesattn_lite.instructor.grading``)
- ``_sandbox``     the bubblewrap sandbox each submission's kernel runs in (private to ``grading``)

Nothing a chapter or a learner imports depends on this subpackage (tests/test_package.py), and the
package copy a submission's kernel imports leaves it out: the kernel never sees the grader, the
problem sets' solutions or the rubric.
"""
