"""`ApiKeys`: the keys a request may carry (`Authorization: Bearer KEY`), from flags and a file one may rotate.

A key is compared with every configured one by `hmac.compare_digest`, each
comparison made whatever the others gave, so that the time an answer takes says
nothing of how much of a key was right. The file (one key a line; blank lines
and lines starting with `#` skipped) is read again when its modification time,
size or inode changed (a rename into place, as Kubernetes swaps a mounted
secret, too), looked at most once every `recheck` seconds: a key rotates without
a restart, at a bounded cost per request. A file that turns unreadable or
malformed keeps the keys read before (a note on stderr); one emptied of keys
leaves only the flags' (none: no request passes). No key is ever written
anywhere: messages name the file and line, never the text of a key.
"""

import hmac
import logging
import os
import threading
import time

from gtr_keras.errors import UserError

logger = logging.getLogger(__name__)

BEARER = "bearer "


def key_problem(key):
    """Why `key` cannot be a key (it must be printable ASCII without white space, as a header carries it),
    or None; the message never quotes the key.

    Example:
    >>> key_problem("sk-a b")
    'a key must be printable ASCII without spaces (the key is not shown)'
    """
    if key and all("!" <= character <= "~" for character in key):
        return None
    return "a key must be printable ASCII without spaces (the key is not shown)"


def _stamp(path):
    status = os.stat(path)
    return status.st_mtime_ns, status.st_size, status.st_ino


def read_keys_file(path):
    """The keys of `path`, one a line (blank lines and `#` comments skipped).

    Raises:
        UserError: the file cannot be read, or a line is not a key (naming the file and line, not the key).
    """
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as error:
        raise UserError(f"--api-keys-file {path}: cannot read it ({error.strerror or error})") from None
    keys = []
    for number, line in enumerate(lines, 1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        problem = key_problem(key)
        if problem:
            raise UserError(f"--api-keys-file {path}:{number}: {problem}")
        keys.append(key)
    return keys


class ApiKeys:
    """The API keys of a server: those given (`--api-key`) and those of a file (`--api-keys-file`).

    Args:
        keys: keys given as they are.
        path: a local file of keys, one a line, read again when it changes; or None.
        recheck: the least seconds between two looks at the file's status.

    Raises:
        UserError: a key that is not printable ASCII, a file that cannot be read, a line that is not a key,
            or no key at all.

    Example:
    >>> keys = ApiKeys(["sk-local-1"])
    >>> keys.allows("Bearer sk-local-1"), keys.allows("Bearer sk-other"), keys.allows(None)
    (True, False, False)
    """

    def __init__(self, keys=(), path=None, recheck=1.0):
        for key in keys:
            problem = key_problem(key)
            if problem:
                raise UserError(f"--api-key: {problem}")
        if path is not None and "://" in str(path):
            raise UserError(f"--api-keys-file {path}: must be a local file (a mounted secret, say)")
        self.path = None if path is None else os.fspath(path)
        self.recheck = recheck
        self._given = [key.encode("ascii") for key in keys]
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._stamp = None
        self._read = []
        if self.path is not None:
            self._stamp = self._stat()
            self._read = [key.encode("ascii") for key in read_keys_file(self.path)]
        if not self._given and not self._read:
            raise UserError(f"--api-keys-file {self.path}: holds no key")

    def _stat(self):
        try:
            return _stamp(self.path)
        except OSError as error:
            raise UserError(f"--api-keys-file {self.path}: cannot read it ({error.strerror or error})") from None

    def _refresh(self):
        """Reads the file again if its status changed since the last look (at most one look every `recheck`
        s); a file that cannot be read, or is malformed, keeps the keys read before, said once a change."""
        now = time.monotonic()
        if self.path is None or now - self._checked < self.recheck or not self._lock.acquire(blocking=False):
            return
        try:
            self._checked = now
            try:
                stamp = self._stat()
            except UserError as error:
                stamp, problem = None, error
            if stamp == self._stamp:
                return
            self._stamp = stamp
            if stamp is not None:
                try:
                    self._read, problem = [key.encode("ascii") for key in read_keys_file(self.path)], None
                except UserError as error:
                    problem = error
            if problem is not None:
                logger.warning("gtr-keras serve: note: the keys read before stay in effect: %s", problem)
        finally:
            self._lock.release()

    def allows(self, authorization):
        """True when `authorization` (an `Authorization` header's value, or None) is `Bearer KEY` with a
        configured key; every configured key is compared, in constant time."""
        self._refresh()
        if authorization is None or authorization[: len(BEARER)].lower() != BEARER:
            return False
        given = authorization[len(BEARER) :].strip().encode("latin-1", "replace")
        found = False
        for key in (*self._given, *self._read):
            found |= hmac.compare_digest(given, key)
        return found
