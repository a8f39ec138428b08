"""What a new user gets: every import declared, and the wheel alone runs swapctl, sandbox included."""

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from lab import free_port

ROOT = Path(__file__).resolve().parent.parent


def third_party_imports() -> dict[str, set[str]]:
    """Top-level names imported by swapctl's modules that are neither stdlib nor swapctl -> the files."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "swapctl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "swapctl":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def normalized(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def test_every_third_party_import_is_a_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {normalized(r) for r in project["dependencies"]}
    optional = {normalized(r) for extra in project["optional-dependencies"].values() for r in extra}
    dists = packages_distributions()
    missing = {}
    for module, files in third_party_imports().items():
        provided_by = {normalized(d) for d in dists.get(module, [module])}
        if not provided_by & (declared | optional):
            missing[module] = sorted(files)
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"
    assert "docker" in declared  # `swapctl build` is a core verb, not an extra


def test_optional_imports_stay_optional():
    """matplotlib is a dependency, but only the plotting module imports it (inside its functions): a
    command that draws nothing pays nothing for it."""
    assert third_party_imports().get("matplotlib", set()) <= {"swapctl/logs/plot.py"}


def source_tree(dest: Path) -> Path:
    """The files a clean clone has (tracked, plus new ones not ignored): no stale build/ or egg-info."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """swapctl's wheel installed into an empty venv with only its declared dependencies: the venv's bin/."""
    base = tmp_path_factory.mktemp("wheel")
    tree = source_tree(base / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                    "-w", str(base / "dist"), str(tree)], check=True, capture_output=True)
    [wheel] = (base / "dist").glob("swapctl-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True)
    # the dependencies come from the index (pip's cache makes the second time quick)
    subprocess.run([str(base / "venv/bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True)
    shutil.rmtree(tree)  # nothing may still point into a source tree
    return base / "venv" / "bin"


@pytest.fixture
def user_env(tmp_path, installed) -> dict:
    """A shell of someone who installed the wheel: its venv first on PATH, no repo on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SWAPCTL_PLAYBOOK")}
    env.update(PATH=f"{installed}:{env['PATH']}", HOME=str(tmp_path / "home"),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    (tmp_path / "home").mkdir()
    return env


def run(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["swapctl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_installed_wheel_runs_from_outside_the_repo(installed, user_env, tmp_path):
    where = subprocess.run([str(installed / "python"), "-c", "import swapctl; print(swapctl.__file__)"],
                           cwd=tmp_path, env=user_env, capture_output=True, text=True, check=True).stdout
    assert "site-packages" in where and str(ROOT) not in where
    r = run(user_env, tmp_path, "--help")
    assert r.returncode == 0, r.stderr
    assert "deploy" in r.stdout and "sandbox" in r.stdout
    r = run(user_env, tmp_path, "--version")
    assert r.returncode == 0 and re.fullmatch(r"swapctl \d+\.\d+\.\d+\n", r.stdout), r.stdout + r.stderr
    r = run(user_env, tmp_path, "build", "--help")
    assert r.returncode == 0, r.stderr
    assert "--build-arg" in r.stdout
    r = run(user_env, tmp_path, "init", "farm.toml", "--example", "farm")  # playbooks/ came along
    assert r.returncode == 0, r.stderr
    assert "[rollout]" in (tmp_path / "farm.toml").read_text()


def test_the_installed_wheel_draws_the_timeline_and_the_experiment_report(installed, user_env, tmp_path):
    """No extras: `pip install swapctl` alone draws what `timings --plot` and `experiment --report` draw (the
    report once ended in a ModuleNotFoundError after a whole experiment, its file never written)."""
    saved = ROOT / "tests" / "data" / "h200-experiment"
    png = tmp_path / "timeline.png"
    r = run(user_env, tmp_path, "timings", str(saved / "cuzk.log"), "--samples", str(saved / "gpu-samples.dmon"),
            "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    report = tmp_path / "report.html"
    r = subprocess.run([str(installed / "python"), str(ROOT / "tests" / "saved_report.py"), str(report)],
                       cwd=tmp_path, env=user_env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    page = report.read_text()
    assert "the copy was the bottleneck" in page and page.count("src='data:image/png;base64,") == 3


def test_the_installed_wheel_brings_up_the_sandbox_and_reads_its_status(user_env, tmp_path):
    sandbox = tmp_path / "sb"
    r = run(user_env, tmp_path, "sandbox", "up", "--dir", str(sandbox), "--port", str(free_port()))
    try:
        assert r.returncode == 0, r.stderr
        assert (sandbox / "builds" / "prover-b").is_file()  # compiled from the sources the wheel carries
        r = run(user_env, tmp_path, "status", "sandbox", "-p", str(sandbox / "swapctl.toml"))
        assert r.returncode == 0, r.stderr
        assert "daemon: pid" in r.stdout
    finally:
        r = run(user_env, tmp_path, "sandbox", "down", "--dir", str(sandbox))
    assert r.returncode == 0, r.stderr
    assert "sandbox down" in r.stdout


def listed(path: Path) -> set[str]:
    """The names a scripts/gpu-*.txt list gives, one a line, comments left out."""
    return {normalized(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def test_gpu_run_lists_every_package_swapctl_needs_on_the_gpu_machine():
    """scripts/gpu-wheels.txt holds swapctl's dependencies the GPU image lacks, and all of theirs."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    # checked there, ../shared/gpu-machine.md; matplotlib: the H200 runs drew report.html's and timeline.png's
    # pictures with the image's own (tests/data/h200-experiment)
    image_has = {"typer", "rich", "matplotlib"}
    # the GPU machine runs the benchmark: no `swapctl build`, no inventory, no `sandbox up --curio`
    unused_there = {"docker", "pyyaml", "psycopg"}
    wheels = listed(ROOT / "scripts" / "gpu-wheels.txt")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {normalized(r) for r in project["dependencies"]} - image_has - unused_there <= wheels
    there = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
             "platform_python_implementation": "CPython", "extra": ""}
    for name in wheels:
        for req in map(Requirement, requires(name) or []):
            if req.marker is None or req.marker.evaluate(there):
                assert normalized(req.name) in wheels | image_has, f"{name} needs {req.name}: add it to gpu-wheels.txt"
    assert {"openssh-server", "openssh-sftp-server", "openssh-client"} <= listed(ROOT / "scripts" / "gpu-debs.txt")


def test_gpu_run_without_its_carried_files_says_so_in_one_line(tmp_path):
    (tmp_path / "scripts").mkdir()
    for name in ("gpu-run.sh", "gpu-wheels.txt", "gpu-debs.txt"):
        shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    r = subprocess.run(["bash", str(tmp_path / "scripts" / "gpu-run.sh")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.splitlines()
    assert ".whl/ (absent)" in line and ".debs/ (absent)" in line and "gpu-run.sh --fetch" in line
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".debs").mkdir()
    (tmp_path / ".whl" / "tomlkit-0.15.2-py3-none-any.whl").touch()
    (tmp_path / ".debs" / "openssh-client_1%3a9.2p1-2+deb12u10_amd64.deb").touch()
    r = subprocess.run(["bash", str(tmp_path / "scripts" / "gpu-run.sh")], capture_output=True, text=True, timeout=30)
    [line] = r.stderr.splitlines()
    assert r.returncode == 2 and ".whl/paramiko" in line and ".debs/openssh-server" in line
    assert ".whl/tomlkit" not in line and ".debs/openssh-client " not in line + " "


def test_system_deps_as_another_user_says_in_one_line_what_to_install():
    """scripts/test and the quick start install their system packages as root; anyone else is told."""
    bin_dir = Path(tempfile.mkdtemp(prefix="swapctl-bare-"))  # nobody must reach it: not under tmp_path
    bin_dir.chmod(0o755)
    try:  # a machine with bash and python3, and no tool the suite needs
        for tool in ("bash", "python3", "tr", "id"):
            (bin_dir / tool).symlink_to(shutil.which(tool))
        # a copy nobody can read: a checkout in root's home (0700 on Debian) is out of its reach, which the
        # bare-Debian check (scripts/fresh-debian) found
        shutil.copy(ROOT / "scripts" / "system-deps", bin_dir / "system-deps")
        r = subprocess.run([shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups",
                            str(bin_dir / "bash"), str(bin_dir / "system-deps")],
                           capture_output=True, text=True, timeout=30, env={"PATH": str(bin_dir)}, cwd="/")
    finally:
        shutil.rmtree(bin_dir)
    assert r.returncode == 1 and r.stdout == "", r
    [line] = r.stderr.splitlines()
    assert "apt-get install" in line and "tmux" in line and "docker.io" in line and "g++" in line, line
