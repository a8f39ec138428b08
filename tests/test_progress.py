"""The fleet's live view, rendered as a terminal would show it."""

from rich.console import Console

from swapctl.cli.progress import FleetView
from swapctl.swap.deploy import Event


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
