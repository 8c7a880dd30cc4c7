"""One reader per input format, and format detection, on small files written here."""
import gzip
import json

import numpy as np
import pytest

from gputext.errors import InputError
from gputext.io.readers import (detect_format, read_counts_csv, read_dir, read_jsonl, read_svmlight, read_tab,
                                read_tsv, read_uci)

ORANGE = "Category\tText\nd\tstring\nclass\t\nsport\tThe match was won\npolitics\tvote\tcounted today\n\nsport\t\n"


def write(path, text, mode="w"):
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def test_orange_tab_reads_class_and_text_columns_keeping_tabs_in_text(tmp_path):
    docs = read_tab(write(tmp_path / "a.tab", ORANGE))
    assert docs.texts == ["The match was won", "vote\tcounted today", ""]
    assert docs.labels == [["sport"], ["politics"], ["sport"]]
    assert docs.doc_ids == ["a.tab:4", "a.tab:5", "a.tab:7"]


def test_orange_tab_with_class_column_second_and_two_text_columns(tmp_path):
    text = "title\tlabel\tbody\nstring\td\tstring\n\tclass\t\nHello\tx\tworld\n"
    docs = read_tab(write(tmp_path / "b.tab", text))
    assert docs.texts == ["Hello world"] and docs.labels == [["x"]]


def test_orange_tab_bad_types_line_names_line_2(tmp_path):
    with pytest.raises(InputError, match=r"b.tab:2: expected Orange column types"):
        read_tab(write(tmp_path / "b.tab", "a\tb\nfoo\tbar\n\t\nx\ty\n"))


def test_tsv_reads_label_and_text_and_reports_a_line_without_tab(tmp_path):
    docs = read_tsv(write(tmp_path / "a.tsv", "pos\tgood film\r\n\r\n\tno label here\nneg\tbad\tfilm\n"))
    assert docs.texts == ["good film", "no label here", "bad\tfilm"]
    assert docs.labels == [["pos"], [], ["neg"]]
    with pytest.raises(InputError, match=r"a.tsv:2: expected 'label<TAB>text'"):
        read_tsv(write(tmp_path / "a.tsv", "pos\tgood\njust text\n"))


def test_directory_tree_one_folder_per_class_decodes_bad_bytes(tmp_path):
    root = tmp_path / "news"
    (root / "sci.space" / "sub").mkdir(parents=True)
    (root / "rec.autos").mkdir()
    (root / ".hidden").mkdir()
    (root / "sci.space" / "1").write_bytes(b"From: a@b\n\nOrbit \xff\xfe latin1 caf\xe9")
    (root / "sci.space" / "sub" / "2").write_text("nested")
    (root / "sci.space" / ".DS_Store").write_text("skip me")
    (root / "rec.autos" / "9").write_text("engine")
    (root / "README").write_text("loose file")
    docs = read_dir(str(root))
    assert docs.doc_ids == ["rec.autos/9", "sci.space/1", "sci.space/sub/2"]
    assert docs.labels == [["rec.autos"], ["sci.space"], ["sci.space"]]
    # not UTF-8: decoded as Latin-1 (every byte one character; one warning for the folder)
    assert docs.texts[1].endswith("latin1 caf\u00e9") and docs.texts[1].startswith("From: a@b")
    assert any("skipped 1 files outside class folders" in n for n in docs.notes)


def test_directory_without_class_folders_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(InputError, match="no class folders"):
        read_dir(str(tmp_path))


def test_jsonl_single_and_multi_label_and_ids(tmp_path):
    lines = [{"text": "a b", "id": 7, "label": "x"}, {"text": "c"}, {"text": "d", "labels": ["y", "x", "y"]},
             {"text": "e", "label": 3.0}]
    docs = read_jsonl(write(tmp_path / "d.jsonl", "\n".join(json.dumps(r) for r in lines) + "\n\n"))
    assert docs.doc_ids == ["7", "d.jsonl:2", "d.jsonl:3", "d.jsonl:4"]
    assert docs.labels == [["x"], [], ["y", "x"], ["3"]]
    assert docs.multilabel


@pytest.mark.parametrize("line,message", [
    ('{"text": "a"', r"d.jsonl:2: invalid JSON"),
    ('{"id": 1}', r"d.jsonl:2: expected a string field 'text'"),
    ('[1, 2]', r"d.jsonl:2: expected a JSON object"),
    ('{"text": "a", "label": "x", "labels": ["x"]}', "both 'label' and 'labels'"),
    ('{"text": "a", "labels": "x"}', "'labels' must be a list"),
])
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    with pytest.raises(InputError, match=message):
        read_jsonl(write(tmp_path / "d.jsonl", '{"text": "ok"}\n' + line + "\n"))


def test_svmlight_with_qid_comments_and_unsorted_features(tmp_path):
    text = "# header comment\n2 qid:10 3:0.5 1:1.25 # doc a\n0 qid:10 2:-1\n1 qid:11 1:3e-1\n"
    m = read_svmlight(write(tmp_path / "r.svm", text))
    np.testing.assert_array_equal(m.values.toarray(), [[1.25, 0, 0.5], [0, -1, 0], [0.3, 0, 0]])
    assert list(m.terms) == ["f1", "f2", "f3"]
    np.testing.assert_array_equal(m.qid, [10, 10, 11])
    np.testing.assert_array_equal(m.relevance, np.array([2, 0, 1], np.float32))
    assert m.doc_ids == ["r.svm:2", "r.svm:3", "r.svm:4"] and m.kind == "features"


def test_svmlight_query_groups_assign_qids(tmp_path):
    data = write(tmp_path / "r.train", "1 1:1\n0 2:1\n0 1:2\n")
    groups = write(tmp_path / "r.train.query", "2\n1\n")
    m = read_svmlight(data, groups)
    np.testing.assert_array_equal(m.qid, [1, 1, 2])
    with pytest.raises(InputError, match="group sizes add up to 4, but .* has 3 rows"):
        read_svmlight(data, write(tmp_path / "bad.query", "2\n2\n"))


def test_svmlight_without_qid_is_classification_with_multilabel_targets(tmp_path):
    m = read_svmlight(write(tmp_path / "c.svm", "1,3 1:1\n2 2:1\n 3:1\n"))
    assert m.labels == [["1", "3"], ["2"], []] and m.multilabel and m.qid is None


@pytest.mark.parametrize("body,message", [
    ("1 1:1\n0 0:2\n", r"x.svm:2: .*indices start at 1"),
    ("1 1:1\n0 2:1 2:3\n", r"x.svm:2: .*feature index 2 appears twice"),
    ("1 1:1\n0 2:abc\n", r"x.svm:2: .*feature '2:abc' is not INDEX:VALUE"),
    ("1 1:1\nzz 2:1\n", r"x.svm:2: .*target 'zz'"),
    ("1 qid:1 1:1\n0 2:1\n", r"x.svm:2: .*no qid here"),
    ("1 qid:1 1:1\n\n0 qid:x 2:1\n", r"x.svm:3: .*qid:INTEGER"),
])
def test_svmlight_malformed_lines_are_reported_with_line_numbers(tmp_path, body, message):
    with pytest.raises(InputError, match=message):
        read_svmlight(write(tmp_path / "x.svm", body))


def write_uci(tmp_path, compress):
    body = "3\n4\n4\n1 1 2\n1 4 1\n3 2 5\n3 1 1\n"
    name = tmp_path / ("docword.toy.txt.gz" if compress else "docword.toy.txt")
    if compress:
        name.write_bytes(gzip.compress(body.encode()))
    else:
        name.write_text(body)
    (tmp_path / "vocab.toy.txt").write_text("apple\nbanana\ncherry\ndate\n")
    return str(name)


@pytest.mark.parametrize("compress", [False, True])
def test_uci_bag_of_words_plain_and_gzip(tmp_path, compress):
    m = read_uci(write_uci(tmp_path, compress))
    np.testing.assert_array_equal(m.values.toarray(), [[2, 0, 0, 1], [0, 0, 0, 0], [1, 5, 0, 0]])
    assert list(m.terms) == ["apple", "banana", "cherry", "date"] and m.doc_ids == ["1", "2", "3"]


def test_uci_header_must_agree_with_vocab_and_body(tmp_path):
    (tmp_path / "vocab.t.txt").write_text("a\nb\n")
    with pytest.raises(InputError, match="W = 3 words but .* has 2 lines"):
        read_uci(write(tmp_path / "docword.t.txt", "1\n3\n1\n1 1 1\n"))
    (tmp_path / "vocab.t.txt").write_text("a\nb\nc\n")
    with pytest.raises(InputError, match="NNZ = 2 but the body holds 1 triples"):
        read_uci(write(tmp_path / "docword.t.txt", "1\n3\n2\n1 1 1\n"))
    with pytest.raises(InputError, match="wordID is outside"):
        read_uci(write(tmp_path / "docword.t.txt", "1\n3\n1\n1 4 1\n"))


def test_counts_csv_without_trailing_newline(tmp_path):
    m = read_counts_csv(write(tmp_path / "c.data", "1,0,2,0\n3,1,0,0"))
    np.testing.assert_array_equal(m.values.toarray(), [[0, 2, 0], [1, 0, 0]])
    assert m.labels == [["1"], ["3"]] and list(m.terms) == ["t1", "t2", "t3"]
    with pytest.raises(InputError, match=r"c.data:2: expected 3 counts after the label"):
        read_counts_csv(write(tmp_path / "c.data", "1,0,2,0\n3,1,0\n"))
    with pytest.raises(InputError, match=r"c.data:2: column 3 is 'x'"):
        read_counts_csv(write(tmp_path / "c.data", "1,0,2,0\n3,1,x,0\n"))


def test_format_detection_by_name_and_content(tmp_path):
    assert detect_format(write(tmp_path / "a.tab", ORANGE)) == "tab"
    assert detect_format(write(tmp_path / "b.tab", "x\thello\n")) == "tsv"
    assert detect_format(write(tmp_path / "noext", ORANGE)) == "tab"
    assert detect_format(write(tmp_path / "c", "pos\tgood\n")) == "tsv"
    assert detect_format(write(tmp_path / "d", '{"text": "a"}\n')) == "jsonl"
    assert detect_format(write(tmp_path / "rank.train", "0 qid:1 1:0.5 7:1\n")) == "svmlight"
    assert detect_format(write(tmp_path / "e", "1 4:1 9:2\n")) == "svmlight"
    assert detect_format(write(tmp_path / "CNAE-9.data", "1,0,0,1\n")) == "counts-csv"
    assert detect_format(write_uci(tmp_path / "", False)) == "uci"
    assert detect_format(str(tmp_path)) == "uci"  # a folder holding a docword file
    gz = tmp_path / "g.tsv.gz"
    gz.write_bytes(gzip.compress(b"pos\tgood\n"))
    assert detect_format(str(gz)) == "tsv"
    with pytest.raises(InputError, match="cannot tell its format"):
        detect_format(write(tmp_path / "plain", "just some words\n"))


@pytest.mark.parametrize("with_qid", [False, True])
def test_vectorised_and_line_by_line_svmlight_parsers_agree(with_qid):
    from gputext.io.readers import _svmlight_fast, _svmlight_slow
    rng = np.random.default_rng(7)
    lines = ["# a comment line", ""]
    for i in range(300):
        cols = rng.choice(np.arange(1, 60), size=int(rng.integers(0, 12)), replace=False)
        feats = " ".join(f"{c}:{v}" for c, v in zip(cols, rng.choice(["0.5", "-1.25e-3", "3", "1e2", ".75", "0"], len(cols))))
        qid = f" qid:{i // 7}" if with_qid else ""
        comment = "  # doc" if i % 5 == 0 else ""
        lines.append(f"{int(rng.integers(0, 5))}{qid} {feats}{comment}".rstrip())
    text = "\n".join(lines)
    fast, slow = _svmlight_fast(text, "x"), _svmlight_slow(text, "x", "x")
    assert fast[0] == slow[0] and fast[3] == slow[3] and fast[4] == slow[4]
    assert fast[2].shape == slow[2].shape and (fast[2] != slow[2]).nnz == 0
    if with_qid:
        np.testing.assert_array_equal(fast[1], slow[1])
