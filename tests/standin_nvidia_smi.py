"""A stand-in for nvidia-smi on the test hosts, which have no GPU: it replays real output recorded on an
H200 (tests/data/nvidia-smi/h200-1gpu/), with the times rewritten to now, as local time the way
nvidia-smi prints it (so TZ=UTC matters). The file $NVIDIA_SMI_STANDIN names tunes it: `delay=S`
(seconds between replayed lines, default 0.05), `dmon=hang` (dmon prints nothing, ever), `dmon=fail`
(dmon fails as NVML does after a driver upgrade),
`gpm=none` (dmon rejects --gpm-metrics, as it does on a GPU older than Hopper or an older driver; the
message is the stand-in's own) and `term=ignore` (SIGTERM is ignored, as a process stuck in the driver
would). `dmon --gpm-metrics` replays the H200's `dmon -s ut --gpm-metrics 2,3,20,21` capture (the sampler's
own, from tests/data/h200-gpm/run1/default/); `-c N` stops after N rows, as dmon does."""

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


def replay(lines: list[str], header, rewrite, delay: float, fresh=lambda line: False) -> None:
    """Prints `lines` again and again, one each `delay` s, as nvidia-smi's loop modes do until killed: as one
    process, whose header and `fresh` rows (dmon's GPM columns read `-` until a second has passed) come only
    at its start. A capture holds two dmon runs; replayed whole, every loop restarted the GPM columns, and
    a window of a few seconds could hold nothing but restarts (its SM activity None)."""
    first = True
    while True:
        for line in lines:
            if first or not (header(line) or fresh(line)):
                print(line if header(line) else rewrite(line), flush=True)
                time.sleep(delay)
            first = first and (header(line) or fresh(line))


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
        if "--gpm-metrics" in argv:
            if conf.get("gpm") == "none":
                print("GPM metrics are not supported on this device or driver", flush=True)
                return 3
            lines = (DATA / "dmon-s-ut-gpm-metrics-2-3-20-21-during-run.txt").read_text().splitlines()
        else:
            lines = (DATA / "dmon-u-t-during-run.txt").read_text().splitlines()
        if "-c" in argv:  # a count: the header and that many rows
            count = int(argv[argv.index("-c") + 1])
            rows = [line for line in lines if not line.startswith("#")][:count]
            print("\n".join(lines[:2] + [dmon_row(r) for r in rows]), flush=True)
            return 0
        replay(lines, lambda line: line.startswith("#"), dmon_row, delay, lambda line: line.rstrip().endswith(" -"))
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
