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
