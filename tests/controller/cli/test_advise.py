"""`tectl advise` offline: what its text says beyond the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli.main import main


def test_advice_that_stalls_the_job_everywhere_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # tiny: 2 pods x 2 racks x 2 hosts x 2 GPUs; pod 1 is busy and pod 0's CTSWs drained,
    # so the racks of pod 0 reach each other no more
    busy = [f"host-p1-r{r}-h{h}" for r in range(2) for h in range(2)]
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"jobs": [{"id": "ring", "hosts": busy, "dp": 4, "tp": 2}]}))
    drained = [arg for c in range(4) for arg in ("--fail", f"ctsw-p0-c{c}=drain")]
    assert main(["advise", "--fabric", "tiny", "--jobs", str(jobs), "--gpus", "6",
                 *drained]) == 0  # fmt: skip
    assert "every candidate stalls the job (busbw 0)" in capsys.readouterr().out
    assert main(["advise", "--fabric", "tiny", "--jobs", str(jobs), "--gpus", "6"]) == 0
    assert "stalls" not in capsys.readouterr().out
