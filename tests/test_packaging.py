"""Static checks of what cannot run here: the Docker image (no Docker engine) and the Makefile."""

from __future__ import annotations

import json
import re

import tomllib

from helpers import ROOT


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_builds_from_cuda_pytorch_installs_the_package_and_runs_mixer() -> None:
    instructions = dockerfile_instructions()
    assert all(op in {"FROM", "WORKDIR", "COPY", "RUN", "ENV", "ENTRYPOINT", "CMD", "ARG"} for op, _ in instructions)
    assert instructions[0][0] == "FROM"
    assert re.fullmatch(r"pytorch/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-(runtime|devel)", instructions[0][1])
    copied = " ".join(arg for op, arg in instructions if op == "COPY")
    for needed in ("pyproject.toml", "mixer_lightning", "configs"):
        assert needed in copied
    assert any(op == "RUN" and re.search(r"pip install( --no-cache-dir)? \.(\s|$)", arg) for op, arg in instructions)
    (entrypoint,) = [arg for op, arg in instructions if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["mixer"]


def test_console_script_and_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "mixer-lightning"
    assert project["scripts"] == {"mixer": "mixer_lightning.cli:main"}
    names = {re.split(r"[<>=\[ ]", dep)[0] for dep in project["dependencies"]}
    for needed in (
        "torch",
        "torchvision",
        "lightning",
        "torchmetrics",
        "timm",
        "einops",
        "jsonargparse",
        "tensorboard",
        "datasets",
        "scikit-learn",
        "matplotlib",
    ):
        assert needed in names
    for dep in project["dependencies"]:
        assert not re.match(r"torch(vision)?\s*(==|>=)\s*2\.(1[5-9]|[2-9]\d)", dep), dep  # never newer than 2.14.1


def test_ci_runs_make_test() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^quickstart:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_tested_version_range_is_the_claimed_one() -> None:
    """pyproject.toml's lower bounds are the releases `make test-min` runs the suite with
    (constraints/minimum.txt, in CI), its upper bounds the next release line not tested, and the
    releases the reproductions ran with (constraints/lock.txt) lie inside the range."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    claimed = {
        (r := Requirement(dep)).name: r.specifier
        for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }

    def pins(name: str) -> dict[str, Version]:
        lines = (ROOT / "constraints" / name).read_text().splitlines()
        return {
            line.split("==")[0].strip().lower(): Version(line.split("==")[1].split("#")[0].strip())
            for line in lines
            if "==" in line and not line.startswith("#")
        }

    def release(version: Version) -> tuple[int, ...]:  # 1.3 is 1.3.0; 1.3.0.post0 too
        return (*version.release, 0, 0)[:3]

    lowest, locked = pins("minimum.txt"), pins("lock.txt")
    assert set(lowest) == {"lightning", "jsonargparse", "timm", "torchmetrics", "datasets"}
    for name, version in lowest.items():
        lower = [Version(spec.version) for spec in claimed[name] if spec.operator == ">="]
        assert [release(v) for v in lower] == [release(version)], f"{name}: pyproject's lower bound is not {version}"
        assert version in claimed[name] and locked[name] in claimed[name], name
    for name in ("lightning", "jsonargparse"):
        assert any(spec.operator == "<" for spec in claimed[name]), f"{name} needs an upper bound"
    assert "make test-min" in (ROOT / ".ci" / "run").read_text()
