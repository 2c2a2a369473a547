"""The version directories of exports (`EXPORT_DIR/NAME/<version>/`, as TF Serving serves them): the next
version, the check that one may be replaced, and several written as a unit.
"""

import os

from gtr_keras.models.gtr.gtr_text_embedder import SAVED_MODEL_DIRECTORY
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_outputs


def version_dir(export_dir, name, version):
    return os.path.join(export_dir, name, str(version))


def next_version(export_dir, names=("encoder", "searcher")):
    """The version after the highest of `export_dir/NAME/<version>` of `names` (1 when there is none): an
    export there adds it, and TF Serving, which serves the highest version, switches to it by itself while
    the versions it may be serving stay as they are.

    Example:
    >>> next_version("exports/scifact")
    2
    """
    versions = [0]
    for name in names:
        folder = os.path.join(export_dir, name)
        if files.isdir(folder):
            versions += [int(entry) for entry in files.listdir(folder) if entry.isdigit()]
    return max(versions) + 1


def check_export_outputs(export_dir, version=1, names=("encoder", "searcher")):
    """Refuses (`DataError` naming a file there) a version directory `export_dir/NAME/<version>` of `names`
    that holds something else than a SavedModel, which an export would replace; call it before the work.

    Example:
    >>> check_export_outputs("exports/scifact", 2)
    """
    for name in names:
        files.check_replaceable(version_dir(export_dir, name, version), [SAVED_MODEL_DIRECTORY])


def write_together(export_dir, version, writers):
    version = version or next_version(export_dir, list(writers))
    targets = {name: version_dir(export_dir, name, version) for name in writers}
    for target in targets.values():
        files.remove_staging(target)  # `export_all` holds the export root's lock
    with atomic_outputs(*targets.values(), replaces=[[SAVED_MODEL_DIRECTORY]] * len(targets)) as staged:
        for write, staging in zip(writers.values(), staged):
            staging.mkdir()
            write(staging)
    return targets
