"""The build of the compiled CPU kernels: a killed build's lock, one build shared by installs at other
paths. Skipped for a kernel that cannot be built here (no compiler)."""

from __future__ import annotations

import pytest

from fastweights.ops import cpu_extension, pool_norm_relu, srwm_cpu

EXTENSIONS = [srwm_cpu.EXTENSION, pool_norm_relu.EXTENSION]


@pytest.fixture(params=EXTENSIONS, ids=lambda e: e.stem)
def extension(request):
    if not request.param.available():
        pytest.skip(f"the {request.param.what} did not build")
    return request.param


def test_a_killed_builds_lock_is_removed(extension, caplog):
    # torch's builder leaves its baton file behind when killed mid-build and then waits for it forever;
    # under the OS lock, a build removes it (the kernel is built here already: ninja has nothing to do)
    baton = extension.build_directory() / "lock"
    baton.write_text("")
    with caplog.at_level("INFO", logger=extension.log.name):
        module = extension.build()
    assert not baton.exists() and hasattr(module, "__file__")
    assert "stale build lock" in caplog.text


def test_an_install_at_another_path_reuses_the_build(extension, tmp_path, monkeypatch):
    # a wheel or a second checkout has the same source at another path: the build file names the copy in
    # the build folder, so ninja finds everything up to date (no ~30 s rebuild, no rebuild back after)
    folder = extension.build_directory()
    extension.build()
    ninja, so = folder / "build.ninja", next(folder.glob("*.so"))
    before = (ninja.read_text(), so.stat().st_mtime_ns)
    elsewhere = tmp_path / "site-packages" / "fastweights" / "ops" / "csrc" / extension.source.name
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes(extension.source.read_bytes())
    monkeypatch.setattr(extension, "source", elsewhere)
    assert extension.build_directory() == folder
    assert extension.build() is not None
    assert (ninja.read_text(), so.stat().st_mtime_ns) == before
    assert str(tmp_path) not in ninja.read_text()


def test_the_builds_are_named_per_source():
    names = [e.build_name() for e in EXTENSIONS]
    assert len(set(names)) == len(names)
    assert all(n.startswith(f"fastweights_{e.stem}_") for n, e in zip(names, EXTENSIONS, strict=True))


def test_the_build_uses_the_packages_ninja_whatever_the_path(extension, monkeypatch, caplog):
    # Debian's ninja (1.11) and PyPI's (1.13) do not read each other's build log: a PATH that finds the
    # other one first (a shell without the virtualenv activated, a virtualenv reaching the packages
    # through a .pth file, where ninja.BIN_DIR is empty) must not rebuild the kernel
    import ninja

    extension.build()  # up to date with the package's ninja from here on
    so = next(extension.build_directory().glob("*.so"))
    before = so.stat().st_mtime_ns
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(ninja, "BIN_DIR", "")
    with caplog.at_level("INFO", logger=extension.log.name):
        assert extension.build() is not None
    assert so.stat().st_mtime_ns == before and "rebuilt" not in caplog.text
    assert cpu_extension.os.environ["PATH"] == "/usr/bin:/bin"  # restored after the build


def test_the_packages_ninja_is_found_from_its_file_record():
    import subprocess

    import ninja

    folder = cpu_extension.package_ninja_dir()
    assert folder is not None
    version = subprocess.run([f"{folder}/ninja", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip().startswith(ninja.__version__)  # e.g. 1.13.2.git.kitware.jobserver-pipe-1
