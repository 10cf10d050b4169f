"""The caption checks printed at a run's end: lengths, empty, cut, looping and shared captions."""

from __future__ import annotations

from dit_lora.captioning.checks import CaptionFacts, caption_report, repeated_phrase


def test_a_phrase_said_three_times_in_a_row_is_found():
    assert repeated_phrase("A cat on a mat, a cat on a mat, a cat on a mat.") in ("a cat on a mat", "cat on a mat a")
    assert repeated_phrase("red red red") is None  # one word: emphasis, not a loop
    assert repeated_phrase("a dog runs, a dog runs, then sleeps") is None  # twice is not a loop
    assert repeated_phrase("") is None


def test_the_report_names_each_kind_of_problem_once():
    facts = [CaptionFacts("a.png", "a red square on white"), CaptionFacts("b.png", ""),
             CaptionFacts("c.mp4", "the the square moves moves", finished=False),
             CaptionFacts("d.png", "x y x y x y", removed=3), CaptionFacts("e.png", "a red square on white")]
    lines = caption_report(facts, max_new_tokens=7)
    assert lines[0] == "captions: 5, 0 to 6 words (median 5)"
    assert [line.split(":")[0] for line in lines[1:]] == ["empty", "cleaned", "cut", "repeats", "same"]
    assert "b.png" in lines[1] and "3 in all" in lines[2] and "(d.png)" in lines[2]
    assert "--max_new_tokens 7" in lines[3] and "d.png" in lines[4] and "a.png, e.png" in lines[5]


def test_good_captions_give_only_the_length_line():
    facts = [CaptionFacts(f"{i}.png", f"caption number {i} of a scene") for i in range(5)]
    assert caption_report(facts, max_new_tokens=50) == ["captions: 5, 6 to 6 words (median 6)"]
    assert caption_report([], max_new_tokens=50) == []
