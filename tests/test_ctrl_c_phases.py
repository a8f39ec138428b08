"""Ctrl-C at the seams between phases, on a real sshd host with real prover processes: the moment is chosen
(tests/lab.py's CTRL_C_AT), the signal is real and goes through swapctl's one handler."""

from __future__ import annotations

import hashlib

import pytest

from lab import build_prover, prover_config, swapctl_ctrl_c_at

STEADY = dict(memory_mib=8, jobs=-1, partitions=4, partition_mib=1, synth_ms=5, gpu_ms=20)


@pytest.fixture(scope="module")
def builds(lab_dir):  # as tests/test_experiment.py builds them: the same files, built once for both
    return {kind: build_prover(lab_dir / "bin" / f"prover-x-{kind}", TIMING="1", PINNED=pinned, TAG=f"x-{kind}")
            for kind, pinned in (("pageable", "0"), ("pinned", "1"))}


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_a_ctrl_c_as_bs_swap_returns_rolls_b_back_and_never_says_nothing_changed(box, builds, swapctl_env):
    """Between B's swap and its window the experiment's own handler was gone and the default one raised: the
    experiment ended 'interrupted before any change' (exit 3) with B running. The press lands as the window is
    set up (experiment.run's Span, made once B's deploy has returned)."""
    box.start_by_hand(builds["pageable"], config=prover_config(**STEADY))
    r = swapctl_ctrl_c_at("swapctl.experiment.run:Span", 1, "experiment", "lab", "-p", str(box.playbook_path),
                          "--dest", str(box.workdir / "logs"), "--yes", "--binary", str(builds["pinned"]),
                          "--for", "60s", "--baseline", "3s", "--min-proofs", "2", "--then", "keep", timeout=180)
    assert "before any change" not in r.stderr, r.stderr
    assert "interrupted during the swap: rolling back to the build before B" in r.stderr, r.stderr
    assert "rolled back; the baseline" in r.stderr and r.returncode == 3, r.stderr
    assert _sha(f"/proc/{box.one_daemon()}/exe") == _sha(builds["pageable"])  # the build before B
