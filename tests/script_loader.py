"""Load one of ``scripts/*.py`` as a module, for tests of the functions inside a script."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from alfrl.base.paths import REPO_ROOT


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py`` as a fresh module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
