"""The fleet's live view, rendered as a terminal would show it."""

import io
import time

from rich.console import Console

from swapctl.cli.progress import FleetView
from swapctl.swap.deploy import Event

from lab import wait_until


def render(view: FleetView) -> str:
    console = Console(record=True, width=120)
    console.print(view)
    return console.export_text()


def test_live_view_shows_each_hosts_step_upload_and_latest_log_line():
    console = Console(record=True, width=120)
    view = FleetView(["gpu-0", "gpu-1", "gpu-2"], console)
    view.update("gpu-0", Event("upload", done=30_000_000, total=75_000_000, wire=9_000_000))
    view.update("gpu-1", Event("memory", "MemAvailable 12.3 GiB"))
    view.update("gpu-2", Event("ready", log_line="\x1b[32mINFO\x1b[0m cuzk: engine ready"))
    lines = {line.split()[0]: line for line in render(view).splitlines() if line.startswith("gpu-")}
    assert "upload" in lines["gpu-0"] and "30.0/75.0 MB, 9.0 MB sent" in lines["gpu-0"]
    assert "memory" in lines["gpu-1"] and "MemAvailable 12.3 GiB" in lines["gpu-1"]
    assert "INFO cuzk: engine ready" in lines["gpu-2"] and "\x1b" not in lines["gpu-2"]


def test_a_finished_host_shows_its_outcome_and_a_rollback_stays_above_the_view():
    console = Console(record=True, width=120)
    view = FleetView(["gpu-0", "gpu-1"], console)
    view.update("gpu-0", Event("rollback", "abc failed: exited 101; rolling back"))
    view.finish("gpu-0", "failed (4)")
    view.finish("gpu-1", "deployed")
    printed = console.export_text()
    assert "gpu-0 rollback: abc failed: exited 101; rolling back" in printed
    lines = {line.split()[0]: line for line in render(view).splitlines() if line.startswith("gpu-")}
    assert lines["gpu-0"].split()[1:3] == ["failed", "(4)"] and lines["gpu-1"].split()[1] == "deployed"
    assert "waiting" not in render(view)


def test_a_large_fleet_shows_no_more_rows_than_the_terminal_has_lines_at_work_first():
    # issue 34: at 128 hosts, 128 rows drawn four times a second cost more CPU than the rollout's SSH work
    view = FleetView([f"gpu-{i}" for i in range(128)], Console())
    for i in range(100, 116):  # the 16 at work come after hosts done and waiting in the fleet's order
        view.update(f"gpu-{i}", Event("memory", "MemAvailable 12.3 GiB"))
    for i in range(30):
        view.finish(f"gpu-{i}", "failed (4)" if i == 7 else "deployed")
    console = Console(record=True, width=120, height=24)
    console.print(view)
    lines = console.export_text().splitlines()
    assert len(lines) <= 24
    shown = [line.split()[0] for line in lines if line.startswith("gpu-")]
    assert shown[:2] == ["gpu-0", "gpu-1"] and "gpu-7" in shown  # in the fleet's order, the failure kept
    assert {f"gpu-{i}" for i in range(100, 116)} <= set(shown)
    assert lines[-1] == f"and {128 - len(shown)} more: {30 - (len(shown) - 16)} done, 82 waiting"


def test_the_live_view_is_drawn_again_only_when_a_host_changed(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")  # a terminal rich draws on, whatever TERM the suite runs under
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, height=40)
    with FleetView(["gpu-0", "gpu-1"], console) as view:
        drawn = len(out.getvalue())
        time.sleep(4 * FleetView.REFRESH_S)
        assert len(out.getvalue()) == drawn  # nothing changed: nothing drawn
        view.update("gpu-1", Event("stop", "kill -TERM 4242"))
        wait_until(lambda: "kill -TERM 4242" in out.getvalue(), what="the change drawn", timeout=5)
