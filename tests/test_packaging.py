"""The set-up files agree with each other (pyproject, Makefile, environment.yml, CI)."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_matches_pyproject_and_makefile():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    major, minor = map(int, python.split("=")[1].split(".")[:2])
    floor = _pyproject()["project"]["requires-python"].removeprefix(">=")
    assert (major, minor) >= tuple(map(int, floor.split(".")))
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    torch_pin = re.search(r"^TORCH := (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert torch_pin in pip, "environment.yml must pin the same torch as the Makefile"
    editable = next(p for p in pip if p.startswith("-e ."))
    extras = re.findall(r"\[(.*)\]", editable)[0].split(",")
    assert set(extras) <= set(_pyproject()["project"]["optional-dependencies"])
    assert "notebooks" in extras


def test_pyproject_torch_range_admits_the_pin():
    deps = _pyproject()["project"]["dependencies"]
    torch_dep = Requirement(next(d for d in deps if d.startswith("torch")))
    pin = re.search(r"^TORCH := torch==(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert pin in torch_dep.specifier


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci/run").read_text()
    commands = [
        ln for ln in ci.splitlines() if ln.strip() and not ln.startswith(("#", "set ", "cd "))
    ]
    assert commands == ["make test"]
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
