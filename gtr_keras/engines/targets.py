"""The one parser of an engine target: where `gtr-keras push --to` writes and `--index` searches.

A target is `ENGINE:LOCATION`: `qdrant:PATH` (Qdrant's embedded local mode, a directory), `qdrant+http://HOST:PORT`
or `qdrant+https://...` (a Qdrant server or cluster; its key from `QDRANT_API_KEY`), `milvus:PATH.db` (Milvus
Lite), `milvus+http://HOST:PORT` or `milvus+https://...` (a Milvus server or cluster; `MILVUS_TOKEN`), and
`vertex-ai:DIR` (Vertex AI Vector Search batch-update folders under a local directory or `gs://` prefix).

Example:
>>> parse_target("qdrant:/data/qdrant")
Target(engine='qdrant', location='/data/qdrant', remote=False, text='qdrant:/data/qdrant')
>>> parse_target("milvus+http://10.0.0.5:19530").location
'http://10.0.0.5:19530'
"""

import dataclasses
import re

from gtr_keras.errors import UserError

ENGINES = ("qdrant", "milvus", "vertex-ai")
_TARGET = re.compile(r"(?P<engine>[A-Za-z][A-Za-z0-9-]*)(?P<http>\+https?)?:(?P<rest>.*)\Z", re.S)
FORMS = "qdrant:PATH, qdrant+http://HOST:PORT, milvus:PATH.db, milvus+http://HOST:PORT or vertex-ai:DIR"


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed target: `engine` (one of `ENGINES`), `location` (a path, a directory or gs:// prefix, or an
    `http(s)://HOST:PORT` URL when `remote`), and `text`, the target as given."""

    engine: str
    location: str
    remote: bool
    text: str


def names_engine(text: str) -> bool:
    """Whether `text` (an `--index` value) starts with an engine's name and a colon (`qdrant:`, `milvus+http:`),
    so that it is a target, not an index directory."""
    match = _TARGET.match(text)
    return match is not None and match.group("engine") in ENGINES


def parse_target(text: str) -> Target:
    """`text` as a `Target`.

    Raises:
        UserError: anything but the forms above (an unknown engine, an empty location, a Milvus Lite file not
            ending in `.db`, a remote Vertex target), in one line.
    """
    match = _TARGET.match(text) if isinstance(text, str) else None
    if match is None or match.group("engine") not in ENGINES:
        raise UserError(f"target {text!r}: expected {FORMS}")
    engine, http, rest = match.group("engine"), match.group("http"), match.group("rest")
    if not rest:
        raise UserError(f"target {text!r}: no location after {engine}{http or ''}: (expected {FORMS})")
    if http:
        if engine == "vertex-ai":
            raise UserError(f"target {text!r}: vertex-ai writes batch folders: vertex-ai:DIR (a directory or gs://)")
        if not re.match(r"//[^/:\s]+(:[0-9]{1,5})?/?\Z", rest):
            raise UserError(f"target {text!r}: expected {engine}{http}://HOST:PORT")
        return Target(engine, f"{http[1:]}:{rest.rstrip('/')}", True, text)
    if engine == "milvus" and not rest.endswith(".db"):
        raise UserError(f"target {text!r}: Milvus Lite's file must end in .db (milvus:PATH.db)")
    return Target(engine, rest, False, text)
