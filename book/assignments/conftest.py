"""nbval executes the instructor versions of the problem sets; the student versions are generated
from them (python -m bayesattn_lite.instructor.assignments) with stubs in place of the solutions, so they are
listed in the book but never executed."""

collect_ignore_glob = ["*_student.ipynb"]
