"""``make lint`` lints named folders, not the whole clone (a reader's example file in the
root is not ours): every package folder of pyproject.toml must be among them, so a new
package is never silently left unlinted."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_lint_covers_every_package_folder() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^LINT_PATHS := (.+)$", makefile, re.M)
    assert found
    linted = set(found[1].split())
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = config["tool"]["setuptools"]["package-dir"].values()
    tops = {folder.split("/")[0] for folder in folders} - {"gen"}  # gen/: only buf writes it
    assert tops | {"tests", "tools"} <= linted
    assert all((ROOT / path).is_dir() for path in linted)
