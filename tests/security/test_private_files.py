"""metrics.server.check_private_file: a token or key file others could read or change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from computewatch.metrics.server import ServerError, ServerSecurity, check_private_file, read_token


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_private_modes_pass(tmp_path: Path, mode: int) -> None:
    f = tmp_path / "token"
    f.write_text("t0k\n")
    f.chmod(mode)
    check_private_file(f, "token file")
    assert read_token(f) == "t0k"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o610, 0o666])
def test_shared_modes_are_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    f = tmp_path / "token"
    f.write_text("t0k\n")
    f.chmod(mode)
    with pytest.raises(ServerError, match=f"mode 0{mode:o}.*chmod 600 {f}"):
        read_token(f)
    with pytest.raises(ServerError, match="chmod 600"):
        ServerSecurity.from_files(None, str(f), str(f))  # the key is checked, the cert not


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("t0k\n")
    f.chmod(0o600)
    other = os.geteuid() + 1  # chown to another uid needs root, as tests run here and in CI
    os.chown(f, other, -1)
    with pytest.raises(ServerError, match=f"another user \\(uid {other}\\)"):
        read_token(f)


def test_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="cannot read the token file"):
        read_token(tmp_path / "nope")
