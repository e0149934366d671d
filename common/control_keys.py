"""Control-plane keys: one CURVE key pair per role, and the scheduler's role-binding ZAP
handler. Torch-free.

Layout of the keys directory (mode 0700, created by :func:`ensure_curve_keys`)::

    server.key / server.key_secret          the scheduler
    <role>.key / <role>.key_secret          role in gateway, draft, verifier, admin
    authorized/<role>.key                   public keys the scheduler accepts ...
    authorized/<role>-<label>.key           ... (more keys of a role: add files like this)

A deployment gives each service only what it needs (:func:`bundle_files`,
:func:`write_bundle`; compose and Kubernetes mount one bundle per service): the scheduler
its own pair and the public keys under ``authorized/``; a gateway, draft or verifier its
own pair and the scheduler's public key. A service whose directory already holds its
bundle never writes to it (secrets are mounted read-only).

The scheduler accepts only keys under ``authorized/`` (ZeroMQ ZAP, CURVE mechanism) and
stamps every message with the role its key was filed under (the ZAP ``User-Id``); the
scheduler then checks that role against the message (``services/scheduler/access.py``).
Plaintext is used only with ``insecure_control_plane = true``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

ROLES = ("gateway", "draft", "verifier", "admin")
SERVER_CERT, AUTHORIZED = "server", "authorized"
SECRET_MODE = 0o600  # secret keys: owner read/write only
DIR_MODE = 0o700
AUTO_DIRS = ("", "auto")  # curve_dir values meaning the default location


def default_keys_dir() -> Path:
    """``$XDG_CONFIG_HOME/treespec/control-plane`` (``~/.config/...`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "treespec" / "control-plane"


def keys_dir(cfg) -> str:
    """The keys directory of ``cfg`` ('' = plaintext, only with insecure_control_plane)."""
    if cfg.insecure_control_plane:
        return ""
    return str(default_keys_dir() if cfg.curve_dir in AUTO_DIRS else Path(cfg.curve_dir))


def _complete(root: Path) -> bool:
    names = [SERVER_CERT, *ROLES]
    return all((root / f"{n}.key_secret").exists() for n in names) and \
        all((root / AUTHORIZED / f"{r}.key").exists() for r in ROLES)


def _generate(root: Path) -> None:
    """Create the missing key pairs in ``root`` and authorize each role's public key."""
    (root / AUTHORIZED).mkdir(parents=True, exist_ok=True)
    root.chmod(DIR_MODE)
    for name in (SERVER_CERT, *ROLES):
        secret = root / f"{name}.key_secret"
        if not secret.exists():
            zmq.auth.create_certificates(str(root), name)
            secret.chmod(SECRET_MODE)  # pyzmq writes it with the umask (often world-readable)
        if name != SERVER_CERT and not (root / AUTHORIZED / f"{name}.key").exists():
            shutil.copy(root / f"{name}.key", root / AUTHORIZED / f"{name}.key")


def ensure_curve_keys(curve_dir: str) -> Path:
    """Create the server key pair and one key pair per role (authorized) if missing.

    A new directory is built aside and renamed into place, so that services starting at
    the same time agree on one set of keys. Returns the directory; raises OSError when it
    cannot be written."""
    root = Path(curve_dir)
    if _complete(root):
        return root
    if not root.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".keys-", dir=root.parent))
        _generate(tmp)
        try:
            tmp.rename(root)
        except OSError:  # another process won the race: use its keys
            shutil.rmtree(tmp, ignore_errors=True)
    if not _complete(root):
        _generate(root)  # an older layout (one shared client key): add the role keys
    root.chmod(DIR_MODE)
    return root


def bundle_files(service: str) -> list[str]:
    """Key files (paths relative to the keys directory) ``service`` needs: ``scheduler`` its
    own pair and every role's public key under ``authorized/``; a client (a role: gateway,
    draft, verifier, admin) its own pair and the scheduler's public key."""
    if service == "scheduler":
        return [f"{SERVER_CERT}.key", f"{SERVER_CERT}.key_secret", *(f"{AUTHORIZED}/{r}.key" for r in ROLES)]
    return [f"{SERVER_CERT}.key", f"{service}.key", f"{service}.key_secret"]


def write_bundle(curve_dir: str, service: str, dest: str) -> Path:
    """Copy ``service``'s :func:`bundle_files` (for the scheduler also any extra
    ``authorized/<role>-<label>.key``) from a complete ``curve_dir`` into ``dest`` (0700,
    secret files 0600). Raises FileNotFoundError for a missing source file."""
    src, out = Path(curve_dir), Path(dest)
    names = bundle_files(service)
    if service == "scheduler":
        names += [f"{AUTHORIZED}/{p.name}" for p in sorted((src / AUTHORIZED).glob("*-*.key"))]
    for name in names:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        shutil.copyfile(src / name, target)
        target.chmod(SECRET_MODE)
    for d in (out, out / AUTHORIZED):
        if d.is_dir():
            d.chmod(DIR_MODE)
    return out


def usable_keys(curve_dir: str, service: str) -> Path:
    """``curve_dir`` when it holds ``service``'s bundle (read-only is fine); otherwise the
    missing keys are created (services started by hand share one directory). Raises OSError
    naming the missing files when they cannot be created (a read-only mount)."""
    root = Path(curve_dir)
    missing = [n for n in bundle_files(service) if not (root / n).exists()]
    if not missing:
        return root
    try:
        return ensure_curve_keys(curve_dir)
    except OSError as exc:
        raise OSError(f"control-plane keys in {root}: {service} needs {', '.join(missing)} "
                      f"and they cannot be created there ({exc})") from None


def role_keys(curve_dir: str) -> dict[str, str]:
    """z85 public key -> role, from ``authorized/<role>[-label].key``; other files are ignored."""
    out = {}
    for path in sorted((Path(curve_dir) / AUTHORIZED).glob("*.key")):
        role = path.stem.split("-", 1)[0]
        if role in ROLES:
            pub, _ = zmq.auth.load_certificate(str(path))
            out[pub.decode()] = role
    return out


class RoleAuthenticator(ThreadAuthenticator):
    """ZAP handler: accepts the keys under ``authorized/`` and reports each one's role as
    the connection's User-Id (read per message with ``Frame.get("User-Id")``)."""

    def __init__(self, ctx: zmq.Context, curve_dir: str) -> None:
        super().__init__(ctx)
        self.roles = role_keys(curve_dir)

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.roles.get(z85.encode(client_public_key).decode(), "")
