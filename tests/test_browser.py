"""The course as a learner uses it: JupyterLab started the README's way (`make lab`), in a real browser (Debian's
Chromium, driven by playwright), every lesson and every exercise workbook opened and run with Run All.

A notebook fails on an error output, a cell left unrun, a dead kernel, a run past its time limit, an image that did
not load or a widget that did not render; a screenshot of it is saved (its path is printed). Lesson 03's roofline
explorer is also driven through its dropdowns, as a learner would, and must redraw its one view after each change.
Before a notebook is run, its saved outputs must not show a widget's raw ``VBox(children=...)`` text (what JupyterLab
shows for a widget it has no state for in an untrusted notebook).

One lab server and one browser serve every notebook; each notebook gets a fresh kernel, shut down after it. Nothing
is saved: autosave is off (settings in a temporary folder), and the server's log is checked for a save.

Needs Chromium (``python3 scripts/bootstrap.py --only-chromium``) and playwright (the test extra). Without them it
skips, saying why, unless GPUCOURSE_BROWSER_TEST=required (CI), where it fails instead.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("GPUCOURSE_BROWSER_TEST", "") == "required"
NOTEBOOKS = [f"{d}/{p.name}" for d in ("notebooks", "exercises") for p in sorted((ROOT / d).glob("*.ipynb"))]
# Run All is a hang detector here, not a benchmark: it fails when no cell has finished for STALL_S (a cell that hangs),
# or past PER_NOTEBOOK_S in all. Both leave room for a loaded 2-core machine (the rest of `make test` runs beside it:
# lesson 10's Run All took 33 s idle and over 150 s so); the time each notebook took is printed.
STALL_S = float(os.environ.get("GPUCOURSE_BROWSER_STALL", "150"))  # one cell, at most
PER_NOTEBOOK_S = float(os.environ.get("GPUCOURSE_BROWSER_TIMEOUT", "600"))  # Run All, per notebook
TOKEN = "gpucourse-browser-test"
# A widget's repr, as ipywidgets writes it in text/plain: "VBox(children=(...", "interactive(children=(...".
WIDGET_REPR = r"^[A-Za-z]+\((children|value|description|options|layout)="

# JupyterLab settings for the test's own server: no autosave (the lab must never write a notebook), no news popup,
# and every cell attached to the page (by default cells far below the view are not, so their outputs can't be read).
SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


def _chromium() -> str | None:
    given = os.environ.get("GPUCOURSE_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    """Why the browser test cannot run here (None: it can)."""
    if shutil.which("make") is None:
        return "make is not installed (the test starts the lab the README's way, `make lab`)"
    if not (ROOT / ".venv" / ".gpucourse-installed").exists() or \
            Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        return "runs only inside the venv that `make` created (it starts `make lab`)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if _chromium() is None:
        return ("Chromium is not installed: python3 scripts/bootstrap.py --only-chromium (as root on Debian), or "
                "apt-get install chromium; GPUCOURSE_CHROMIUM=/path/to/chrome for another build")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server started with `make lab` (its own port and token, no browser of its own, the app exposed
    to the page for reading cell state) and a Chromium page showing it."""
    why = _missing()
    if why:
        if REQUIRED:
            pytest.fail(f"GPUCOURSE_BROWSER_TEST=required, but {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    home = tmp_path_factory.mktemp("lab")
    for rel, value in SETTINGS.items():
        (home / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / rel).write_text(json.dumps(value))
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"))
    port = _free_port()
    args = f"--no-browser --port {port} --ServerApp.token={TOKEN} --LabApp.expose_app_in_browser=True"
    log = home / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base = f"http://127.0.0.1:{port}"
    pw = browser = None
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail("JupyterLab did not start: " + log.read_text()[-3000:])
                time.sleep(0.5)
        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        # what `make lab` opens in a browser (jupyter lab FILE): the first lesson, in a fresh workspace
        page.goto(f"{base}/lab/tree/notebooks/00_start_here.ipynb?reset&token={TOKEN}")
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.restored; }")
        yield {"page": page, "base": base, "log": log, "shots": tmp_path_factory.mktemp("screenshots")}
    finally:
        if browser is not None:
            browser.close()
        if pw is not None:
            pw.stop()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    saved = [line for line in log.read_text(errors="replace").splitlines() if "Saving file" in line]
    assert not saved, f"the lab wrote notebooks during the browser test: {saved[:3]}"


# --- what the test runs in the page ----------------------------------------------------------------------------------

OPEN = """async (path) => {
  const app = window.jupyterapp;
  const w = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await w.context.ready;
  await w.sessionContext.ready;
  app.shell.activateById(w.id);
  window.__nb = w;
  return w.context.path;
}"""

KERNEL = """() => { const k = window.__nb.sessionContext.session?.kernel; return k ? k.status : 'none'; }"""

# The outputs' DOM: mime type, text, images, widgets, and whether each shows a raw widget repr.
OUTPUTS = """(repr) => {
  const w = window.__nb;
  const rows = [];
  w.content.widgets.forEach((cell, i) => {
    if (cell.model.type !== 'code') return;
    cell.node.querySelectorAll('.jp-OutputArea-output').forEach(o => {
      const text = (o.textContent || '').trim();
      rows.push({cell: i, mime: o.getAttribute('data-mime-type'), text: text.slice(0, 300),
                 raw_widget: new RegExp(repr).test(text),
                 images: Array.from(o.querySelectorAll('img')).map(im => [im.complete, im.naturalWidth]),
                 widgets: o.querySelectorAll('.jupyter-widgets').length,
                 is_widget: o.classList.contains('jupyter-widgets') ||
                            o.getAttribute('data-mime-type') === 'application/vnd.jupyter.widget-view+json',
                 widget_error: /^(Error displaying widget|Loading widget)/.test(text)});
    });
  });
  return rows;
}"""

# Run All, as the Run menu does; window.__run says 'running' until the last cell finished (or the run stopped at an
# error). The test polls it, with the number of cells that have finished (an execution count, no '*').
RUN_ALL = """() => {
  window.__run = 'running';
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    v => { window.__run = 'done'; }, e => { window.__run = 'failed: ' + e; });
}"""
PROGRESS = """() => [window.__run, window.__nb.content.widgets.filter(c => c.model.type === 'code' &&
  c.model.executionCount !== null && !(c.promptNode?.textContent || '').includes('*')).length]"""


def _run_all(page) -> str:
    """Run All; 'done', 'failed: ...', 'stalled' (no cell finished for STALL_S) or 'timeout' (PER_NOTEBOOK_S)."""
    page.evaluate(RUN_ALL)
    start = last_change = time.time()
    finished = -1
    while True:
        state, n = page.evaluate(PROGRESS)
        now = time.time()
        if state != "running":
            return state
        if n != finished:
            finished, last_change = n, now
        if now - last_change > STALL_S:
            return "stalled"
        if now - start > PER_NOTEBOOK_S:
            return "timeout"
        time.sleep(0.5)

# Each code cell's execution count and error outputs, from the notebook's model.
CELLS = """() => window.__nb.content.widgets.map((cell, i) => {
  if (cell.model.type !== 'code') return null;
  const outs = cell.model.outputs.toJSON();
  return {cell: i, count: cell.model.executionCount, source: cell.model.sharedModel.getSource().trim().length > 0,
          running: (cell.promptNode?.textContent || '').includes('*'),
          errors: outs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)};
}).filter(c => c !== null)"""

SCROLL_TO = """(i) => { const w = window.__nb; w.content.activeCellIndex = i;
  const node = w.content.widgets[i].node; node.scrollIntoView({block: 'start'}); }"""

CLOSE = """async () => {
  const w = window.__nb;
  try { await w.sessionContext.shutdown(); } catch (e) {}
  w.context.model.dirty = false;
  w.dispose();
  window.__nb = undefined;
}"""

# The explorer's state in the page: its text, and its plot's image (loaded, and how much of it is not background).
EXPLORER = """async () => {
  const boxes = document.querySelectorAll('.gpucourse-roofline-explorer');
  if (boxes.length === 0) return {boxes: 0};
  const box = boxes[0];
  const img = box.querySelector('img');
  let inked = 0;
  if (img && img.complete && img.naturalWidth > 0) {
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let p = 0; p < d.length; p += 4) if (d[p + 3] > 0 && (d[p] < 200 || d[p + 1] < 200 || d[p + 2] < 200)) n++;
    inked = n / (c.width * c.height);
  }
  const area = box.closest('.jp-OutputArea');
  return {boxes: boxes.length, text: (box.querySelector('pre') || {}).textContent || '',
          src: img ? img.src.slice(-64) : null, visible: img ? img.offsetWidth > 0 && img.offsetHeight > 0 : false,
          loaded: img ? img.complete && img.naturalWidth > 0 : false, inked,
          outputs: area ? area.querySelectorAll('.jp-OutputArea-output').length : -1,
          images_in_cell: area ? area.querySelectorAll('img').length : -1};
}"""


def _wait_idle(page, seconds: float) -> str:
    deadline, status = time.time() + seconds, ""
    while time.time() < deadline:
        status = page.evaluate(KERNEL)
        if status == "idle":
            return status
        if status == "dead":
            return status
        time.sleep(0.2)  # "unknown", "starting", "busy", "restarting", or no kernel yet
    return status


def _drive_explorer(page, problems: list) -> list:
    """Change lesson 03's explorer through its dropdowns, as a learner does; after each change the one view must
    show the new choice, with a plot that loaded and is not blank. Returns what it saw."""
    seen = []
    state = page.evaluate(EXPLORER)
    if state.get("boxes") != 1:
        problems.append(f"the roofline explorer rendered {state.get('boxes')} times (want once)")
        return seen
    if state["outputs"] != 1 or state["images_in_cell"] != 1:
        problems.append(f"the explorer's cell shows {state['outputs']} outputs and {state['images_in_cell']} images "
                        "(want its one view: the widget, one plot)")
    box = page.locator(".gpucourse-roofline-explorer").first
    box.scroll_into_view_if_needed()
    selects = box.locator(".widget-dropdown select")
    for which, value, expect in [(0, "elementwise", "relu n="), (0, "gemv", "GEMV"), (1, "float32", "(float32)"),
                                 (0, "reduction", "row sum"), (0, "gemm", "GEMM")]:
        before = state["src"]
        selects.nth(which).select_option(value)
        deadline = time.time() + 30
        while True:
            time.sleep(0.3)
            state = page.evaluate(EXPLORER)
            done = (expect in state.get("text", "") and state.get("src") != before and state.get("loaded")
                    and page.evaluate(KERNEL) == "idle")
            if done or time.time() > deadline:
                break
        seen.append({"choice": value, "text": state.get("text", "").splitlines()[:1], "inked": state.get("inked")})
        if not done:
            problems.append(f"after choosing {value!r} the explorer shows {state.get('text', '')[:80]!r}, plot "
                            f"{'loaded' if state.get('loaded') else 'not loaded'} (want {expect!r} and a new plot)")
        elif state["inked"] < 0.02 or not state["visible"]:  # axes alone ink about 1% of a figure, a roofline 4%
            problems.append(f"after choosing {value!r} the explorer's plot is blank ({state['inked']:.1%} inked)")
        if state.get("boxes") != 1 or state.get("images_in_cell") != 1:
            problems.append(f"after choosing {value!r} the explorer's cell shows {state.get('images_in_cell')} plots")
    return seen


def test_make_lab_opens_the_first_lesson(lab):
    """The README: `make lab` opens JupyterLab on notebooks/00_start_here.ipynb."""
    js = """() => Array.from(window.jupyterapp.shell.widgets('main')).map(w => w.context ? w.context.path : null)
        .filter(p => p)"""
    try:
        lab["page"].wait_for_function(f"() => ({js})().includes('notebooks/00_start_here.ipynb')", timeout=60_000)
    finally:
        paths = lab["page"].evaluate(js)
    assert "notebooks/00_start_here.ipynb" in paths, paths


@pytest.mark.parametrize("rel", NOTEBOOKS)
def test_notebook_runs_in_jupyterlab(lab, rel):
    page = lab["page"]
    problems, saved_problems, saved_cells, seen = [], [], [], []
    t0 = time.time()
    assert page.evaluate(OPEN, rel) == rel
    status = _wait_idle(page, 90)
    if status != "idle":
        problems.append(f"the kernel did not start (status {status!r})")
    first_bad = None
    try:
        for row in page.evaluate(OUTPUTS, WIDGET_REPR):  # what the file shows before anything runs
            if row["raw_widget"]:
                saved_problems.append(f"cell {row['cell']}: the saved output shows raw widget text "
                                      f"{row['text'][:60]!r}")
                saved_cells.append(row["cell"])
        if saved_problems:
            page.evaluate(SCROLL_TO, saved_cells[0])
            shot = lab["shots"] / (rel.replace("/", "__") + "-before-run.png")
            page.screenshot(path=str(shot))
            print(f"\n{rel}: screenshot of its saved outputs before running: {shot}")
        # Clear the saved outputs and execution counts first (not saved): what shows afterwards is this run's.
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        ran = _run_all(page) if not problems else "not run"
        run_s = time.time() - t0
        cells = page.evaluate(CELLS)
        status = _wait_idle(page, 5 if ran == "done" else 1)
        if ran in ("timeout", "stalled"):
            running = [c["cell"] for c in cells if c["running"]]
            problems.append((f"Run All did not finish within {PER_NOTEBOOK_S:.0f} s" if ran == "timeout" else
                             f"Run All stalled: no cell finished for {STALL_S:.0f} s") +
                            f" (still running: cell {running[:1]})")
            first_bad = running[0] if running else first_bad
        elif ran != "done":
            problems.append(f"Run All: {ran}")
        if status in ("dead", "unknown", "none", "restarting", "autorestarting"):
            problems.append(f"the kernel died (status {status!r})")
        if page.locator(".jp-Dialog").count():  # e.g. "Kernel Restarting: the kernel appears to have died"
            problems.append(f"a dialog is open: {page.locator('.jp-Dialog').first.inner_text()[:200]!r}")
        for c in cells:
            for e in c["errors"]:
                problems.append(f"cell {c['cell']}: {e[:1200]}")
                first_bad = c["cell"] if first_bad is None else first_bad
        unrun = [c["cell"] for c in cells if c["source"] and c["count"] is None]
        if unrun and ran == "done":
            problems.append(f"cells never ran: {unrun[:5]}")
            first_bad = unrun[0] if first_bad is None else first_bad
        deadline = time.time() + 10  # images and widget views attach after their output message
        while True:
            rows = page.evaluate(OUTPUTS, WIDGET_REPR)
            if time.time() > deadline or not any(r["text"].startswith("Loading widget") for r in rows):
                break
            time.sleep(0.5)
        for row in rows:
            bad = [im for im in row["images"] if not im[0] or im[1] == 0]
            if bad:
                problems.append(f"cell {row['cell']}: an image did not load ({row['mime']})")
            unrendered = row["raw_widget"] or row["widget_error"] or (row["is_widget"] and row["widgets"] == 0)
            if unrendered:  # e.g. "Error displaying widget: model not found"
                problems.append(f"cell {row['cell']}: a widget did not render: {row['text'][:80]!r}")
            if bad or unrendered:
                first_bad = row["cell"] if first_bad is None else first_bad
        if rel == "notebooks/03_memory_hierarchy.ipynb" and not problems:
            seen = _drive_explorer(page, problems)
            shot = lab["shots"] / "notebooks__03_explorer-after-changes.png"
            page.screenshot(path=str(shot))
            print(f"\n{rel}: the explorer after its last change: {shot}")
        if problems:
            if first_bad is not None:
                page.evaluate(SCROLL_TO, first_bad)
            shot = lab["shots"] / (rel.replace("/", "__") + ".png")
            page.screenshot(path=str(shot))
            print(f"\n{rel}: screenshot of the problem: {shot}")
        print(f"\n{rel}: Run All {run_s:.1f} s" + (f"; explorer after each change: {seen}" if seen else ""))
    finally:
        for _ in range(5):  # a dialog left open (a dead kernel's "Kernel Restarting") would block the next notebook
            if not page.locator(".jp-Dialog").count():
                break
            page.keyboard.press("Escape")
            time.sleep(0.3)
        page.evaluate(CLOSE)
    assert not problems, f"{rel} in JupyterLab:\n  " + "\n  ".join(problems)
    if saved_problems:
        pytest.fail(f"{rel} before running:\n  " + "\n  ".join(saved_problems))
