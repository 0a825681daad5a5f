"""The grader's worker turns a notebook submission into Python the way IPython does (worker.notebook_source)."""
from __future__ import annotations

import nbformat

from gpucourse.grading import worker


def _notebook(tmp_path, *cells):
    path = tmp_path / "sub.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return str(path)


def test_a_line_that_continues_a_string_format_with_percent_stays_code(tmp_path):
    """A formatter wraps `"n=%d" % n` so the continuation line starts with `%`: it is code, not a line magic (it used
    to become `pass` and the submission got "syntax error")."""
    path = _notebook(tmp_path, 'n = 3\nmsg = ("n=%d"\n       % n)', "%matplotlib inline\n!ls\nfiles = !ls",
                     "%%time\ntimed = n * 2", "%%bash\necho skipped")
    ns = {"get_ipython": worker.NoIPython}
    exec(compile(worker.notebook_source(path), path, "exec"), ns)
    assert ns["msg"] == "n=3"
    assert ns["files"] == []  # a grader runs no shell
    assert ns["timed"] == 6  # %%time runs its body; %%bash is skipped
