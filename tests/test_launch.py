"""The launch facts behind `swapctl init --from`: recorded output of the launch script, parsed."""

import pytest

from swapctl.facts.launch import parse_launch, propose_ready

# what the launch script printed for the stand-in prover started by hand with nohup (ANSI kept)
RECORDED = (
    "==> argv\n/data/cuzk-priodisp\n--config\n/data/my config.toml\n\n"
    "==> stdout\n/data/cuzk.log\n==> cwd\n/data\n==> ready\n"
    "\x1b[2m2026-11-30T10:05:15.730455Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2mcuzk_daemon\x1b[0m: "
    "cuzk-daemon ready, serving on 0.0.0.0:9820\n"
)


def test_the_launch_script_output_gives_argv_stdout_cwd_and_ready_lines():
    launch = parse_launch(RECORDED)
    assert launch.argv == ("/data/cuzk-priodisp", "--config", "/data/my config.toml")  # spaces kept
    assert (launch.stdout, launch.cwd) == ("/data/cuzk.log", "/data")
    assert launch.ready_lines == ("2026-11-30T10:05:15.730455Z  INFO cuzk_daemon: cuzk-daemon ready, "
                                  "serving on 0.0.0.0:9820",)


@pytest.mark.parametrize("stdout", ["/dev/null", "/dev/pts/3", "pipe:[12345]", "socket:[999]", ""])
def test_output_that_is_no_file_is_no_log(stdout):
    assert parse_launch(f"==> argv\n/x\n\n==> stdout\n{stdout}\n==> cwd\n/\n==> ready\n").stdout is None


@pytest.mark.parametrize("lines,proposed", [
    (parse_launch(RECORDED).ready_lines, "cuzk-daemon ready"),
    (("server listening on :80",), "server listening"),
    (("2026-01-01 INFO api: Ready (3 workers)",), "Ready"),
    (("app: queue (v1.2) ready",), r"queue \(v1\.2\) ready"),
    (("nothing to see", "done"), None),
    ((), None),
])
def test_the_ready_line_proposed_is_its_message_up_to_the_ready_word(lines, proposed):
    assert propose_ready(lines) == proposed
