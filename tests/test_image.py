"""The two images hold the same thing: the registry-free build (scripts/build-image.sh: Debian bookworm via
mmdebstrap, OCI via umoci) and the ``Dockerfile`` (``python:3.11-slim``) both run deploy/image/install.sh
for the same two steps with the same inputs, and configure the same entrypoint, user, working directory
and environment. When the image was built here (.ci/run builds it), its configuration and the exact
packages in its virtual environment are checked against requirements.lock and this version of hetsched.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import re
import shlex
import tarfile
from pathlib import Path

import pytest

from tests.realnodes import hetsched_image

ROOT = Path(__file__).resolve().parents[1]


def dockerfile() -> dict[str, list[str]]:
    """Instruction → its arguments, the final stage only, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages = text.split("\nFROM ")
    found: dict[str, list[str]] = {}
    for line in stages[-1].splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.setdefault(word, []).append(rest.strip())
    return found


def build_script_config() -> dict[str, list[str]]:
    """The ``umoci config`` flags scripts/build-image.sh gives hetsched's image."""
    text = (ROOT / "scripts" / "build-image.sh").read_text().replace("\\\n", " ")
    command = next(line for line in text.splitlines() if 'umoci config --image "$layout:$version"' in line)
    words = shlex.split(command)
    flags: dict[str, list[str]] = {}
    for flag, value in itertools.pairwise(words):
        if flag.startswith("--config."):
            flags.setdefault(flag, []).append(value)
    return flags


def lock() -> dict[str, str]:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    return {name.lower().replace("_", "-"): version for name, _, version in
            (line.partition("==") for line in lines if line and not line.startswith("#"))}


def test_both_builds_run_the_same_install_steps_and_configure_the_image_alike() -> None:
    docker = dockerfile()
    steps = [re.search(r"sh /install\.sh (\w+) /wheels", run) for run in docker["RUN"]]
    assert [m.group(1) for m in steps if m] == ["deps", "hetsched"]
    script = (ROOT / "scripts" / "build-image.sh").read_text()
    assert 'chroot "$1" sh /tmp/install.sh deps /tmp/wheels' in script
    assert 'chroot "$root" sh /tmp/install.sh hetsched /tmp/dist' in script
    assert "--requirement requirements.lock" in script and "--requirement requirements.lock" in (
        ROOT / "Dockerfile").read_text()  # the same locked wheels, downloaded the same way
    config = build_script_config()
    env = dict(item.split("=", 1) for item in config["--config.env"])
    docker_env = dict(re.findall(r"(\w+)=(\S+)", " ".join(docker["ENV"])))
    assert env == docker_env
    assert config["--config.entrypoint"] == json.loads(docker["ENTRYPOINT"][0])
    assert config["--config.user"] == docker["USER"] and config["--config.workingdir"] == docker["WORKDIR"]
    assert (ROOT / "Dockerfile").read_text().count("FROM python:3.11-slim") == 2


def test_the_lock_pins_every_dependency_exactly_and_the_direct_ones_as_pyproject_does() -> None:
    pinned = lock()
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name, _, version = requirement.partition("==")
        assert pinned.get(name.lower().replace("_", "-")) == version, requirement


@pytest.mark.skipif(not hetsched_image().exists(), reason="the image is not built here "
                    "(scripts/build-image.sh, as .ci/run does)")
def test_the_built_image_holds_exactly_the_lock_and_this_hetsched() -> None:
    import gzip
    import io

    with tarfile.open(hetsched_image()) as archive:
        def blob(digest: str) -> bytes:
            member = archive.extractfile(f"./blobs/sha256/{digest.split(':')[1]}")
            assert member is not None
            return member.read()

        index = json.loads(archive.extractfile("./index.json").read())  # type: ignore[union-attr]
        (entry,) = index["manifests"]  # one image only
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == importlib.metadata.version("hetsched")
        manifest = json.loads(blob(entry["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))["config"]
        assert config["Entrypoint"] == ["/opt/hetsched/bin/hetsched"] and config["User"] == "65532:65532"
        installed: dict[str, str] = {}
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layer["digest"])))) as files:
                for name in files.getnames():
                    found = re.fullmatch(r"\.?/?opt/hetsched/lib/python3\.\d+/site-packages/([^/]+)-([^-/]+)"
                                         r"\.dist-info", name)
                    if found:
                        installed[found.group(1).lower().replace("_", "-")] = found.group(2)
    hetsched = installed.pop("hetsched")
    installed = {k: v for k, v in installed.items() if k not in ("pip", "setuptools")}  # the venv's own
    assert hetsched == importlib.metadata.version("hetsched")
    assert installed == lock()
