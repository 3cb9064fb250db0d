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

from tests.realnodes import image_path

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
    command = next(line for line in text.splitlines() if 'umoci config --image "$layout:$tag"' in line)
    words = shlex.split(command)
    flags: dict[str, list[str]] = {}
    for flag, value in itertools.pairwise(words):
        if flag.startswith("--config."):
            flags.setdefault(flag, []).append(value)
    return flags


def lock(file: str = "requirements.lock") -> dict[str, str]:
    lines = (ROOT / file).read_text().splitlines()
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
    assert "deploy/image/requirements.py pyproject.toml" in script  # the same image requirements
    assert 'deploy/image/requirements.py pyproject.toml "$EXTRAS"' in (ROOT / "Dockerfile").read_text()
    config = build_script_config()
    env = dict(item.split("=", 1) for item in config["--config.env"])
    docker_env = dict(re.findall(r"(\w+)=(\S+)", " ".join(docker["ENV"])))
    assert env == docker_env
    assert config["--config.entrypoint"] == json.loads(docker["ENTRYPOINT"][0])
    assert config["--config.user"] == docker["USER"] and config["--config.workingdir"] == docker["WORKDIR"]
    assert (ROOT / "Dockerfile").read_text().count("FROM python:3.11-slim") == 2


def test_the_locks_pin_every_dependency_within_pyprojects_ranges() -> None:
    """pyproject.toml gives compatible-release ranges; requirements.lock pins the runtime closure of every
    extra exactly, requirements-dev.lock the same versions plus the dev tools."""
    import tomllib

    from packaging.requirements import Requirement

    pinned, dev = lock(), lock("requirements-dev.lock")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = [*project["dependencies"], *(r for extra in ("report", "agents", "nvidia")
                                           for r in project["optional-dependencies"][extra])]
    for text in runtime:
        requirement = Requirement(text)
        assert "==" not in str(requirement.specifier), f"{text}: a range in pyproject.toml, the pin in the lock"
        version = pinned.get(requirement.name.lower().replace("_", "-"))
        assert version is not None and requirement.specifier.contains(version), (text, version)
    for text in project["optional-dependencies"]["dev"]:
        requirement = Requirement(text)
        if requirement.name != "hetsched":
            version = dev.get(requirement.name.lower().replace("_", "-"))
            assert version is not None and requirement.specifier.contains(version), (text, version)
    assert {name: dev.get(name) for name in pinned} == pinned


NODE_ONLY = {"grpcio", "protobuf", "nvidia-ml-py"}
"""What only the node image installs (the agents and nvidia extras); matplotlib (report) is in neither."""


@pytest.mark.parametrize("name", ["hetsched", "hetsched-node"])
def test_the_built_image_holds_its_part_of_the_lock_and_this_hetsched(name: str) -> None:
    """Each image holds locked versions only, the core in both, gRPC and NVML only in the node image, and
    nothing of the report extra."""
    import gzip
    import io

    path = image_path(name)
    if not path.exists():
        pytest.skip(f"{path} is not built here (scripts/build-image.sh {name}, as .ci/run does)")
    with tarfile.open(path) as archive:
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
                for member in files.getnames():
                    found = re.fullmatch(r"\.?/?opt/hetsched/lib/python3\.\d+/site-packages/([^/]+)-([^-/]+)"
                                         r"\.dist-info", member)
                    if found:
                        installed[found.group(1).lower().replace("_", "-")] = found.group(2)
    hetsched = installed.pop("hetsched")
    installed = {k: v for k, v in installed.items() if k not in ("pip", "setuptools")}  # the venv's own
    assert hetsched == importlib.metadata.version("hetsched")
    pinned = lock()
    assert {k: pinned.get(k) for k in installed} == installed  # every package at the locked version
    assert {"numpy", "pydantic", "kubernetes", "cryptography", "prometheus-client"} <= set(installed)
    assert "matplotlib" not in installed
    if name == "hetsched":
        assert not NODE_ONLY & set(installed), NODE_ONLY & set(installed)
    else:
        assert set(installed) >= NODE_ONLY
