"""A stand-in for nvidia-smi on the test hosts, which have no GPU: it replays real output recorded on an
H200 (tests/data/nvidia-smi/h200-1gpu/), with the times rewritten to now, as local time the way
nvidia-smi prints it (so TZ=UTC matters). The file $NVIDIA_SMI_STANDIN names tunes it: `delay=S`
(seconds between replayed lines, default 0.05), `dmon=hang` (dmon prints nothing, ever), `dmon=fail`
(dmon fails as NVML does after a driver upgrade) and
`term=ignore` (SIGTERM is ignored, as a process stuck in the driver would)."""

import os
import signal
import sys
import time
from pathlib import Path

DATA = Path(__file__).parent / "data" / "nvidia-smi" / "h200-1gpu"


def settings() -> dict[str, str]:
    try:
        text = Path(os.environ["NVIDIA_SMI_STANDIN"]).read_text()
    except (KeyError, OSError):
        text = ""
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


def replay(lines: list[str], header, rewrite, delay: float) -> None:
    """Prints `lines` again and again, one each `delay` s, as nvidia-smi's loop modes do until killed."""
    while True:
        for line in lines:
            print(line if header(line) else rewrite(line), flush=True)
            time.sleep(delay)


def dmon_row(line: str) -> str:
    """Its date and time columns become now: the first 22 characters, ' 20261201    07:15:32 '."""
    return time.strftime(" %Y%m%d    %H:%M:%S ") + line[22:]


def query_row(line: str) -> str:
    t = time.time()
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}" + line[23:]


def main(argv: list[str]) -> int:
    conf = settings()
    delay = float(conf.get("delay", "0.05"))
    if conf.get("term") == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if argv[:1] == ["dmon"]:
        if conf.get("dmon") == "hang":
            time.sleep(3600)
            return 0
        if conf.get("dmon") == "fail":  # what nvidia-smi says after a driver upgrade, before a reboot
            print("Failed to initialize NVML: Driver/library version mismatch", flush=True)
            return 18
        lines = (DATA / "dmon-u-t-during-run.txt").read_text().splitlines()
        replay(lines, lambda line: line.startswith("#"), dmon_row, delay)
    query = next((a for a in argv if a.startswith("--query-gpu=")), None)
    if query and any(a.startswith("-lms") or a.startswith("-l") for a in argv):
        lines = (DATA / "query-gpu-500ms-during-run.csv").read_text().splitlines()
        print(lines[0], flush=True)
        replay(lines[1:], lambda line: False, query_row, delay)
    if query:  # the status script's one-off query
        sys.stdout.write((DATA / "query-gpu.csv").read_text())
        return 0
    if any(a.startswith("--query-compute-apps=") for a in argv):
        sys.stdout.write((DATA / "compute-apps.csv").read_text())
        return 0
    sys.stdout.write((DATA / "nvidia-smi.txt").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
