"""The cluster secret file: read it (``load_cluster_secret``) and create one
(``create_cluster_secret``).

The secret is what every node-to-node call carries (``node_rpc.cluster_auth``). A
process reads it once at its entry point and passes the value down; it is never logged
and never appears in an error message.

The file holds the secret as text; surrounding whitespace (a trailing newline) is not
part of it. ``load_cluster_secret`` refuses, with ``ClusterSecretError`` naming the file:
a file that cannot be read, an empty one, one that other users may read (mode bits
``o+r``: put it at 0600 or 0640), and a secret with characters outside printable ASCII
(it travels in an HTTP header).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

SECRET_BYTES = 32
"""Random bytes of a created secret (written as 64 hex digits)."""


class ClusterSecretError(ValueError):
    """The cluster secret file cannot be used; the message names the file and why."""


def load_cluster_secret(path: Path | None) -> str | None:
    """The secret held in ``path`` (None when ``path`` is None: no secret configured)."""
    if path is None:
        return None
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterSecretError(f"cannot read the cluster secret file {path}: {exc}") from None
    if not stat.S_ISREG(mode):
        raise ClusterSecretError(f"the cluster secret file {path} is not a regular file")
    if mode & stat.S_IROTH:
        raise ClusterSecretError(
            f"the cluster secret file {path} is readable by every user (mode {stat.S_IMODE(mode):04o}); "
            f"run chmod 600 {path}"
        )
    secret = text.strip()
    if not secret:
        raise ClusterSecretError(f"the cluster secret file {path} is empty")
    if not all(" " < ch < "\x7f" for ch in secret):
        raise ClusterSecretError(
            f"the cluster secret in {path} must be printable ASCII without spaces (it travels in an HTTP header)"
        )
    return secret


def create_cluster_secret(path: Path) -> bool:
    """Write a new random secret to ``path`` (mode 0600) unless the file exists; True
    when it was created. Creation is exclusive: two concurrent callers never both write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, (secrets.token_hex(SECRET_BYTES) + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True
