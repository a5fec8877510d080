"""A non-editable install works on its own: presets and data splits ship as package data, and the CLI
runs from another folder with the installed files (not this source tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "fastweights"


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_wheel_install_runs_the_smoke_preset_from_another_folder(tmp_path):
    # A venv without pip whose only extra path is this interpreter's site-packages (the pinned
    # dependencies, pip, setuptools): a path line in a .pth file, so the .pth files there (e.g. an
    # editable install of this repo) are not processed and cannot shadow the installed package.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "fastweights-test-deps.pth").write_text("".join(f"{p}\n" for p in sorted(deps)))

    # Build from a copy of what the wheel is made of, so nothing is written into the source tree.
    src = tmp_path / "src-copy"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(PACKAGE, src / "src" / "fastweights", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", FASTWEIGHTS_CACHE=str(tmp_path / "cache"))
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    _run([*pip, str(src)], cwd=tmp_path, env=env)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = "import fastweights, fastweights.config as c; print(fastweights.__file__); print(c.CONFIG_DIR)"
    module_file, config_dir = _run([str(python), "-c", probe], cwd=elsewhere, env=env).stdout.split()
    installed = site / "fastweights"
    assert Path(module_file) == installed / "__init__.py" and Path(config_dir) == installed / "configs"
    # every preset and every packaged class split is in the installed package
    for pattern in ("configs/**/*.yaml", "data/splits/**/*.json"):
        shipped = {p.relative_to(PACKAGE) for p in PACKAGE.glob(pattern)}
        assert shipped and shipped == {p.relative_to(installed) for p in installed.glob(pattern)}, pattern

    run_dir = tmp_path / "run"
    cmd = [str(venv / "bin" / "fastweights"), "acl", "train", "--preset", "smoke", "--run-dir", str(run_dir)]
    proc = _run([*cmd, "train.max_steps=2", f"data.cache_dir={tmp_path / 'cache'}"], cwd=elsewhere, env=env)
    assert "trained 2 steps in" in proc.stdout
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "latest.pt").is_file()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize(
    ("extras", "stamp"),
    [
        ({}, None),
        ({"FROZEN": "1"}, ".installed-frozen"),
        ({"RL": "1", "GPU": "1"}, ".installed-rl-gpu"),
        ({"HF": "1"}, ".installed-hf"),
    ],
)
def test_make_setup_installs_an_extra_asked_for_after_a_plain_setup(tmp_path, extras, stamp):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # a plain setup, newer than requirements.txt, pyproject.toml, setup.sh
    env = {k: v for k, v in os.environ.items() if k not in ("RL", "FROZEN", "GPU", "HF", "MAKEFLAGS")}
    dry = subprocess.run(
        ["make", "-n", "-C", str(REPO), "setup", f"VENV={venv}"],
        env={**env, **extras},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    if stamp is None:
        assert "setup.sh" not in dry.stdout  # nothing to do
    else:
        assert "scripts/setup.sh" in dry.stdout and f"touch {venv}/{stamp}" in dry.stdout
