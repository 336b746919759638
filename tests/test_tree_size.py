"""The tracked tree fits the copy a GPU machine takes (64 MiB with the wheels it carries), and the adapters the
course uses are in it while the others say how to rebuild them."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from alfrl.base.paths import REPO_ROOT

LIMIT_MIB = 40
"""The tracked tree's ceiling: a device run copies at most 64 MiB, and about 24 of them are for wheels (docs/gpu.md)."""


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tree's size is a property of one")
    return [name for name in out.decode().split("\0") if name]


def test_the_tracked_tree_is_at_most_40_mib():
    sizes = {name: (REPO_ROOT / name).stat().st_size for name in tracked_files() if (REPO_ROOT / name).is_file()}
    total = sum(sizes.values())
    largest = ", ".join(f"{name} ({size / 2**20:.1f} MiB)" for name, size in
                        sorted(sizes.items(), key=lambda kv: -kv[1])[:5])
    assert total <= LIMIT_MIB * 2**20, (
        f"the tracked tree is {total / 2**20:.1f} MiB, over {LIMIT_MIB} MiB: a GPU machine's copy would leave no room "
        f"for its wheels. The largest files: {largest}. Keep a reproducible artefact out of git (see "
        "data/warmstart/README.md for how an adapter says so) or compress it")


def notebook_adapters() -> set[str]:
    """Adapter folders the notebooks' code names (data/.../adapters/step_N, data/...)."""
    found = set()
    for notebook in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        code = "".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]
                       if cell["cell_type"] == "code")
        found |= set(re.findall(r"data/[\w/]+/adapters/step_\d{5}", code))
    return found


def test_the_adapters_the_course_uses_are_in_the_tree_and_the_others_say_how_to_rebuild():
    from alfrl.agent.models import DEFAULT_WARM_START, SCALE_GRPO, SHIPPED, check_adapter

    tracked = set(tracked_files())
    used = {SHIPPED[DEFAULT_WARM_START][1], SHIPPED[SCALE_GRPO][1]} | notebook_adapters()
    assert "data/scale/grpo/adapters/step_00010" in used  # notebooks 06 and 07's GRPO after 10 updates
    for folder in used:
        assert f"{folder}/adapter_model.safetensors" in tracked, folder
    out_of_git = sorted({name.rsplit("/", 1)[0] for name in tracked if name.endswith("/adapter_config.json")} - used)
    assert "data/warmstart" in out_of_git and len(out_of_git) >= 10
    for folder in out_of_git:
        assert f"{folder}/adapter_model.safetensors" not in tracked
        assert "Weights not in git" in (REPO_ROOT / folder / "README.md").read_text(), folder
        if not (REPO_ROOT / folder / "adapter_model.safetensors").is_file():  # not rebuilt in this checkout
            with pytest.raises(FileNotFoundError, match="keeps them out of git.*rebuild them as"):
                check_adapter(REPO_ROOT / folder)
    for name, (_, folder) in SHIPPED.items():  # by name: the same message, naming the adapter
        if folder not in used and not (REPO_ROOT / folder / "adapter_model.safetensors").is_file():
            with pytest.raises(FileNotFoundError, match=f"{folder}/README.md"):
                check_adapter(name)
