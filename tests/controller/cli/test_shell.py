"""`tectl --version` and `tectl completion`, run as a user runs them: a new process, and the
completion script sourced by a real bash that then completes command lines."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
TECTL = [sys.executable, "-m", "controller.cli.main"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TECTL, *argv], capture_output=True, text=True, env=ENV, timeout=60)


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0
    assert re.fullmatch(r"tectl \(fabric-te\) (\d+\.\d+\.\d+\S*|unknown)\n", done.stdout)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("tectl rou", ["routes"]),
        ("tectl routes ", ["apply", "diff", "release", "rollback", "show", "verify"]),
        ("tectl routes diff --j", ["--json"]),
        ("tectl solve --fabric meta", ["meta-24k", "meta-24k-1125"]),
        ("tectl topology export --format slurm-", ["slurm-block-conf", "slurm-conf", "slurm-yaml"]),
        ("tectl lab link --", None),  # plug-in commands are there too
        ("tectl completion ", ["bash", "zsh"]),
    ],
)
def test_bash_completes_commands_options_and_choices(
    tmp_path: Path, line: str, expected: list[str] | None
) -> None:
    done = _run("completion", "bash")
    assert done.returncode == 0 and "complete -o default -F _tectl tectl" in done.stdout
    script = tmp_path / "tectl.bash"
    script.write_text(done.stdout)
    probe = (
        f'source {script}; read -ra COMP_WORDS <<< "$1"; [[ "$1" == *" " ]] && COMP_WORDS+=("");'
        ' COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _tectl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run(["bash", "-c", probe, "_", line], capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert out.returncode == 0, out.stderr
    words = sorted(out.stdout.split())
    if expected is None:
        assert "--name" in words and "--rate" in words
    else:
        assert words == sorted(expected)


def test_completion_needs_a_known_shell() -> None:
    done = _run("completion", "fish")
    assert done.returncode == 2 and "invalid choice: 'fish'" in done.stderr


def test_operators_doc_matches_the_tls_flags() -> None:
    """docs/operators.md describes the TLS flags tectl has, not flags still to come."""
    import argparse

    from controller.cli.main import build_parser

    doc = (ROOT / "docs" / "operators.md").read_text()
    assert "are available" not in doc and "until the `--tls-*` flags" not in doc
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("serve", "status"):
        flags = {o for a in sub.choices[command]._actions for o in a.option_strings}
        for flag in re.findall(r"`(--tls-[a-z-]+)`", doc):
            if command == "serve" and flag in ("--tls-ca", "--tls-server-name"):
                continue  # client flags
            if command == "status" and flag == "--tls-client-ca":
                continue  # a server flag
            assert flag in flags, (command, flag)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_an_error_not_a_traceback() -> None:
    """stdout on a full device: one line naming why, exit 1; into a closed pipe (`| head`):
    exit 1, nothing on stderr."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([*TECTL, "fabric", "show", "tiny"], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=ENV, timeout=60)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr == "tectl: error: cannot write the output: No space left on device\n"
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed:
        done = subprocess.run([*TECTL, "fabric", "show", "pod"], stdout=closed,
                              stderr=subprocess.PIPE, text=True, env=ENV, timeout=60)  # fmt: skip
    assert done.returncode == 1 and done.stderr == ""
