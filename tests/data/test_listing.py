"""data/listing.py: the listing's lines through one logger, said by the main process, put in a data set's terms only
inside ``rewritten`` and only in its own context, with ``sys.stdout`` never replaced."""

from __future__ import annotations

import logging
import sys
import threading

from dit_lora.data import listing


def test_the_main_process_says_a_line_as_a_print_would(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    listing.say("found 3 images (50% captioned)")
    assert capsys.readouterr().out == "found 3 images (50% captioned)\n"
    monkeypatch.setenv("RANK", "1")
    listing.say("not from another process")
    assert capsys.readouterr().out == ""
    assert listing.LOGGER.propagate is False and listing.LOGGER.level == logging.INFO


def test_a_rewrite_holds_inside_its_context_for_the_listings_lines_only(capsys):
    stdout = sys.stdout
    with listing.rewritten(str.upper):
        assert sys.stdout is stdout
        listing.say("read with --caption_extension .txt")
        print("another line")
    listing.say("after")
    assert capsys.readouterr().out == "READ WITH --CAPTION_EXTENSION .TXT\nanother line\nafter\n"


def test_another_threads_lines_are_not_rewritten(capsys):
    started, release = threading.Event(), threading.Event()

    def other():
        started.set()
        release.wait(5)
        listing.say("from the other thread")

    thread = threading.Thread(target=other)
    thread.start()
    started.wait(5)
    with listing.rewritten(lambda line: "rewritten: " + line):
        release.set()
        thread.join(5)
        listing.say("from this one")
    out = capsys.readouterr().out
    assert "from the other thread\n" in out and "rewritten: from the other thread" not in out
    assert "rewritten: from this one\n" in out


def test_installing_twice_adds_no_second_handler():
    listing._install()
    assert sum(isinstance(h, listing.Printed) for h in listing.LOGGER.handlers) == 1
    assert sum(isinstance(f, listing.InTerms) for f in listing.LOGGER.filters) == 1
