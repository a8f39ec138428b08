"""Building the daemon in Docker and taking its binary out, through the Docker SDK (no `docker` CLI).

The image is described by the playbook's [build] table; the binary comes out of a created (never
started) container with get_archive, lands at a temporary name, and is renamed into place only when
it is whole. A manifest beside it records the image id, the build args and the sha256.
"""

from __future__ import annotations

import json
import os
import tarfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInput, Refused, SwapctlError
from ..playbook import Playbook
from ..swap import elf

if TYPE_CHECKING:
    from docker import DockerClient

DEFAULT_DOCKERFILE = "Dockerfile.cuzk-rebuild"
# linux/<docker arch> -> what `uname -m` prints (elf.MACHINES' values)
PLATFORMS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64", "linux/386": "i686", "linux/ppc64le": "ppc64le",
             "linux/riscv64": "riscv64", "linux/s390x": "s390x"}


class BuildFailed(SwapctlError):
    """The image did not build: names the step, with its last lines as detail."""


@dataclass(frozen=True)
class BuildSpec:
    dockerfile: str  # absolute
    context: str  # absolute
    binary_in_image: str = "/cuzk"
    args: tuple[tuple[str, str], ...] = ()
    platform: str = "linux/amd64"


@dataclass(frozen=True)
class Built:
    path: str
    sha256: str
    image_id: str
    args: dict[str, Any]
    platform: str
    dockerfile: str
    seconds: float

    def record(self) -> dict[str, Any]:
        """What a release's manifest keeps of its build."""
        return {"image": self.image_id, "args": self.args, "platform": self.platform,
                "dockerfile": os.path.basename(self.dockerfile)}


def spec_from(book: Playbook, build_args: dict[str, str]) -> BuildSpec:
    """The playbook's [build] table, paths resolved against the directory the playbook is named in (a link's,
    not its target's), `build_args` on top."""
    table = dict(book.build)
    # the directory the playbook is named in, not a link's target's: ./swapctl.toml links into .sandbox/
    base = Path(os.path.abspath(book.path)).parent
    context = (base / table.get("context", ".")).resolve()
    dockerfile = (base / table.get("dockerfile", DEFAULT_DOCKERFILE)).resolve()
    if not dockerfile.is_file():
        raise BadInput(f"{book.path}: build.dockerfile: {dockerfile} does not exist (set it under [build])")
    platform = table.get("platform", "linux/amd64")
    if platform not in PLATFORMS:
        raise BadInput(f"{book.path}: build.platform: {platform!r} is not one of {', '.join(PLATFORMS)}")
    binary = table.get("binary_in_image", "/cuzk")
    if not binary.startswith("/"):
        raise BadInput(f"{book.path}: build.binary_in_image: must be an absolute path in the image, not {binary!r}")
    args = {**table.get("args", {}), **build_args}
    return BuildSpec(str(dockerfile), str(context), binary, tuple(args.items()), platform)


def engine() -> DockerClient:
    """A client for the engine DOCKER_HOST (and the other Docker variables) point at."""
    import docker  # here, not at the top: it costs every swapctl command 0.4 s to import
    import docker.errors

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env()
        client.ping()
        return client
    except docker.errors.DockerException as exc:
        reason = _reason(exc)
        raise Refused(f"no Docker engine answers at {where} ({reason}); start one (`dockerd &` as root, or "
                      f"`systemctl start docker`), or point DOCKER_HOST at one") from None


def _reason(exc: BaseException) -> str:
    """Why the engine did not answer, as the system says it ("Connection refused"): the innermost OSError
    in the chain the Docker SDK wraps (its text is a repr of urllib3's tuples), else the first line."""
    found, seen, todo = "", set[int](), [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen or len(seen) > 32:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            found = e.strerror
        reason = getattr(e, "reason", None)
        todo += [x for x in (*e.args, e.__cause__, e.__context__, reason) if isinstance(x, BaseException)]
    return found or str(exc).splitlines()[0][:160]


def build(spec: BuildSpec, output: str, on_line: Callable[[str], None]) -> Built:
    """Builds the image, takes the binary out to `output`, checks its platform, writes the manifest."""
    started = time.monotonic()
    client = engine()
    image_id = _build_image(client, spec, on_line)
    _extract(client, image_id, spec.binary_in_image, output)
    binary = elf.inspect(output)
    want = PLATFORMS[spec.platform]
    if binary.arch != want:
        os.unlink(output)
        raise BadInput(f"the image built a {binary.arch} binary, but build.platform is {spec.platform} ({want}); "
                       f"fix the Dockerfile's toolchain or the platform")
    built = Built(output, binary.sha256, image_id, dict(spec.args), spec.platform, spec.dockerfile,
                  round(time.monotonic() - started, 3))
    manifest = f"{output}.build.json"
    with open(f"{manifest}.tmp", "w") as f:
        json.dump(asdict(built), f, indent=2, sort_keys=True)
    os.replace(f"{manifest}.tmp", manifest)
    return built


def _build_image(client: DockerClient, spec: BuildSpec, on_line: Callable[[str], None]) -> str:
    import docker.errors

    step, image_id = "", ""
    tail: deque[str] = deque(maxlen=20)
    try:
        stream = client.api.build(path=spec.context, dockerfile=os.path.relpath(spec.dockerfile, spec.context),
                                  buildargs=dict(spec.args), platform=spec.platform, rm=True, forcerm=True,
                                  decode=True)
        for chunk in stream:
            for line in chunk.get("stream", "").splitlines():
                if line.startswith("Step "):
                    step = line
                if line.strip():
                    tail.append(line)
                    on_line(line)
            if "ID" in chunk.get("aux", {}):
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                raise BuildFailed(f"the build failed at {step or 'its start'}: {chunk['error'].strip()}",
                                  detail="\n".join(tail))
    except docker.errors.APIError as exc:
        raise BuildFailed(f"the engine refused the build: {exc.explanation or exc}", detail="\n".join(tail)) from None
    if not image_id:
        raise BuildFailed(f"the build of {spec.dockerfile} ended without an image", detail="\n".join(tail))
    return image_id


def _extract(client: DockerClient, image_id: str, path: str, output: str) -> None:
    """`docker cp` without the CLI: the file at `path` in the image, to `output`, whole or not at all."""
    import docker.errors

    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tar_tmp, bin_tmp = out.with_name(f".{out.name}.tar.tmp"), out.with_name(f".{out.name}.tmp")
    container = client.containers.create(image_id, command=[path])  # created, never started
    try:
        try:
            chunks, _ = container.get_archive(path)
        except docker.errors.NotFound:
            raise BadInput(f"the image has no {path}; set build.binary_in_image to where the Dockerfile puts "
                           f"the binary") from None
        with open(tar_tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        with tarfile.open(tar_tmp) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise BadInput(f"{path} in the image is not a regular file (a link or a directory?); name the "
                               f"binary itself in build.binary_in_image")
            src = tar.extractfile(member)
            assert src is not None
            with open(bin_tmp, "wb") as f:
                while data := src.read(1 << 20):
                    f.write(data)
        os.chmod(bin_tmp, 0o755)
        os.replace(bin_tmp, output)
    finally:
        container.remove(force=True)
        tar_tmp.unlink(missing_ok=True)
        bin_tmp.unlink(missing_ok=True)
