"""`swapctl build` and `deploy --build` against a real Docker engine, with a base image made locally."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import docker_engine, ensure_base_image, prover_config
from test_deploy import exe_sha, sha

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def base_image(tmp_path_factory) -> str:
    work = tmp_path_factory.mktemp("docker")
    client, dockerd = docker_engine(work)
    try:
        yield ensure_base_image(client, work)
    finally:
        if dockerd:  # started here: stopped here (the image stays in the engine's store)
            dockerd.terminate()
            dockerd.wait(60)


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local history and cache go to the test's own directories."""


def swapctl(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swapctl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def build_table(base_image: str, **args: str) -> dict:
    return {"dockerfile": str(ROOT / "Dockerfile.cuzk-rebuild"), "context": str(ROOT),
            "args": {"BASE_IMAGE": base_image, **args}}


def test_build_compiles_the_prover_in_docker_and_takes_the_binary_out(base_image, box, tmp_path):
    box.write_playbook(build=build_table(base_image, TIMING="1"))
    out = tmp_path / "out" / "cuzk"
    r = swapctl("build", "-p", str(box.playbook_path), "--build-arg", "TAG=docker", "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads(Path(f"{out}.build.json").read_text())
    assert manifest["sha256"] == sha(out) and manifest["image_id"].startswith("sha256:")
    assert manifest["args"] == {"BASE_IMAGE": base_image, "TIMING": "1", "TAG": "docker"}
    assert subprocess.run([str(out), "--version"], capture_output=True, text=True).stdout == "prover docker\n"
    assert not list(out.parent.glob(".*"))  # no temporary left beside it


def test_deploy_build_swaps_in_the_built_binary_and_history_shows_its_build(base_image, box, prover, tmp_path):
    box.start_by_hand(prover, prover_config())
    box.write_playbook(build=build_table(base_image, TAG="docker"))
    r = swapctl("deploy", "lab", "--build", "--build-arg", "TIMING=1", "--yes", "-p", str(box.playbook_path),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    built = tmp_path / "build" / "cuzk"
    pid = box.one_daemon()
    assert exe_sha(pid) == sha(built) != sha(prover)
    release = box.data / ".swapctl" / "cuzk" / "releases" / sha(built)[:12] / "manifest.json"
    recorded = json.loads(release.read_text())["build"]
    assert recorded["args"]["TIMING"] == "1" and recorded["image"].startswith("sha256:")
    h = swapctl("history", "lab", "-p", str(box.playbook_path), cwd=tmp_path, env={"COLUMNS": "250"})
    assert "TIMING=1" in h.stdout


def test_failed_build_names_the_step_and_shows_its_last_lines(base_image, box, tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo compiling the prover && exit 3\n")
    box.write_playbook(build={"dockerfile": str(ctx / "Dockerfile"), "context": str(ctx)})
    r = swapctl("build", "-p", str(box.playbook_path), "-o", str(tmp_path / "out" / "cuzk"), cwd=tmp_path)
    assert r.returncode == 1
    assert "the build failed at Step 2/2 : RUN echo compiling the prover && exit 3" in r.stderr
    assert "returned a non-zero code: 3" in r.stderr and "compiling the prover" in r.stderr.split("\n", 1)[1]
    assert not (tmp_path / "out" / "cuzk").exists()


def test_binary_for_another_platform_is_refused_before_any_upload(base_image, box, prover, tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "prover").write_bytes(prover.read_bytes())
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY prover /cuzk\n")
    box.write_playbook(build={"dockerfile": str(ctx / "Dockerfile"), "context": str(ctx), "platform": "linux/arm64"})
    r = swapctl("build", "-p", str(box.playbook_path), "-o", str(tmp_path / "out" / "cuzk"), cwd=tmp_path)
    assert r.returncode == 2
    assert "the image built a x86_64 binary, but build.platform is linux/arm64" in r.stderr
    assert not (tmp_path / "out" / "cuzk").exists()


def test_without_an_engine_build_says_how_to_start_one(box, tmp_path):
    box.write_playbook(build={"dockerfile": str(ROOT / "Dockerfile.cuzk-rebuild"), "context": str(ROOT)})
    r = swapctl("build", "-p", str(box.playbook_path), cwd=tmp_path,
                env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert r.returncode == 3
    assert f"no Docker engine answers at unix://{tmp_path}/no-engine.sock" in r.stderr and "dockerd" in r.stderr
