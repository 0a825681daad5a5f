"""The grader's worker turns a notebook submission into Python the way IPython does (worker.notebook_source)."""
from __future__ import annotations

import sys

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


def test_without_ipython_the_fallback_also_keeps_a_continuation_line_as_code(tmp_path, monkeypatch):
    """The line-based fallback (no IPython on the grading machine; on the H100 the sandbox hid a carried IPython and
    the known-right percent-continuation notebook got "syntax error") reads `%` and `!` lines as magics only where a
    statement starts: not inside brackets, after a backslash or in a triple-quoted string."""
    monkeypatch.setitem(sys.modules, "IPython.core.inputtransformer2", None)  # the import now fails
    path = _notebook(tmp_path, 'n = 3\nmsg = ("n=%d"\n       % n)\nflag = (n\n        != 4)',
                     'doc = """\n%not a magic\n"""\ntotal = 1 + \\\n    2', "%matplotlib inline\n!ls",
                     "for i in range(2):\n    %time i\nlast = i", "%%time\ntimed = n * 2", "%%bash\necho skipped")
    source = worker.notebook_source(path)
    assert "TransformerManager" not in source and "get_ipython" not in source  # the fallback did the work
    ns = {"get_ipython": worker.NoIPython}
    exec(compile(source, path, "exec"), ns)
    assert ns["msg"] == "n=3" and ns["flag"] is True and ns["total"] == 3
    assert ns["doc"] == "\n%not a magic\n"  # inside a string: text
    assert ns["last"] == 1 and ns["timed"] == 6  # a magic inside a loop body is still a magic


def test_the_colab_install_cell_of_a_submitted_workbook_is_never_run(tmp_path, monkeypatch):
    """A submitted workbook starts with the generated Colab install cell (gpucourse.colab). A grading worker never runs
    it, even where the Colab marker is set: it would clone and pip-install inside the sandbox."""
    from gpucourse import colab

    monkeypatch.setenv("COLAB_RELEASE_TAG", "simulated")
    install = colab.FIRST_LINE + "\nraise SystemExit('the install cell ran')"
    path = _notebook(tmp_path, install, "answer = 42")
    ns = {"get_ipython": worker.NoIPython}
    exec(compile(worker.notebook_source(path), path, "exec"), ns)
    assert ns["answer"] == 42
