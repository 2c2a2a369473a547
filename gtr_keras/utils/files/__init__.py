"""All file access of gtr-keras: `tf.io.gfile` paths, and outputs that appear whole or not at all.

TensorFlow is imported on first use: local paths are handled by the OS directly
(`exists`, `isdir`, `isfile`, `listdir`, `glob`, `makedirs`, `remove`, binary
`open`, `read_bytes`, `local_copy`; text and write modes of `open` still go
through `tf.io.gfile`), so that loading and searching a local
`SearchIndex`, or `index --embeddings`, needs no TensorFlow (a process saves its
~500 MB).

Every path may be local or use a scheme TensorFlow's file systems know
(`gs://` on Cloud TPU VMs, `ram://` in tests, `s3://`/`hdfs://` where the
plugins are installed). A scheme TensorFlow does not know is a `DataError`
naming the path, never a local folder named after it. Where an `os.PathLike`
names a file (the ids of `Index.update(delete=...)`), `FilePath` keeps a
path's scheme (`pathlib.Path` makes `gs://b/f` `gs:/b/f`).

Reading: `open` (any file), `open_decompressed` (gunzips `*.gz`), `exists`,
`isdir`, `isfile`, `listdir`, `glob`, and `local_copy` for code that
needs a local path (Keras weights files, ScaNN assets). Writing goes through
`atomic_outputs` / `atomic_directory` / `atomic_file`: the caller writes to a
local staging path, which then replaces the target (by a rename on a local
file system; by an upload to a sibling staging name and per-file renames
elsewhere). An existing directory is replaced only when it is empty or of a
`DirectoryKind` the writer names (`check_replaceable`): never a folder of the
user's that happens to sit where an output goes.

Every directory `atomic_outputs` commits holds its record, `checksums.json`
(`checksum_records`), and every later write into it through this module
(`replace_file`, `atomic_outputs`, `remove`, `rename`) keeps that record up to
date, in two steps around the change (`recorded`), so that whatever writer
adds a file to a directory gtr-keras wrote, `gtr-keras check` verifies it.

Modules: `paths` (reading, listing, making and deleting), `temporary` (temporary directories, local copies),
`replaceable` (which directories an output may replace), `commits` (staged outputs renamed into place),
`recorded` (records kept up to date), `atomic` (`atomic_outputs`, `atomic_directory`, `atomic_file`).

Internal: no public names. The package's modules use it as one namespace (`from gtr_keras.utils import files`,
`files.exists(path)`), each name imported on first use.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__: list[str] = []
_, __getattr__ = lazy_exports(
    __name__,
    {
        "tf": "gtr_keras.utils.files.paths",
        "FilePath": "gtr_keras.utils.files.paths",
        "is_local": "gtr_keras.utils.files.paths",
        "exists": "gtr_keras.utils.files.paths",
        "isdir": "gtr_keras.utils.files.paths",
        "isfile": "gtr_keras.utils.files.paths",
        "modified_ns": "gtr_keras.utils.files.paths",
        "listdir": "gtr_keras.utils.files.paths",
        "glob": "gtr_keras.utils.files.paths",
        "makedirs": "gtr_keras.utils.files.paths",
        "files_under": "gtr_keras.utils.files.paths",
        "open": "gtr_keras.utils.files.paths",
        "open_decompressed": "gtr_keras.utils.files.paths",
        "read_bytes": "gtr_keras.utils.files.paths",
        "parent_and_name": "gtr_keras.utils.files.paths",
        "temporary_directory": "gtr_keras.utils.files.temporary",
        "remove_abandoned_temporary_directories": "gtr_keras.utils.files.temporary",
        "local_copy": "gtr_keras.utils.files.temporary",
        "DirectoryKind": "gtr_keras.utils.files.replaceable",
        "check_replaceable": "gtr_keras.utils.files.replaceable",
        "CHECKSUMS_FILE": "gtr_keras.utils.files.recorded",
        "file_sha256": "gtr_keras.utils.files.recorded",
        "write_checksums": "gtr_keras.utils.files.recorded",
        "remove": "gtr_keras.utils.files.recorded",
        "remove_staging": "gtr_keras.utils.files.recorded",
        "replace_file": "gtr_keras.utils.files.recorded",
        "rename": "gtr_keras.utils.files.recorded",
        "atomic_outputs": "gtr_keras.utils.files.atomic",
        "atomic_directory": "gtr_keras.utils.files.atomic",
        "atomic_file": "gtr_keras.utils.files.atomic",
    },
)
