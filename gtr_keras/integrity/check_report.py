"""`CheckReport`: what `gtr-keras check` found in one directory: its problems, in the order found, and facts."""

import fnmatch
import os

from gtr_keras.errors import UserError
from gtr_keras.utils import files
from gtr_keras.utils.checksums import leftover_reason, verify_checksums

_REMEDY = "write it again"


class CheckReport:
    """The problems and facts that the checks of one directory collect.

    Each check runs through `step`, which records what it raises as a problem
    (a `UserError` as it is, any other exception as the file it was reading,
    unreadable) and goes on with the next. A problem that is what a job that did
    not end left (staging, scratch: `utils.checksums.Finding.leftover`) is also
    in `leftovers`.

    Args:
        path: the directory checked.
        kind: what it is, for the summary ("an index directory").

    Example:
    >>> report = CheckReport("indexes/scifact", "an index directory")
    >>> report.step(lambda: report.note("5,183 documents"), "indexes/scifact")
    >>> report.ok
    True
    """

    def __init__(self, path, kind):
        self.path, self.kind = path, kind
        self.problems, self.facts, self.leftovers = [], [], []
        self.verified = 0

    @property
    def ok(self):
        return not self.problems

    def add(self, path, what, leftover=False):
        self.problems.append(f"{path}: {what}")
        if leftover:
            self.leftovers.append(self.problems[-1])

    def note(self, fact):
        self.facts.append(fact)

    def step(self, check, path, passes=()):
        """Runs `check()`, which reads the file (or directory) `path`; what it raises becomes a problem: a
        `UserError` as it is (but for the types `passes` names, which propagate), any other exception as
        `path` unreadable. Returns its result, or None."""
        try:
            return check()
        except passes:
            raise
        except UserError as error:
            self.problems.append(str(error))
        except Exception as error:  # a damaged file that a reader does not expect: a finding, never a crash
            reason = (str(error).splitlines() or [""])[0][:300]
            self.add(path, f"unreadable ({type(error).__name__}: {reason}); {_REMEDY}")
        return None

    def checksums(self, directory):
        """Verifies every file of `directory` against its records (`utils.checksums.verify_checksums`)."""
        findings, verified = verify_checksums(directory)
        for finding in findings:
            self.add(finding.path, finding.what, finding.leftover)
        self.verified += verified

    def leftovers_beside(self, directory, names=None):
        """Adds what jobs that did not end left beside `directory`: the staging of its writes
        (`.NAME.tmp-*`, `.NAME.upload-*`), and the siblings that `names` maps (a glob, or a test of a name) to
        what left them."""
        parent, name = files.parent_and_name(directory)
        if not files.isdir(parent):
            return
        for entry in files.listdir(parent):
            if entry.startswith((f".{name}.tmp-", f".{name}.upload-")):
                self.add(os.path.join(parent, entry), leftover_reason(entry), leftover=True)
                continue
            reason = next((why for match, why in (names or {}).items() if _matches(match, entry)), None)
            if reason is not None:
                self.add(os.path.join(parent, entry), reason, leftover=True)

    def summary(self):
        """One line: what the directory is, what was checked, and how many files' SHA-256 were verified."""
        sums = f"{self.verified} files' SHA-256 verified"
        return f"{self.path}: {self.kind}, ok ({'; '.join([*self.facts, sums])})"


def _matches(match, entry):
    return match(entry) if callable(match) else fnmatch.fnmatchcase(entry, match)
