"""One reader per input format of `gputext corpus build`, plus format detection.

Text formats give ``TextInput`` (raw texts, tokenised later in one pass by ingest.py):

    tab        Orange .tab: 3 header lines (column names, types, flags), then one row per document;
               the column flagged ``class`` is the label, every other column typed
               string/s/text is text (several are joined with a space)
    tsv        ``label<TAB>text`` per line (the text may contain further tabs; an empty label is
               a missing label)
    dir        a directory with one folder per class holding one file per document (sub-folders
               of a class folder are walked too); raw e-mail/news bytes decoded as UTF-8, else
               Latin-1 (one warning sums them up; never fatal); hidden files and files directly in the root
               are skipped (their count is reported)
    jsonl      one JSON object a line: ``text`` (required), optional ``id``, and either ``label``
               (one value) or ``labels`` (a list: multi-label)

Matrix formats give ``MatrixInput`` (values already per term/feature):

    svmlight   ``target [qid:N] index:value ... [# comment]``; feature index j (from 1) is column
               j-1, named "fj"; comments are ignored; ``--query-groups`` (one group size a line,
               in order) assigns qids 1, 2, ... when the file has none
    uci        UCI bag-of-words: ``docword.NAME.txt[.gz]`` (D, W, NNZ, then ``doc word count``
               triples, 1-based) with ``vocab.NAME.txt`` beside it (W words, line w = word w)
    counts-csv label, then one count per term, comma-separated, no header (UCI CNAE-9); terms
               are named "t1".."tW" by column

Every text input may be gzip-compressed (detected by its magic bytes); ``-`` reads stdin.
Text is UTF-8 (a BOM is dropped); a file (for dir: a document) that is not valid UTF-8 is decoded
as Latin-1 (ISO-8859-1: every byte one character, so a Latin-1 "café" stays "café") with a warning
naming the first invalid byte. Lines end with \n or \r\n (a file with only \r line ends is read as
old Mac text); tab and tsv refuse a bare \r inside a line with its number, as it would otherwise
split the document.
Errors name the file (and line where there is one), what was expected and what was found.
Doc ids: the JSONL ``id`` (else its line), the file's path relative to the directory for dir,
``NAME:LINE`` (file name and 1-based line number) for the line formats, the 1-based document
number for UCI.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import sys
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from .limits import check_declared_shape, check_float32
from .choices import FORMATS  # noqa: F401 (readers.FORMATS: the formats below and ingest's check)
from ..progress import warn

TEXT_FORMATS = ("tab", "tsv", "dir", "jsonl")
MATRIX_FORMATS = ("svmlight", "uci", "counts-csv", "npz")
ORANGE_TYPES = {"d", "discrete", "c", "continuous", "s", "string", "text", "t", "time", ""}
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_UCI_DOCWORD = re.compile(r"^docword\.(.+)\.txt(\.gz)?$")
_UCI_VOCAB = re.compile(r"^vocab\.(.+)\.txt(\.gz)?$")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SVM_TARGET = re.compile(rf"^(?:{_NUMBER}(?:,{_NUMBER})*)?$")
_SVM_PAIR = re.compile(r"^\d+:\S+$")
_CSV_LINE = re.compile(rf"^\s*[^,]*(?:,\s*{_NUMBER}\s*)+$")


@dataclass
class TextInput:
    """Documents as raw text. ``labels[i]`` is the list of labels of document i (empty: none);
    ``labels`` is None when the source has no labels at all; ``multilabel`` when the source
    gives label lists."""

    texts: list[str]
    doc_ids: list[str]
    labels: list[list[str]] | None
    multilabel: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class MatrixInput:
    """Documents as rows of values: ``values`` csr float64 (n_docs, n_columns) named ``terms``.

    ``kind`` is "counts" (term counts: text-like weighting defaults) or "features" (svmlight).
    """

    values: sp.csr_matrix
    terms: np.ndarray
    doc_ids: list[str]
    labels: list[list[str]] | None
    kind: str
    multilabel: bool = False
    qid: np.ndarray | None = None
    relevance: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- bytes in

_STDIN_CACHE: dict[str, bytes] = {}


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def check_exists(path: str) -> None:
    if path != "-" and not os.path.exists(path):
        raise InputError(f"{path}: no such file or directory")


def stdin_bytes() -> bytes:
    """All of standard input; InputError when it is closed (``<&-``)."""
    if sys.stdin is None or not hasattr(sys.stdin, "buffer"):
        raise InputError("-: standard input is closed, nothing can be read from it")
    return sys.stdin.buffer.read()


def read_bytes(path: str) -> bytes:
    """The file's bytes (gunzipped when gzip), refusing empty, binary and HDF5 files."""
    name = display_name(path)
    if path == "-":
        if "-" not in _STDIN_CACHE:
            _STDIN_CACHE["-"] = stdin_bytes()
        data = _STDIN_CACHE["-"]
    else:
        check_exists(path)
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory; a directory input needs --format dir (one folder per class) "
                             "or uci (docword + vocab files)")
        with open(path, "rb") as fh:
            data = fh.read()
    return _checked_bytes(data, name, lambda: gzip.decompress(data))


def _checked_bytes(data: bytes, name: str, gunzip) -> bytes:
    """``data`` (or ``gunzip()`` of it when it starts with the gzip magic), refusing empty, binary
    and HDF5 input with one line naming ``name``."""
    if not data:
        raise InputError(f"{name}: file is empty, expected documents")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gunzip()
        except (OSError, EOFError) as exc:
            raise InputError(f"{name}: gzip data is corrupt or truncated ({exc})") from None
        if not data:
            raise InputError(f"{name}: file is empty after gunzip, expected documents")
    _check_head(data, name)
    return data


def _check_head(data: bytes, name: str) -> None:
    if data.startswith(HDF5_MAGIC):
        raise InputError(f"{name}: is an HDF5 file, expected text input (to reuse a corpus's vocabulary "
                         "pass it as --vocab-from)")
    if b"\x00" in data:
        raise InputError(f"{name}: contains NUL bytes: binary data (or UTF-16 text), expected UTF-8 text")


def read_head(path: str, n_bytes: int = 1 << 16) -> str:
    """The first ``n_bytes`` of the (gunzipped) file as text, for format detection only."""
    name = display_name(path)
    if path == "-":
        return read_text(path)[:n_bytes]
    check_exists(path)
    with open(path, "rb") as fh:
        data = fh.read(n_bytes)

    def gunzip_head() -> bytes:
        with gzip.open(path, "rb") as gz:
            return gz.read(n_bytes)

    data = _checked_bytes(data, name, gunzip_head)
    text = data.decode("utf-8", "replace")
    text = text[1:] if text.startswith("\ufeff") else text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def json_text_record(line: str, where: str, expected: str = "") -> tuple[dict, str]:
    """(record, its 'text' string) of one JSONL line; InputError starting with ``where`` otherwise
    (``expected`` is added to the invalid-JSON message, e.g. the record shape to give)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno}){expected}") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read (arrays or objects within each other)") from None
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object with a 'text' field, found {type(record).__name__}")
    text = record.get("text")
    if not isinstance(text, str):
        raise InputError(f"{where}: expected a string field 'text', found "
                         f"{'none' if text is None else type(text).__name__}")
    return record, text


def decode_text(data: bytes, name: str, warn_each: bool = True) -> tuple[str, bool]:
    """(text, fell back): UTF-8, else Latin-1 with a warning naming the first invalid byte's line
    and column (``warn_each`` False: the caller sums the fallbacks up in one warning)."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        if warn_each:
            line = data.count(b"\n", 0, exc.start) + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            warn(f"{name}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at line {line}, column {column}); "
                 "decoded as Latin-1 (ISO-8859-1)")
        return data.decode("latin-1"), True


def read_text(path: str, keep_bare_cr: bool = False) -> str:
    """Decoded text (decode_text: UTF-8, else Latin-1 with a warning; BOM dropped), \\r\\n turned
    into \\n; a bare \\r too unless ``keep_bare_cr`` and the text has \\n line ends (tab and tsv
    then refuse it with its line number)."""
    text, _ = decode_text(read_bytes(path), display_name(path))
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if not keep_bare_cr or "\n" not in text:
            text = text.replace("\r", "\n")
    return text


def _check_line(name: str, lineno: int, line: str) -> None:
    if "\r" in line:
        raise InputError(f"{name}:{lineno}: a carriage return (\\r) inside the line: lines end with \\n or "
                         "\\r\\n (remove the stray \\r; it would split this document in two)")


def _lines(text: str):
    """(1-based line number, line) for each line; split on \\n only (texts may hold \\f etc.)."""
    return enumerate(text.split("\n"), start=1)


def _base(path: str) -> str:
    return "stdin" if path == "-" else os.path.basename(path.rstrip("/")) or path


# ----------------------------------------------------------------------------- detection


def _first_lines(text: str, n: int) -> list[str]:
    out = []
    for _, line in _lines(text):
        if line.strip():
            out.append(line)
            if len(out) == n:
                break
    return out


def _looks_orange(lines: list[str]) -> bool:
    if len(lines) < 3:
        return False
    names, types = lines[0].split("\t"), lines[1].split("\t")
    return len(names) >= 2 and len(types) == len(names) and all(t.strip().lower() in ORANGE_TYPES for t in types)


def _looks_svmlight(line: str) -> bool:
    body = line.split("#", 1)[0].split()
    if not body:
        return False
    if _SVM_PAIR.match(body[0]) and ":" in body[0]:  # no target (multi-label with an empty label set)
        rest = body
    else:
        if not _SVM_TARGET.match(body[0]) or not body[0]:
            return False
        rest = body[1:]
    if rest and rest[0].startswith("qid:"):
        rest = rest[1:]
    return bool(rest) and all(_SVM_PAIR.match(tok) for tok in rest[:50])


def detect_format(path: str) -> str:
    """The format of one input, from its name, else its content (first non-blank lines)."""
    if path != "-" and os.path.isdir(path):
        names = os.listdir(path)
        if any(_UCI_DOCWORD.match(n) for n in names):
            return "uci"
        return "dir"
    base = _base(path)
    if _UCI_DOCWORD.match(base):
        return "uci"
    if _UCI_VOCAB.match(base):
        return "uci-vocab"
    stem = base[:-3] if base.endswith(".gz") else base
    ext = os.path.splitext(stem)[1].lower()
    if ext in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if ext in (".svm", ".svmlight", ".libsvm"):
        return "svmlight"
    if ext == ".csv":
        return "counts-csv"
    if ext == ".npz":
        return "npz"
    text = read_head(path)
    head = _first_lines(text, 3)
    if not head:
        raise InputError(f"{display_name(path)}: no documents (only blank lines)")
    if ext in (".tab", ".tsv"):
        return "tab" if _looks_orange(head) else "tsv"
    first = head[0].lstrip()
    if first.startswith("{"):
        return "jsonl"
    if _looks_svmlight(first):
        return "svmlight"
    if _CSV_LINE.match(first) and "\t" not in first:
        return "counts-csv"
    if "\t" in first:
        return "tab" if _looks_orange(head) else "tsv"
    raise InputError(f"{display_name(path)}: cannot tell its format from the name or the first line "
                     f"({first[:40]!r}); give --format tab|tsv|dir|jsonl|svmlight|uci|counts-csv")


# ----------------------------------------------------------------------------- text formats


def _label_list(value: str) -> list[str]:
    value = value.strip()
    return [value] if value else []


def read_tab(path: str) -> TextInput:
    """Orange .tab: names, types and flags lines, then rows."""
    name, base = display_name(path), _base(path)
    lines = list(_lines(read_text(path, keep_bare_cr=True)))
    header = [(n, line) for n, line in lines[:3]]
    if len(header) < 3:
        raise InputError(f"{name}: an Orange .tab file needs 3 header lines (names, types, flags), found {len(header)}")
    names = header[0][1].split("\t")
    types = header[1][1].split("\t")
    flags = header[2][1].split("\t") + [""] * len(names)
    if len(types) != len(names) or not all(t.strip().lower() in ORANGE_TYPES for t in types):
        raise InputError(f"{name}:2: expected Orange column types (d, c, s, string, text, ...) for the "
                         f"{len(names)} columns {names!r}, found {header[1][1][:60]!r}")
    class_cols = [j for j, fl in enumerate(flags[:len(names)]) if "class" in fl.strip().lower().split()]
    text_cols = [j for j, t in enumerate(types) if t.strip().lower() in ("s", "string", "text")
                 and j not in class_cols and flags[j].strip().lower() not in ("i", "ignore")]
    if not text_cols:
        raise InputError(f"{name}: no text column (expected a column of type 'string' or 'text' among {names!r})")
    class_col = class_cols[0] if class_cols else None
    texts, ids, labels = [], [], []
    width = len(names)
    for lineno, line in lines[3:]:
        if not line.strip():
            continue
        _check_line(name, lineno, line)
        cells = line.split("\t")
        if len(cells) < width:
            raise InputError(f"{name}:{lineno}: expected {width} tab-separated columns ({', '.join(names)}), found "
                             f"{len(cells)}{' (no tab)' if len(cells) == 1 else ''} in {line[:40]!r}")
        if len(cells) > width:  # tabs inside the last column's text
            cells = cells[:width - 1] + ["\t".join(cells[width - 1:])]
        texts.append(" ".join(cells[j] for j in text_cols) if len(text_cols) > 1 else cells[text_cols[0]])
        ids.append(f"{base}:{lineno}")
        if class_col is not None:
            labels.append(_label_list(cells[class_col]))
    return TextInput(texts, ids, labels if class_col is not None else None)


def read_tsv(path: str) -> TextInput:
    """``label<TAB>text`` lines; blank lines skipped."""
    name, base = display_name(path), _base(path)
    texts, ids, labels = [], [], []
    for lineno, line in _lines(read_text(path, keep_bare_cr=True)):
        if not line.strip():
            continue
        _check_line(name, lineno, line)
        label, tab, text = line.partition("\t")
        if not tab:
            raise InputError(f"{name}:{lineno}: expected 'label<TAB>text', found no tab in {line[:40]!r}")
        texts.append(text)
        ids.append(f"{base}:{lineno}")
        labels.append(_label_list(label))
    return TextInput(texts, ids, labels)


def read_dir(path: str) -> TextInput:
    """One folder per class, one file per document (decoded UTF-8, errors replaced)."""
    if not os.path.isdir(path):
        raise InputError(f"{path}: --format dir expects a directory with one folder per class")
    entries = sorted(os.scandir(path), key=lambda e: e.name)
    classes = [e for e in entries if e.is_dir() and not e.name.startswith(".")]
    loose = [e for e in entries if e.is_file() and not e.name.startswith(".")]
    if not classes:
        raise InputError(f"{path}: no class folders (expected one sub-folder per class holding one file per "
                         f"document; found {len(loose)} files and no folders)")
    texts, ids, labels = [], [], []
    latin1: list[str] = []
    for cls in classes:
        for root, dirs, files in os.walk(cls.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for fname in sorted(files):
                if fname.startswith("."):
                    continue
                full = os.path.join(root, fname)
                if not os.path.isfile(full):  # a FIFO would block the read for ever, a device never end
                    raise InputError(f"{full}: not a regular file (a FIFO, socket or device); --format dir reads "
                                     "one regular file per document")
                with open(full, "rb") as fh:
                    raw = fh.read()
                text, fell_back = decode_text(raw, full, warn_each=False)
                texts.append(text)
                ids.append(os.path.relpath(full, path).replace(os.sep, "/"))
                if fell_back:
                    latin1.append(ids[-1])
                labels.append([cls.name])
    if latin1:
        warn(f"{path}: {len(latin1)} of the files are not valid UTF-8 and were decoded as Latin-1 (ISO-8859-1), "
             f"e.g. {latin1[0]}")
    notes = [f"{path}: skipped {len(loose)} files outside class folders"] if loose else []
    if not texts:
        raise InputError(f"{path}: the {len(classes)} class folders hold no files (expected one file per document)")
    return TextInput(texts, ids, labels, notes=notes)


def _label_str(value, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{where}: a label must be a string or a number, found {json.dumps(value)[:40]}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def read_jsonl(path: str) -> TextInput:
    """JSON objects with ``text``, optional ``id``, ``label`` or ``labels``."""
    name, base = display_name(path), _base(path)
    texts, ids, labels = [], [], []
    any_label = multilabel = False
    for lineno, line in _lines(read_text(path)):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        record, text = json_text_record(line, where)
        if "label" in record and "labels" in record:
            raise InputError(f"{where}: has both 'label' and 'labels'; give one (labels: a list for multi-label)")
        if "labels" in record:
            value = record["labels"]
            if not isinstance(value, list):
                raise InputError(f"{where}: 'labels' must be a list, found {type(value).__name__}")
            doc_labels = list(dict.fromkeys(_label_str(v, where) for v in value))
            any_label = multilabel = True
        elif record.get("label") is not None:
            doc_labels = [_label_str(record["label"], where)]
            any_label = True
        else:
            doc_labels = []
        texts.append(text)
        ids.append(str(record["id"]) if record.get("id") is not None else f"{base}:{lineno}")
        labels.append(doc_labels)
    return TextInput(texts, ids, labels if any_label else None, multilabel=multilabel)


# ----------------------------------------------------------------------------- matrix formats


def read_query_groups(path: str) -> np.ndarray:
    """LightGBM-style group file: one positive integer (a query's number of rows) a line."""
    name = display_name(path)
    sizes = []
    for lineno, line in _lines(read_text(path)):
        s = line.strip()
        if not s:
            continue
        try:
            value = int(s)
        except ValueError:
            raise InputError(f"{name}:{lineno}: expected a query group size (a positive integer), found {s[:30]!r}") from None
        if value <= 0:
            raise InputError(f"{name}:{lineno}: a query group size must be positive, found {value}")
        sizes.append(value)
    if not sizes:
        raise InputError(f"{name}: no group sizes (expected one positive integer a line)")
    return np.asarray(sizes, dtype=np.int64)


class _Slow(Exception):
    """The vectorised svmlight parser met something it does not check itself: re-parse line by line."""


def _svmlight_fast(text: str, base: str):
    """Split lines in Python, parse every index:value token in bulk with numpy; any doubt -> _Slow."""
    targets: list[str] = []
    qids: list[str] = []
    lengths: list[int] = []
    feats: list[str] = []
    ids: list[str] = []
    has_qid = None
    for lineno, line in enumerate(text.split("\n"), start=1):
        if "#" in line:
            line = line.split("#", 1)[0]
        tokens = line.split()
        if not tokens:
            continue
        if ":" in tokens[0]:
            target, rest = "", tokens
        else:
            target, rest = tokens[0], tokens[1:]
        line_qid = bool(rest) and rest[0].startswith("qid:")
        if has_qid is None:
            has_qid = line_qid
        elif has_qid != line_qid:
            raise _Slow
        if line_qid:
            qids.append(rest[0][4:])
            rest = rest[1:]
        targets.append(target)
        lengths.append(len(rest))
        feats.extend(rest)
        ids.append(f"{base}:{lineno}")
    if any(not _SVM_TARGET.match(t) for t in set(targets)):
        raise _Slow
    # every feature token must be INDEX:VALUE with exactly one colon and both sides non-empty
    joined = " ".join(feats)
    if joined.count(":") != len(feats):
        raise _Slow
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (here: raises) when a token is not a number
        try:
            flat = np.fromstring(joined.replace(":", " "), dtype=np.float64, sep=" ") if feats else np.zeros(0)
            qid = np.array(qids, dtype=np.str_).astype(np.int64) if has_qid else None
        except (ValueError, OverflowError, DeprecationWarning):
            raise _Slow from None
    if len(flat) != 2 * len(feats):
        raise _Slow
    index = flat[0::2]
    if not np.all(index == np.floor(index)):  # indices are integers ("1.0" is read as 1)
        raise _Slow
    cols = index.astype(np.int64) - 1
    vals = np.ascontiguousarray(flat[1::2])
    if len(cols) and (cols.min() < 0 or cols.max() >= 2**31 - 1):
        raise _Slow
    if not np.all(np.isfinite(vals)):
        raise _Slow
    if qid is not None and len(qid) and (qid.min() < -2**31 or qid.max() >= 2**31):
        raise _Slow
    n_docs = len(targets)
    indptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=indptr[1:])
    n_features = int(cols.max()) + 1 if len(cols) else 0
    values = sp.csr_matrix((vals, cols.astype(np.int32), indptr), shape=(n_docs, n_features))
    values.sort_indices()
    if values.nnz > 1:
        same = np.diff(values.indices) == 0
        row_start = np.zeros(values.nnz, dtype=bool)
        row_start[indptr[:-1][np.diff(indptr) > 0]] = True
        if np.any(same & ~row_start[1:]):
            raise _Slow
    return targets, qid, values, ids, bool(has_qid)


def _svmlight_slow(text: str, name: str, base: str):
    """Line by line, with an error naming the line for anything malformed."""
    targets: list[str] = []
    qids: list[int] = []
    lengths: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    ids: list[str] = []
    has_qid = None
    for lineno, line in _lines(text):
        body = line.split("#", 1)[0]
        tokens = body.split()
        if not tokens:
            continue
        where = f"{name}:{lineno}"
        if ":" in tokens[0] and _SVM_PAIR.match(tokens[0]):
            target, rest = "", tokens
        else:
            target, rest = tokens[0], tokens[1:]
            if not _SVM_TARGET.match(target):
                raise InputError(f"{where}: malformed svmlight line: target {target[:30]!r} is not a number "
                                 "or a comma-separated list of labels")
        line_qid = rest and rest[0].startswith("qid:")
        if has_qid is None:
            has_qid = bool(line_qid)
        elif has_qid != bool(line_qid):
            raise InputError(f"{where}: malformed svmlight line: {'no qid' if has_qid else 'a qid'} here but "
                             f"{'every' if has_qid else 'no'} earlier line has one")
        if line_qid:
            try:
                q = int(rest[0][4:])
            except ValueError:
                raise InputError(f"{where}: malformed svmlight line: {rest[0][:30]!r} is not qid:INTEGER") from None
            if not -2**31 <= q < 2**31:
                raise InputError(f"{where}: qid {q} does not fit in int32")
            qids.append(q)
            rest = rest[1:]
        start = len(cols)
        seen = set()
        for tok in rest:
            key, colon, value = tok.partition(":")
            try:
                j = int(key)
                v = float(value)
            except ValueError:
                raise InputError(f"{where}: malformed svmlight line: feature {tok[:30]!r} is not INDEX:VALUE") from None
            if not colon or j < 1:
                raise InputError(f"{where}: malformed svmlight line: feature {tok[:30]!r}: indices start at 1")
            if j >= 2**31 - 1:
                raise InputError(f"{where}: malformed svmlight line: feature index {j} does not fit in int32")
            if j in seen:
                raise InputError(f"{where}: malformed svmlight line: feature index {j} appears twice")
            if not np.isfinite(v):
                raise InputError(f"{where}: malformed svmlight line: feature {j} has a non-finite value {value!r}")
            seen.add(j)
            cols.append(j - 1)
            vals.append(v)
        lengths.append(len(cols) - start)
        targets.append(target)
        ids.append(f"{base}:{lineno}")
    n_docs = len(targets)
    n_features = max(cols) + 1 if cols else 0
    indptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=indptr[1:])
    values = sp.csr_matrix((np.asarray(vals, dtype=np.float64), np.asarray(cols, dtype=np.int32), indptr),
                           shape=(n_docs, n_features))
    values.sort_indices()
    return targets, (np.asarray(qids, dtype=np.int64) if has_qid else None), values, ids, bool(has_qid)


LABELS_HEADER = "# gputext-labels: "  # gputext.io.export writes it: the names of numbered targets


def _named_targets(text: str, targets: list[str], name: str) -> list[str]:
    """Targets with their label names when the file starts with LABELS_HEADER (numbered labels
    of `corpus export --to svmlight`), else as they are."""
    if not text.startswith(LABELS_HEADER):
        return targets
    try:
        names = json.loads(text[len(LABELS_HEADER):text.find("\n")])
        return [",".join(names[int(p) - 1] for p in t.split(",") if p) if t not in ("", "0") else "" for t in targets]
    except (ValueError, IndexError, TypeError):
        raise InputError(f"{name}:1: the {LABELS_HEADER.strip()} line does not name every target's label "
                         "(a JSON list, target k is its k-th name)") from None


def read_svmlight(path: str, query_groups: str | None = None) -> MatrixInput:
    """svmlight/libsvm rows; qid from ``qid:`` or from a group-size file.

    A vectorised parser reads well-formed files; anything it doubts is re-read line by line by
    the checking parser, whose errors name the line.
    """
    name, base = display_name(path), _base(path)
    text = read_text(path)
    try:
        targets, qids, values, ids, has_qid = _svmlight_fast(text, base)
    except _Slow:
        targets, qids, values, ids, has_qid = _svmlight_slow(text, name, base)
    n_docs = len(targets)
    if n_docs == 0:
        raise InputError(f"{name}: no svmlight lines (only blank lines and comments)")
    n_features = values.shape[1]
    check_declared_shape(name, n_docs, n_features, values.nnz)
    check_float32(name, values.data)
    terms = np.array([f"f{j + 1}" for j in range(n_features)], dtype=object)
    qid = qids.astype(np.int32) if has_qid else None
    if query_groups is not None:
        if has_qid:
            raise InputError(f"{name} has qid: on its lines and --query-groups {query_groups} was given; use one")
        sizes = read_query_groups(query_groups)
        if int(sizes.sum()) != n_docs:
            raise InputError(f"--query-groups {query_groups}: group sizes add up to {int(sizes.sum())}, "
                             f"but {name} has {n_docs} rows")
        qid = np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int32), sizes)
    targets = _named_targets(text, targets, name)
    multilabel = any("," in t for t in targets)
    if qid is not None:
        if multilabel or any(t == "" for t in targets):
            bad = next(i for i, t in enumerate(targets) if "," in t or t == "")
            raise InputError(f"{ids[bad]}: learning-to-rank rows need one numeric relevance, found {targets[bad]!r}")
        relevance = np.asarray([float(t) for t in targets], dtype=np.float32)
        return MatrixInput(values, terms, ids, None, "features", qid=qid, relevance=relevance)
    labels = [[p for p in t.split(",") if p] for t in targets]
    named = text.startswith(LABELS_HEADER)  # label names, not relevance grades
    relevance = None if named or multilabel or any(t == "" for t in targets) else \
        np.asarray([float(t) for t in targets], np.float32)
    return MatrixInput(values, terms, ids, labels, "features", multilabel=multilabel, relevance=relevance)


def _uci_vocab_path(docword: str) -> str:
    m = _UCI_DOCWORD.match(os.path.basename(docword))
    if not m:
        raise InputError(f"{docword}: a UCI bag-of-words file must be named docword.NAME.txt[.gz]")
    folder = os.path.dirname(docword)
    for candidate in (f"vocab.{m.group(1)}.txt", f"vocab.{m.group(1)}.txt.gz"):
        if os.path.exists(os.path.join(folder, candidate)):
            return os.path.join(folder, candidate)
    raise InputError(f"{docword}: its vocabulary file {os.path.join(folder, f'vocab.{m.group(1)}.txt')} is missing")


def read_uci(path: str, vocab_path: str | None = None) -> MatrixInput:
    """UCI bag-of-words: docword (D, W, NNZ header + triples) and vocab (one word a line)."""
    if os.path.isdir(path):
        found = sorted(n for n in os.listdir(path) if _UCI_DOCWORD.match(n))
        if len(found) != 1:
            raise InputError(f"{path}: expected exactly one docword.NAME.txt[.gz] file in the folder, found {len(found)}")
        path = os.path.join(path, found[0])
    vocab_path = vocab_path or _uci_vocab_path(path)
    words = [w.strip() for w in read_text(vocab_path).split("\n")]
    while words and not words[-1]:
        words.pop()
    text = read_text(path)
    head = text.split("\n", 3)
    if len(head) < 3:
        raise InputError(f"{path}: expected 3 header lines (D, W, NNZ), found {len(head)}")
    try:
        n_docs, n_words, nnz = (int(h.strip()) for h in head[:3])
    except ValueError:
        raise InputError(f"{path}: expected 3 header lines holding integers D, W, NNZ, found "
                         f"{[h.strip()[:15] for h in head[:3]]!r}") from None
    if n_words != len(words):
        raise InputError(f"{path}: header says W = {n_words} words but {vocab_path} has {len(words)} lines")
    check_declared_shape(path, n_docs, n_words, nnz)
    if len(set(words)) != len(words):
        seen: dict[str, int] = {}
        line = next(i for i, w in enumerate(words) if seen.setdefault(w, i) != i)
        raise InputError(f"{vocab_path}:{line + 1}: the word {words[line]!r} is also on line {seen[words[line]] + 1}: "
                         "a vocabulary names each term once")
    body = head[3] if len(head) > 3 else ""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            triples = np.array(body.split(), dtype=np.int64) if body.strip() else np.zeros(0, np.int64)
        except (ValueError, DeprecationWarning):
            raise InputError(f"{path}: the body after the header must hold integer 'doc word count' triples") from None
    if len(triples) != 3 * nnz:
        raise InputError(f"{path}: header says NNZ = {nnz} but the body holds {len(triples) / 3:g} triples")
    triples = triples.reshape(-1, 3)
    doc, word, count = triples[:, 0] - 1, triples[:, 1] - 1, triples[:, 2]
    if nnz and (doc.min() < 0 or doc.max() >= n_docs):
        raise InputError(f"{path}: a docID is outside 1..D = 1..{n_docs}")
    if nnz and (word.min() < 0 or word.max() >= n_words):
        raise InputError(f"{path}: a wordID is outside 1..W = 1..{n_words}")
    if nnz and count.min() < 0:
        raise InputError(f"{path}: a count is negative")
    values = sp.csr_matrix((count.astype(np.float64), (doc, word)), shape=(n_docs, n_words))  # duplicates summed
    values.sort_indices()
    ids = [str(i + 1) for i in range(n_docs)]
    return MatrixInput(values, np.array(words, dtype=object), ids, None, "counts")


def read_counts_csv(path: str) -> MatrixInput:
    """``label,count,count,...`` lines (no header); terms named t1..tW."""
    name, base = display_name(path), _base(path)
    text = read_text(path)
    rows = [(n, line) for n, line in _lines(text) if line.strip()]
    if not rows:
        raise InputError(f"{name}: no rows")
    labels, bodies = [], []
    for lineno, line in rows:
        label, comma, body = line.partition(",")
        if not comma:
            raise InputError(f"{name}:{lineno}: expected 'label,count,count,...', found no comma")
        labels.append(label.strip())
        bodies.append(body)
    width = bodies[0].count(",") + 1
    try:
        flat = np.array(",".join(bodies).split(","), dtype=np.float64)
    except ValueError:
        flat = None
    if flat is None or len(flat) != width * len(rows):
        for (lineno, _), body in zip(rows, bodies):
            cells = body.split(",")
            if len(cells) != width:
                raise InputError(f"{name}:{lineno}: expected {width} counts after the label (as on the first "
                                 f"line), found {len(cells)}")
            for k, cell in enumerate(cells):
                try:
                    float(cell)
                except ValueError:
                    raise InputError(f"{name}:{lineno}: column {k + 2} is {cell.strip()[:20]!r}, expected a number") from None
    dense = flat.reshape(len(rows), width)
    if not np.all(np.isfinite(dense)):
        r = int(np.nonzero(~np.all(np.isfinite(dense), axis=1))[0][0])
        raise InputError(f"{name}:{rows[r][0]}: non-finite count")
    values = sp.csr_matrix(dense)
    values.sort_indices()
    terms = np.array([f"t{j + 1}" for j in range(width)], dtype=object)
    ids = [f"{base}:{n}" for n, _ in rows]
    return MatrixInput(values, terms, ids, [_label_list(v) for v in labels], "counts")
