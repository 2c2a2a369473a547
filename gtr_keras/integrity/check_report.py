"""`CheckReport`: what `gtr-keras check` found in one directory: its problems, in the order found, and facts."""

from gtr_keras.errors import UserError
from gtr_keras.utils.checksums import verify_checksums


class CheckReport:
    """The problems and facts that the checks of one directory collect.

    Each check runs through `step`, which records the `UserError` it raises
    (a `DataError` naming its file) as a problem and goes on with the next.

    Args:
        path: the directory checked.
        kind: what it is, for the summary ("an index directory").

    Example:
    >>> report = CheckReport("indexes/scifact", "an index directory")
    >>> report.step(lambda: report.note("5,183 documents"))
    >>> report.ok
    True
    """

    def __init__(self, path, kind):
        self.path, self.kind = path, kind
        self.problems, self.facts = [], []
        self.verified, self.unchecked = 0, []

    @property
    def ok(self):
        return not self.problems

    def add(self, path, what):
        self.problems.append(f"{path}: {what}")

    def note(self, fact):
        self.facts.append(fact)

    def step(self, check, passes=()):
        """Runs `check()`; a `UserError` it raises becomes a problem (but for the types `passes` names, which
        propagate). Returns its result, or None."""
        try:
            return check()
        except passes:
            raise
        except UserError as error:
            self.problems.append(str(error))
            return None

    def checksums(self, directory, expected_absent=lambda relative: False):
        """Verifies `directory`'s `checksums.json` (`utils.checksums`); notes a directory without one."""
        problems, verified = verify_checksums(directory, expected_absent)
        if problems is None:
            self.unchecked.append(directory)
            return
        for path, what in problems:
            self.add(path, what)
        self.verified += verified

    def summary(self):
        """One line: what the directory is, what was checked, and how the SHA-256s went."""
        sums = f"{self.verified} files' SHA-256 verified"
        if self.unchecked:
            sums += (
                f"; {len(self.unchecked)} director{'y' if len(self.unchecked) == 1 else 'ies'} written before "
                f"checksums were recorded ({self.unchecked[0]}{', ...' if len(self.unchecked) > 1 else ''}): "
                "checked for the rest"
            )
        return f"{self.path}: {self.kind}, ok ({'; '.join([*self.facts, sums])})"
