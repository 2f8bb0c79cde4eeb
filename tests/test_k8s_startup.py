"""Starting the exporter with attribution: a missing extra or a bad flag combination stops it with a message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness import MIG_FIXTURE, REPO, exporter_argv, fake_smi_command, run_exporter_to_exit
from nvidia_gpu_exporter.support.extras import install_hint


def test_missing_grpc_names_the_extra(tmp_path: Path) -> None:
    # A grpc package that cannot be imported stands in for an install without the `kubernetes` extra.
    shim = tmp_path / "shim" / "grpc"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'grpc' (hidden by the test)\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")])}
    argv = exporter_argv("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), "--kubernetes.pod-resources")
    completed = subprocess.run(argv, capture_output=True, timeout=60, cwd=REPO, env=env, check=False)
    log = completed.stderr.decode("utf-8", "replace")
    assert completed.returncode == 1, log
    assert "failed to run" in log
    assert "needs the 'kubernetes' extra" in log
    assert install_hint("kubernetes") in log
    assert "Listening on" not in log


def test_process_pods_without_compute_apps_is_refused() -> None:
    code, log = run_exporter_to_exit(["--collect.backend=demo", "--kubernetes.process-pods"])
    assert code == 1
    assert "--kubernetes.process-pods requires --collect.compute-apps" in log


def test_pod_labels_without_pod_resources_is_refused() -> None:
    code, log = run_exporter_to_exit(["--collect.backend=demo", "--kubernetes.pod-labels"])
    assert code == 1
    assert "--kubernetes.pod-labels requires --kubernetes.pod-resources" in log
