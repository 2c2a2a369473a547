"""Extracts broad generic English from Debian packages into `gtr-keras distill --texts` files.

    python recipes/distill_broad/extract_texts.py OUT_DIR [--max-records N]

Reads the files of these Debian packages (install them first; see SOURCES.md for versions and licences):

    apt-get install -y wordnet-base dict-gcide dict-foldoc dict-jargon manpages

and writes into OUT_DIR:

- `wordnet-pairs.jsonl.gz`: a synset's lemmas ("dog, domestic dog, Canis familiaris") -> its definition;
- `wordnet-examples.jsonl.gz`: WordNet's usage examples, single texts;
- `gcide-pairs.jsonl.gz`: GCIDE headword -> one sense's definition (numbered senses and the run-in
  phrases, e.g. "Apple butter" -> "a sauce made of apples stewed down in cider.");
- `foldoc-pairs.jsonl.gz`, `jargon-pairs.jsonl.gz`: headword -> the entry's text;
- `manpages-pairs.jsonl.gz`: a manual page's NAME line -> its DESCRIPTION section (own groff parser, no
  groff or man run, so the output does not depend on their versions or on the locale).

Format (see `gtr_keras.distillation.distillation_data.DistillationTexts`): pairs are `{"_id", "query", "positive"}`
records (a first record with `"query"` makes the file a pairs file), single texts `{"_id", "text"}`.

Cleaning: markup stripped, whitespace collapsed, documents of fewer than 3 words dropped, documents cut at
2,000 characters (at a word boundary), exact duplicates (case-folded query and document) dropped.
Order: sorted by (query, document) / text, then permuted with `random.Random(0)` (the distillation input
pipeline's shuffle buffer holds 100,000 examples, fewer than a file, so an alphabetical file would give
alphabetical batches); `--max-records N` keeps a seeded sample of N records a file. Files are gzip'd with
mtime 0 and written atomically: the same packages give the same bytes.
"""

import argparse
import gzip
import io
import json
import os
import random
import re
import unicodedata

from gtr_keras import UserError
from gtr_keras.errors import run_script
from gtr_keras.utils import files

PACKAGES = ("wordnet-base", "dict-gcide", "dict-foldoc", "dict-jargon", "manpages")
SEED = 0
MIN_WORDS = 3
MAX_CHARS = 2000
WORDNET_DIR = "/usr/share/wordnet"
DICTD_DIR = "/usr/share/dictd"
MANPAGES_LIST = "/var/lib/dpkg/info/manpages.list"
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


# ---------------------------------------------------------------------------------------------- common


def write_jsonl_gz(path, records):
    """Writes `records` as gzip'd JSON Lines, mtime 0 and no name in the gzip header (the same records give
    the same bytes), atomically (`gtr_keras.utils.files.atomic_file`). Returns how many were written."""
    count = 0
    with (
        files.atomic_file(path) as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as packed,
        io.TextIOWrapper(packed, encoding="utf-8", newline="\n") as f,
    ):
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def squash(text):
    """NFC, no control characters, whitespace collapsed to single spaces."""
    text = unicodedata.normalize("NFC", text).replace("\ufffd", "")
    text = re.sub(r"([=_*#~+-])\1{3,}", " ", text)  # rules and table borders: ====, ----
    text = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else "" if unicodedata.category(ch) == "Cf" else ch
        for ch in text
    )  # format characters (soft hyphens, zero-width spaces) go
    return " ".join(text.split())


def cap(text, limit=MAX_CHARS):
    """`text` cut to at most `limit` characters at a word boundary."""
    if len(text) <= limit:
        return text, False
    cut = text[: limit + 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else text[:limit]).rstrip(), True


_XREF = re.compile(r"^(See|Same as|Cf\.|Also|= )\b")


class Collector:
    """Cleans, filters, de-duplicates and counts the records of one output file."""

    def __init__(self, name, pairs):
        self.name, self.pairs = name, pairs
        self.records, self.seen = {}, set()
        self.counts = {"read": 0, "unparsed": 0, "short": 0, "xref": 0, "duplicate": 0, "truncated": 0}

    def add(self, record_id, document, query=None):
        self.counts["read"] += 1
        document = squash(document)
        query = squash(query) if query is not None else None
        if len(document.split()) < MIN_WORDS or (self.pairs and not query):
            self.counts["short"] += 1
            return
        if _XREF.match(document) and len(document.split()) <= 6:
            self.counts["xref"] += 1  # only a cross-reference: "See At one.", "Same as Weir."
            return
        document, truncated = cap(document)
        query, _ = cap(query, 200) if query is not None else (None, False)
        key = (query.casefold() if query else None, document.casefold())
        if key in self.seen:
            self.counts["duplicate"] += 1
            return
        self.seen.add(key)
        self.counts["truncated"] += truncated
        base, n = record_id, 1
        while record_id in self.records:  # ids must be unique within a file
            n += 1
            record_id = f"{base}#{n}"
        self.records[record_id] = (
            {"_id": record_id, "query": query, "positive": document}
            if self.pairs
            else {"_id": record_id, "text": document}
        )

    def write(self, out_dir, max_records=None):
        fields = ("query", "positive") if self.pairs else ("text",)
        records = sorted(self.records.values(), key=lambda r: tuple(r[f] for f in fields) + (r["_id"],))
        random.Random(SEED).shuffle(records)
        if max_records is not None and len(records) > max_records:
            records = records[:max_records]  # the shuffle is seeded: a seeded sample
        path = os.path.join(out_dir, f"{self.name}.jsonl.gz")
        self.counts["written"] = write_jsonl_gz(path, records)
        return path


# ---------------------------------------------------------------------------------------------- WordNet


def wordnet(pairs, examples):
    """Every synset of data.{noun,verb,adj,adv}: lemmas -> definition (pairs), examples (singles)."""
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET_DIR, f"data.{pos}"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                fields, _, gloss = line.partition(" | ")
                fields = fields.split()
                offset, ss_type, count = fields[0], fields[2], int(fields[3], 16)
                lemmas = []
                for word in fields[4 : 4 + 2 * count : 2]:
                    word = re.sub(r"\((a|p|ip)\)$", "", word).replace("_", " ")
                    if word not in lemmas:
                        lemmas.append(word)
                quoted = re.findall(r'"([^"]*)"', gloss)
                definition = gloss.split('"', 1)[0].strip().rstrip(";").strip()
                record_id = f"wordnet:{ss_type}{offset}"
                pairs.add(record_id, definition, ", ".join(lemmas[:5]))
                for k, example in enumerate(quoted, 1):
                    examples.add(f"{record_id}:{k}", example)


# ---------------------------------------------------------------------------------------------- dictd


def _b64(text):
    value = 0
    for ch in text:
        value = value * 64 + _B64.index(ch)
    return value


def dictd_entries(name):
    """`[(headword, offset, text)]` of a dictd database, one per distinct entry, in file order."""
    with gzip.open(os.path.join(DICTD_DIR, f"{name}.dict.dz")) as f:  # dictzip is gzip-compatible
        data = f.read()
    entries = {}
    with open(os.path.join(DICTD_DIR, f"{name}.index"), encoding="utf-8") as f:
        for line in f:
            headword, offset, length = line.rstrip("\n").split("\t")[:3]
            if headword.startswith("00-database-") or headword.startswith(("00-gcide-", "00-web1913-")):
                continue
            key = (_b64(offset), _b64(length))
            if key not in entries:
                entries[key] = (headword, data[key[0] : key[0] + key[1]].decode("utf-8", errors="replace"))
    return [(headword, key[0], text) for key, (headword, text) in sorted(entries.items())]


# GCIDE's ASCII codes for letters with diacritics and other characters (`[a^]`, `['e]`, `[ae]`, ...).
_GCIDE_NAMED = {
    "ae": "æ",
    "AE": "Æ",
    "oe": "œ",
    "OE": "Œ",
    "eth": "ð",
    "thorn": "þ",
    "imac": "ī",
    "aum": "ä",
    "ng": "ŋ",
    "yogh": "ȝ",
    "deg": "°",
    "sect": "§",
    "pounds": "£",
    "root": "√",
    "sharp": "♯",
    "flat": "♭",
    "th": "th",
    "asl": "a",
    "add": "a",
    "udd": "u",
    "dsdot": "d",
    "bprime": "″",
    "prime": "′",
    "min": "′",
    "sec": "″",
    "frac12": "½",
    "frac14": "¼",
    "frac34": "¾",
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "delta": "δ",
    "Delta": "Δ",
    "epsilon": "ε",
    "zeta": "ζ",
    "eta": "η",
    "theta": "θ",
    "iota": "ι",
    "kappa": "κ",
    "lambda": "λ",
    "mu": "μ",
    "nu": "ν",
    "xi": "ξ",
    "omicron": "ο",
    "pi": "π",
    "rho": "ρ",
    "sigma": "σ",
    "Sigma": "Σ",
    "tau": "τ",
    "upsilon": "υ",
    "phi": "φ",
    "chi": "χ",
    "psi": "ψ",
    "omega": "ω",
    "Omega": "Ω",
}
_GCIDE_MARKS = {
    "'": "\u0301",
    "`": "\u0300",
    "^": "\u0302",
    '"': "\u0308",
    "~": "\u0303",
    ",": "\u0327",
    "=": "\u0304",
    "-": "\u0306",
    ".": "\u0323",
    "*": "",
}


def _gcide_char(match):
    code = match.group(1)
    if code in _GCIDE_NAMED:
        return _GCIDE_NAMED[code]
    m = re.fullmatch(r"([\"'`^~,=\-.*]?)([A-Za-z]{1,2})(\^?)", code)
    if not m:
        return match.group(0)
    mark, letters, breve = m.groups()
    if breve:  # `[a^]`: a short vowel in the pronunciation key
        mark = mark or "-"
    return unicodedata.normalize("NFC", letters + _GCIDE_MARKS.get(mark, ""))


def _gcide_text(text):
    """A GCIDE definition as plain text."""
    text = re.sub(r"\[([A-Za-z\"'`^~,=\-.*]{1,7})\]", _gcide_char, text)
    text = re.sub(r"\{([^{}]*)\}", lambda m: re.sub(r'["*`]', "", m.group(1)), text)  # cross-references
    text = re.sub(r"(^|\s)--(?=[A-Z(])[^\n]*", " ", text)  # citations: --Shak., --Sir P. Sidney.
    for _ in range(2):  # labels, etymologies, editorial notes: [Obs.], [R.], [Cf. ...]
        text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = squash(re.sub(r"[\[\]{}]", " ", text))
    text = re.sub(r"\s?\((?=[^()]*(\w\*\w|\w\"\w|\w`))[^()]*\)", "", text)  # pronunciations: (mŏn*strŏs"ĭ*tĭz)
    text = re.sub(r"(?<=\w)[\"*`]+(?=\w)", "", text)  # stress marks left in words: Da"i*ra
    # derived forms run in at the end: "-- Babishly, adv. -- Babishness, n."
    text = re.sub(r"(\s--\s*[\w'-]+(\s[\w'-]+)?,\s*([a-z]{1,5}\.\s*(&\s*)?)+)+$", "", text)
    text = re.sub(r"(?<=[.;]) \([b-h]\) ", " ", text)  # sub-sense markers: "... a boat. (b) One of ..."
    for _ in range(2):  # leading "(a)", domain labels "(Zool.)", "pl." and stray punctuation
        text = re.sub(r"^(\([a-h]\)\s*|pl\.\s*|\([A-Z][^()]{0,30}\)\s*|[,;:.&)]\s*)+", "", text)
    return squash(text)


def _gcide_headword(header):
    headword = header.split("\\", 1)[0]
    headword = re.sub(r"\[([A-Za-z\"'`^~,=\-.*]{1,7})\]", _gcide_char, headword)
    return squash(re.sub(r'["*`]', "", headword)).strip(" ,")


def _depth(line):
    line = re.sub(r"\[[A-Za-z\"'`^~,=\-.*]{1,7}\]", "", line)  # character codes are balanced
    return line.count("[") - line.count("]") + line.count("(") - line.count(")")


_SOURCE_TAG = re.compile(r"^\s*\[[^\[\]]*\](\s+\S+)?\s*$")  # "[1913 Webster]", "[WordNet 1.5] babysitter"
_HEADER_GOES_ON = re.compile(
    r"^\s*(\\|\[|,|\([^()]*[\"*`\[]|\([^()]*\)\s*[,;]|[\w' -]+\\"
    r"|((prop\.\s*)?(n|a|adj|adv|v|t|i|pl|p|pr|imp|interj|conj|prep|pron|sing|obs|suffix|prefix)\.\s*(&\s*)?)+"
    r"([,;\[(]|$))"
)
_SUBENTRY = re.compile(
    r"^\{([^{}]+)\}((?:\s*(?:,\s*)?(?:or\s*)?\{[^{}]+\})*)\s*(?:\([^()]*\)\s*)*[,.:;]?\s*(.*)$", re.S
)


def gcide(pairs):
    """Every GCIDE entry: headword -> each numbered or unnumbered sense; run-in phrase -> its definition."""
    for _, offset, text in dictd_entries("gcide"):
        lines = text.split("\n")
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines or "\\" not in lines[0]:
            continue
        headword = _gcide_headword(lines[0])
        lines = [line for line in lines if not _SOURCE_TAG.match(line)]
        # The header (headwords, \pronunciations\, part of speech, [etymology]) runs on while a bracket or a
        # pronunciation is open, or while the next line goes on with one.
        end, depth, slashes = 0, 0, 0
        while end < len(lines):
            depth += _depth(lines[end])
            slashes += lines[end].count("\\")
            if depth <= 0 and slashes % 2 == 0 and not (end + 1 < len(lines) and _HEADER_GOES_ON.match(lines[end + 1])):
                break
            end += 1
        if end == len(lines):  # a header that never closes: the entry is left out
            pairs.counts["read"] += 1
            pairs.counts["unparsed"] += 1
            continue
        body = lines[end + 1 :]
        paragraphs, current = [], []
        for line in body + [""]:
            if line.strip():
                current.append(line)
            elif current:
                paragraphs.append(current)
                current = []
        sense = 0
        for paragraph in paragraphs:
            first = paragraph[0]
            indent = len(first) - len(first.lstrip())
            content = "\n".join(paragraph).strip()
            if indent >= 8 or content.startswith(("Note:", "Syn:", "Syn.", "Usage:")):
                continue  # quotations, notes, synonym lists
            # Lines of quotations inside a sense paragraph (indented deeper than its text) are dropped.
            keep = [paragraph[0]] + [line for line in paragraph[1:] if len(line) - len(line.lstrip()) < indent + 8]
            content = "\n".join(keep).strip()
            if content.startswith("{"):
                m = _SUBENTRY.match(content)
                phrase = _gcide_text("{" + m.group(1) + "}") if m else ""
                if re.search(r"[A-Za-z]", phrase) and not re.search(r"[()\\]", phrase) and len(phrase.split()) <= 8:
                    pairs.add(f"gcide:{offset}:{phrase}", _gcide_text(m.group(3)), phrase)
                continue
            content = re.sub(r"^\d+\.\s*", "", content)
            sense += 1
            definition = _gcide_text(content)
            if "\\" in definition:  # a header this parser did not recognise
                pairs.counts["read"] += 1
                pairs.counts["unparsed"] += 1
                continue
            pairs.add(f"gcide:{offset}:{sense}", definition, headword)


def _dictd_body(text, skip_lines):
    """The paragraphs of a FOLDOC or Jargon entry after its first `skip_lines` lines, each on one line."""
    lines = text.split("\n")[skip_lines:]
    paragraphs, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    return paragraphs


def _links(text):
    text = re.sub(r"\{\(?(https?|ftp|mailto|news|gopher|telnet):[^{}]*\}", " ", text)  # bare links
    text = re.sub(r"\(\s*(https?|ftp|mailto|news|gopher|telnet):[^()\s]*\s*\)", " ", text)
    text = re.sub(r"(https?|ftp)://\S+", " ", text)
    return re.sub(r"\{([^{}]*)\}", r"\1", text)


def foldoc(pairs):
    """FOLDOC: first headword line -> the entry's text (categories, links and dates dropped)."""
    for _, offset, text in dictd_entries("foldoc"):
        lines = text.strip("\n").split("\n")
        heads = []
        for line in lines:
            if not line.strip() or line.startswith(" "):
                break
            heads.append(line.strip())
        if not heads:
            continue
        kept = []
        for paragraph in _dictd_body(text.strip("\n"), len(heads)):
            if re.fullmatch(r"\(\d{4}-\d{2}-\d{2}\)\.?", paragraph):
                continue  # the entry's date
            paragraph = re.sub(r"<[a-z][a-z0-9 ,/+-]*>", " ", paragraph)  # categories: <programming>
            paragraph = squash(_links(paragraph))
            if re.fullmatch(r"[\W\d]*", paragraph) or re.fullmatch(r"\[.*\]\.?", paragraph):
                continue  # nothing left, or a bibliographic reference
            kept.append(paragraph)
        document = re.sub(r"^/[^/\s][^/]{0,60}/,?\s*", "", " ".join(kept))  # a pronunciation: /kop'ee-brohk/
        pairs.add(f"foldoc:{offset}", document, heads[0])


def jargon(pairs):
    """The Jargon File: headword -> the entry's text (pronunciation line, sense labels dropped)."""
    for _, offset, text in dictd_entries("jargon"):
        lines = text.strip("\n").split("\n")
        if not lines or lines[0].startswith(" "):
            continue
        headword, skip = lines[0].strip(), 1
        while skip < len(lines) and lines[skip].startswith(" ") and not lines[skip].startswith("  "):
            skip += 1  # " /pron/, n." lines
        kept = []
        for paragraph in _dictd_body("\n".join(lines), skip):
            paragraph = re.sub(r"^\d+\.\s*", "", paragraph)
            paragraph = re.sub(r"^\[[^\[\]]*\]\s*", "", paragraph)  # [techspeak], [from LISP ...]
            paragraph = squash(_links(paragraph))
            if paragraph:
                kept.append(paragraph)
        pairs.add(f"jargon:{offset}", " ".join(kept), headword)


# ---------------------------------------------------------------------------------------------- man pages

_GROFF_CHARS = {
    "em": "—",
    "en": "–",
    "bu": "",
    "aq": "'",
    "dq": '"',
    "lq": "“",
    "rq": "”",
    "oq": "‘",
    "cq": "’",
    "ha": "^",
    "ti": "~",
    "dg": "†",
    "de": "°",
    "mi": "-",
    "ra": "→",
    "la": "←",
    "fm": "′",
    "sd": "″",
    "12": "½",
    "14": "¼",
    "34": "¾",
    "mc": "µ",
    "co": "©",
    "rg": "®",
    "tm": "™",
    "ga": "`",
    "hy": "-",
    "pl": "+",
    "mu": "×",
    "di": "÷",
    "<=": "≤",
    ">=": "≥",
    "!=": "≠",
    "sc": "§",
    "bv": "|",
    "rs": "\\",
    "sl": "/",
    "at": "@",
    "sh": "#",
    "Tm": "™",
    "lA": "⇐",
    "rA": "⇒",
    "->": "→",
    "<-": "←",
    "ua": "↑",
    "da": "↓",
    "if": "∞",
    "pc": "·",
    "ss": "ß",
    "ct": "¢",
    "Po": "£",
    "Eu": "€",
    "Ye": "¥",
    "ru": "_",
    "ul": "_",
    "br": "|",
    "or": "|",
    "ba": "|",
    "tf": "∴",
    "ap": "~",
    "cs": "",
    "ci": "○",
}
_ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", ":": "\u0308", "~": "\u0303", ",": "\u0327", "o": "\u030a"}


def _groff_char(name):
    if name in _GROFF_CHARS:
        return _GROFF_CHARS[name]
    if len(name) == 2 and name[0] in _ACCENTS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + _ACCENTS[name[0]])
    if name.startswith("u") and re.fullmatch(r"u[0-9A-F]{4,6}", name):
        return chr(int(name[1:], 16))
    return ""


_ESCAPE = re.compile(
    r"\\(?:"
    r"\((?P<c2>..)|\[(?P<cb>[^\]]*)\]|\*(?:\((?P<s2>..)|\[(?P<sb>[^\]]*)\]|(?P<s1>.))"
    r"|f(?:\(..|\[[^\]]*\]|.)|s[-+]?(?:\d|\(\d\d|\[\d+\])|[wNhvlLxbobDHRSXYZAoCkm](?:'[^']*'|\[[^\]]*\]|\(..|.)"
    r"|n(?:\(..|\[[^\]]*\]|.)|g(?:\(..|\[[^\]]*\]|.)|\$.|(?P<one>.))",
    re.S,
)
_STRINGS = {"lq": "“", "rq": "”", "-": "—", "dg": "†", "Tm": "™", "R": "®", ":": "", "o": "", "<": "<", ">": ">"}
_ONE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "_": "_", "'": "'", "`": "`", ".": "."}


def _unescape(text):
    def replace(m):
        if m.group("c2") is not None:
            return _groff_char(m.group("c2"))
        if m.group("cb") is not None:
            return _groff_char(m.group("cb"))
        for name in ("s2", "sb", "s1"):
            if m.group(name) is not None:
                return _STRINGS.get(m.group(name), "")
        if m.group("one") is not None:
            return _ONE.get(m.group("one"), "")  # \& \: \% \| \^ \c \/ \, \{ \} and the rest: nothing
        return ""  # fonts, sizes, widths, motions, registers

    return _ESCAPE.sub(replace, text)


def _arguments(text):
    """The arguments of a request line, with groff's double-quote rules."""
    args, current, quoted, i = [], [], False, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if quoted:
            if ch == '"':
                if text[i + 1 : i + 2] == '"':
                    current.append('"')
                    i += 1
                else:
                    quoted = False
                    args.append("".join(current))
                    current = []
            else:
                current.append(ch)
        elif ch == '"' and not current:
            quoted = True
        elif ch in " \t":
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(ch)
        i += 1
    if current or quoted:
        args.append("".join(current))
    return args


_SKIP_BLOCKS = {"EX": "EE", "nf": "fi", "TS": "TE", "de": "..", "SY": "YS", "EQ": "EN", "PS": "PE"}
_BREAKS = {
    "PP",
    "P",
    "LP",
    "sp",
    "br",
    "HP",
    "IP",
    "TP",
    "TQ",
    "SS",
    "SH",
    "RS",
    "RE",
    "in",
    "ti",
    "bp",
    "INDENT",
    "UNINDENT",
}


def man_sections(source):
    """`{section name: [paragraph, ...]}` of a man page's groff source (NAME, DESCRIPTION, ...)."""
    sections, section, paragraph = {}, None, []
    skip_until, tag_next, item = None, False, False

    def flush():
        if paragraph and section is not None:
            text = squash(" ".join(paragraph))
            if text and item and text[-1].isalnum():
                text += ";"  # an item of a list without punctuation of its own
            if text:
                sections.setdefault(section, []).append(text)
        paragraph.clear()

    lines = source.replace("\\\n", "").split("\n")
    for raw in lines:
        if skip_until is not None:
            ended = re.match(r"^[.']\s*" + re.escape(skip_until) + r"\b", raw)
            if ended or (skip_until == ".." and raw.startswith("..")):
                skip_until = None
            continue
        if raw.startswith(('.\\"', "'\\\"", ".\\#")) or raw.strip() in (".", "'"):
            continue
        line = re.sub(r'\\".*', "", raw)  # comments
        line = re.sub(r"\\#.*", "", line)
        if line.startswith((".", "'")):
            m = re.match(r"^[.']\s*(\S+)\s*(.*)$", line)
            if not m:
                continue
            name, rest = m.groups()
            if name in _SKIP_BLOCKS:
                flush()
                skip_until = _SKIP_BLOCKS[name]
                continue
            if name in (
                "if",
                "ie",
                "el",
                "ds",
                "nr",
                "ta",
                "ft",
                "ad",
                "na",
                "nh",
                "hy",
                "PD",
                "ne",
                "UC",
                "TH",
                "so",
                "ll",
                "ps",
                "vs",
                "mso",
                "cc",
                "tr",
                "ev",
                "fam",
                "ss",
                "lf",
            ):
                continue
            args = _arguments(rest)
            if name == "SH":
                flush()
                section = squash(_unescape(" ".join(args))).upper()
                item = False
                continue
            if name in _BREAKS:
                flush()
                if name == "SS" and args:
                    paragraph.append(_unescape(" ".join(args)) + ":")
                    flush()
                elif name == "IP" and args:
                    tag = squash(_unescape(args[0]))
                    if tag and not re.fullmatch(r"[\W\d]*[a-z]?[.)]?|\*", tag):  # not a bullet or "1."
                        paragraph.append(_unescape(args[0]))
                tag_next = name in ("TP", "TQ")
                item = name in ("IP", "TP", "TQ")
                continue
            if name in ("B", "I", "SM", "SB", "R"):
                paragraph.append(_unescape(" ".join(args)))
            elif name in ("BR", "IR", "RB", "RI", "BI", "IB"):
                paragraph.append(_unescape("".join(args)))
            elif name == "q":
                paragraph.append("“" + _unescape(args[0] if args else "") + "”" + _unescape("".join(args[1:])))
            elif name in ("UE", "ME"):
                if args:
                    paragraph[-1:] = [(paragraph[-1] if paragraph else "") + _unescape("".join(args))]
            elif name in ("UR", "MT"):
                pass  # the link's text follows; the address is dropped
            # any other request: no text
        else:
            paragraph.append(_unescape(line))
        if tag_next:
            tag_next = False
            if not "".join(paragraph).rstrip().endswith(":"):
                paragraph.append(":")
    flush()
    return sections


def manpages(pairs):
    """Each page of the `manpages` package: NAME line -> DESCRIPTION (paragraphs joined)."""
    with open(MANPAGES_LIST, encoding="utf-8") as f:
        paths = sorted(line.strip() for line in f if re.match(r"^/usr/share/man/man\d/.*\.gz$", line.strip()))
    for path in paths:
        if os.path.islink(path):
            continue  # another name of a page read under its own name
        with gzip.open(path) as f:
            source = f.read().decode("utf-8", errors="replace")
        if re.match(r"^\.so\s", source.lstrip()):
            continue  # a link to another page
        sections = man_sections(source)
        name = " ".join(sections.get("NAME", []))
        description = " ".join(sections.get("DESCRIPTION", []))
        description = re.sub(r"\s+:\s*", ": ", description).replace(": :", ":")
        if name:
            pairs.add(f"manpages:{os.path.basename(path)[:-3]}", description, name)


# ---------------------------------------------------------------------------------------------- main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument(
        "--max-records", type=int, default=None, help="keep a seeded sample of at most N records a file (default: all)"
    )
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    missing = [
        path
        for path in (
            WORDNET_DIR,
            MANPAGES_LIST,
            *(os.path.join(DICTD_DIR, f"{name}.index") for name in ("gcide", "foldoc", "jargon")),
        )
        if not os.path.exists(path)
    ]
    if missing:
        raise UserError(f"missing {', '.join(missing)}: apt-get install -y {' '.join(PACKAGES)}")
    jobs = [  # (extractor, the files it fills)
        (wordnet, [Collector("wordnet-pairs", True), Collector("wordnet-examples", False)]),
        (gcide, [Collector("gcide-pairs", True)]),
        (foldoc, [Collector("foldoc-pairs", True)]),
        (jargon, [Collector("jargon-pairs", True)]),
        (manpages, [Collector("manpages-pairs", True)]),
    ]
    columns = ("read", "unparsed", "short", "xref", "duplicate", "truncated", "written")
    print(f"{'file':<28}" + "".join(f"{name:>10}" for name in columns))
    totals = [0, 0]
    for extract, collectors in jobs:
        extract(*collectors)
        for collector in collectors:
            collector.write(args.out_dir, args.max_records)
            c = collector.counts
            print(f"{collector.name + '.jsonl.gz':<28}" + "".join(f"{c[name]:>10}" for name in columns))
            totals[0 if collector.pairs else 1] += c["written"]
    print(f"total: {totals[0]} pairs, {totals[1]} single texts")


if __name__ == "__main__":
    run_script(main)
