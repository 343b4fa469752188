"""Build hook: package the repository's data into the wheel as ``harness/_data/``.

Everything else is in ``pyproject.toml``. The data stays where it is in the
repository (``evidence/``, ``cases/``, ``vendor/calculon-0.1.0/``, the
baseline contract under ``goldens/``); a non-editable build copies it into
the built package so that an installed wheel finds it (see
``harness/locations.py``). An editable install reads the checkout itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: Repository paths copied into harness/_data/ (the same relative paths).
PACKAGED_DATA = ("evidence", "cases", "vendor/calculon-0.1.0", "goldens/baseline_regression_contract.json")


class BuildPyWithData(build_py):
    """``build_py``, then the repository data into ``<build>/harness/_data``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "harness" / "_data"
        for relative in PACKAGED_DATA:
            source, destination = ROOT / relative, target / relative
            if not source.exists():
                raise FileNotFoundError(f"{source}: packaged data is missing from the source tree")
            destination.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, destination, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.obtained*"))
            else:
                shutil.copy2(source, destination)


setup(cmdclass={"build_py": BuildPyWithData})
