"""Reading and creating the cluster secret file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vpq.common.cluster_secret import ClusterSecretError, create_cluster_secret, load_cluster_secret


def test_created_once_random_hex_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "run" / "cluster.secret"
    assert create_cluster_secret(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = load_cluster_secret(path)
    assert secret is not None and len(secret) == 64 and int(secret, 16) >= 0
    assert not create_cluster_secret(path)  # an existing file is kept
    assert load_cluster_secret(path) == secret
    other = tmp_path / "other.secret"
    create_cluster_secret(other)
    assert load_cluster_secret(other) != secret


def test_none_means_no_secret() -> None:
    assert load_cluster_secret(None) is None


def test_surrounding_whitespace_is_not_part_of_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_text("  abc-123\n")
    path.chmod(0o640)
    assert load_cluster_secret(path) == "abc-123"


@pytest.mark.parametrize(
    ("text", "mode", "reason"),
    [
        ("", 0o600, "is empty"),
        (" \n", 0o600, "is empty"),
        ("abc", 0o644, "readable by every user"),
        ("a b", 0o600, "printable ASCII"),
    ],
)
def test_refused(tmp_path: Path, text: str, mode: int, reason: str) -> None:
    path = tmp_path / "s"
    path.write_text(text)
    path.chmod(mode)
    with pytest.raises(ClusterSecretError, match=reason) as info:
        load_cluster_secret(path)
    assert str(path) in str(info.value)
    if text.strip():
        assert text.strip() not in str(info.value).replace(str(path), "")


def test_missing_or_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterSecretError, match="cannot read"):
        load_cluster_secret(tmp_path / "absent")
    with pytest.raises(ClusterSecretError):
        load_cluster_secret(tmp_path)
    assert os.path.isdir(tmp_path)
