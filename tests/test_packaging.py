"""environment.yml (a local lab that runs the tests) names pyproject.toml's dependencies plus its lab and test extras;
the entry point exists."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!;\[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_deps() -> set:
    """The dependencies and the lab and test extras: what `make install` puts in .venv (scripts/bootstrap.py)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {_name(r) for r in [*project["dependencies"], *extras["lab"], *extras["test"]]}


def environment_deps() -> set:
    names, in_deps = set(), False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if not line.startswith(" ") and line.strip():
            in_deps = line.startswith("dependencies:")
            continue
        if not in_deps:
            continue
        m = re.match(r"\s*-\s+(.+?)\s*$", line)
        if not m or m.group(1).endswith(":") or m.group(1).startswith("-e"):
            continue
        names.add(_name(m.group(1)))
    return names - {"python", "pip"}


def test_environment_yml_matches_pyproject():
    py, env = pyproject_deps(), environment_deps()
    assert py == env, f"only in pyproject: {sorted(py - env)}; only in environment.yml: {sorted(env - py)}"
    assert {"torch", "triton", "nbval", "jupyterlab", "ipywidgets", "matplotlib"} <= py


def test_console_script_points_at_the_cli():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["scripts"]["gpucourse"] == "gpucourse.cli:main"
    from gpucourse.cli import main

    assert callable(main)
