"""Caption files written safely: atomic sidecars, the journal a killed run resumes from (a torn last line dropped,
other options refused), and metadata.jsonl merged with its other rows and columns kept."""

from __future__ import annotations

import json

import pytest

from dit_lora.captioning.writer import JOURNAL, METADATA, CaptionStore, caption_path
from dit_lora.core.errors import UserError

OPTIONS = {"model": "m", "prompt": {"image": "p"}, "prefix": ""}


def _store(root, metadata=False, options=OPTIONS):
    return CaptionStore(root, extension=".txt", metadata=metadata, options=dict(options))


def _media(root, *names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    return [(name, root / name) for name in names]


def test_sidecars_are_written_beside_each_file_and_the_journal_records_them(tmp_path):
    (a, pa), (b, pb) = _media(tmp_path, "a.png", "sub/b.mp4")
    store = _store(tmp_path)
    store.write([(a, pa, "one"), (b, pb, "two")])
    assert caption_path(pa, ".txt").read_text() == "one" and (tmp_path / "sub" / "b.txt").read_text() == "two"
    lines = (tmp_path / JOURNAL).read_text().splitlines()
    assert json.loads(lines[0]) == {"options": OPTIONS}
    assert [json.loads(line)["file_name"] for line in lines[1:]] == ["a.png", "sub/b.mp4"]
    assert store.has_caption(a, pa) and not store.has_caption("c.png", tmp_path / "c.png")
    store.finish({}, complete=True)
    assert not (tmp_path / JOURNAL).exists()  # a complete run leaves no journal
    assert not list(tmp_path.glob(".*.tmp"))  # nor temporary files


def test_an_incomplete_run_keeps_its_journal_and_the_next_resumes_from_it(tmp_path):
    (a, pa), (b, pb) = _media(tmp_path, "a.png", "b.png")
    first = _store(tmp_path)
    first.write([(a, pa, "one")])
    first.finish({}, complete=False)
    again = _store(tmp_path)
    again.resume()
    assert again.resumed == {"a.png": "one"} and not again.dropped_torn_line


def test_a_torn_last_line_is_dropped_and_its_file_captioned_again(tmp_path):
    (a, pa), (b, pb) = _media(tmp_path, "a.png", "b.png")
    store = _store(tmp_path)
    store.write([(a, pa, "one"), (b, pb, "two")])
    store.finish({}, complete=False)
    journal = tmp_path / JOURNAL
    journal.write_bytes(journal.read_bytes()[:-7])  # killed while writing b's line
    again = _store(tmp_path)
    again.resume()
    assert again.resumed == {"a.png": "one"} and again.dropped_torn_line
    again.write([(b, pb, "two")])  # the resumed run's line follows a whole one
    third = _store(tmp_path)
    third.resume()
    assert third.resumed == {"a.png": "one", "b.png": "two"}


def test_a_journal_of_other_options_is_refused_naming_them(tmp_path):
    (a, pa), = _media(tmp_path, "a.png")
    store = _store(tmp_path)
    store.write([(a, pa, "one")])
    store.finish({}, complete=False)
    other = _store(tmp_path, options={**OPTIONS, "prefix": "sks, "})
    with pytest.raises(UserError, match=r"--prefix was '', now 'sks, '.*delete that file"):
        other.resume()


def test_an_unreadable_journal_is_one_paragraph(tmp_path):
    (tmp_path / JOURNAL).write_text("not json\n")
    with pytest.raises(UserError, match="not a captioning journal"):
        _store(tmp_path).resume()


def test_metadata_is_merged_keeping_other_rows_and_columns(tmp_path):
    (a, pa), (b, pb) = _media(tmp_path, "a.png", "b.png")
    rows = [{"file_name": "a.png", "text": "old", "score": 3}, {"file_name": "z.png", "text": "other"}]
    (tmp_path / METADATA).write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = _store(tmp_path, metadata=True)
    assert store.has_caption(a, pa) and not store.has_caption(b, pb)
    store.write([(a, pa, "new"), (b, pb, "bee")])
    assert (tmp_path / METADATA).read_text().count("\n") == 2  # nothing merged before the end
    assert not caption_path(pa, ".txt").exists()
    store.finish({"a.png": "new", "b.png": "bee"}, complete=True)
    merged = [json.loads(line) for line in (tmp_path / METADATA).read_text().splitlines()]
    assert merged == [{"file_name": "a.png", "text": "new", "score": 3}, {"file_name": "z.png", "text": "other"},
                      {"file_name": "b.png", "text": "bee"}]


def test_a_metadata_line_that_is_not_a_row_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / METADATA).write_text('{"file_name": "a.png", "text": "x"}\n[1, 2]\n')
    with pytest.raises(UserError, match=r"line 2 of .*metadata.jsonl"):
        _store(tmp_path, metadata=True)


def test_a_metadata_file_where_captions_would_go_unread_is_refused(tmp_path):
    (tmp_path / METADATA).write_text('{"file_name": "a.png", "text": "x"}\n')
    with pytest.raises(UserError, match="metadata.jsonl is read by training before caption files.*Pass --metadata"):
        _store(tmp_path)
    _store(tmp_path, metadata=True)  # the root's own: --metadata adds to it
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / METADATA).write_text('{"file_name": "b.png", "text": "y"}\n')
    with pytest.raises(UserError, match=r"sub/metadata.jsonl is read .*a subfolder's wins.*Merge it into the root's"):
        _store(tmp_path, metadata=True)
    (tmp_path / "sub" / METADATA).unlink()
    (tmp_path / METADATA).unlink()
    (tmp_path / "metadata.csv").write_text("file_name,text\na.png,x\n")
    for metadata in (False, True):
        with pytest.raises(UserError, match="metadata.csv is read by training.*Convert it to metadata.jsonl"):
            _store(tmp_path, metadata=metadata)
    (tmp_path / "metadata.csv").unlink()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / METADATA).write_text("{}\n")  # a hidden folder is never listed: not a concern
    _store(tmp_path)


def test_with_metadata_a_files_own_caption_file_is_copied_into_a_row(tmp_path):
    (a, pa), (b, pb) = _media(tmp_path, "a.png", "b.png")
    (tmp_path / "a.txt").write_text("my own words\n")
    store = _store(tmp_path, metadata=True)
    assert store.has_caption(a, pa) and not store.has_caption(b, pb)
    assert store.copied == {"a.png": "my own words"}
    store.finish({**store.copied, "b.png": "made"}, complete=True)
    rows = [json.loads(line) for line in (tmp_path / METADATA).read_text().splitlines()]
    assert rows == [{"file_name": "a.png", "text": "my own words"}, {"file_name": "b.png", "text": "made"}]


def test_metadata_rows_are_matched_as_the_listing_names_files_and_need_text(tmp_path):
    (a, pa), (b, pb), (c, pc) = _media(tmp_path, "a.png", "sub/b.png", "c.png")
    rows = [{"file_name": "./a.png", "text": "x"}, {"file_name": "sub//b.png", "text": "  "}, {"file_name": "c.png"}]
    (tmp_path / METADATA).write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = _store(tmp_path, metadata=True)
    assert store.has_caption(a, pa) and not store.has_caption(b, pb) and not store.has_caption(c, pc)
    (tmp_path / METADATA).write_bytes(b'{"file_name": "a.png", "text": "\xff"}\n')
    with pytest.raises(UserError, match="is not UTF-8 text"):
        _store(tmp_path, metadata=True)


def test_an_empty_journal_is_no_run_to_resume_and_the_header_is_on_disk_first(tmp_path):
    (a, pa), = _media(tmp_path, "a.png")
    (tmp_path / JOURNAL).write_bytes(b"")  # killed between creating it and its first line
    store = _store(tmp_path)
    store.resume()
    assert store.resumed == {} and not (tmp_path / JOURNAL).exists()
    store._open_journal()  # the header is synced when the journal is made, before any caption line
    assert json.loads((tmp_path / JOURNAL).read_text()) == {"options": OPTIONS}
    store.release()


def test_a_second_run_on_the_folder_is_refused_while_the_first_holds_it(tmp_path):
    first = _store(tmp_path)
    first.lock()
    with pytest.raises(UserError, match="another dit-lora caption is writing captions"):
        _store(tmp_path).lock()
    first.release()
    again = _store(tmp_path)
    again.lock()  # free once the first let go
    again.release()
    assert not list(tmp_path.iterdir())  # nothing left behind


def test_odd_file_names_are_written_as_escaped_json(tmp_path):
    key = "caf\udce9.png"  # a name that is not UTF-8 on disk, as os.listdir gives it
    store = _store(tmp_path, metadata=True)
    store.finish({key: "un café"}, complete=True)
    (row,) = [json.loads(line) for line in (tmp_path / METADATA).read_text(encoding="ascii").splitlines()]
    assert row == {"file_name": key, "text": "un café"}
