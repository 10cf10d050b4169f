"""``dit_lora/data/samples.py``: a listed image (:class:`RawSample`) and the text helpers both listings share; the
folder listing (``data/sources.py``) re-exports them."""

from __future__ import annotations

from PIL import Image

from dit_lora.data import samples, sources
from dit_lora.data.samples import RawSample, caption_value, name_some, suggest_caption_column


def test_sources_re_exports_the_same_objects():
    for name in ("RawSample", "caption_value", "name_some", "suggest_caption_column", "MAX_NAMED"):
        assert getattr(sources, name) is getattr(samples, name)


def test_name_some_names_the_first_few_then_counts():
    assert name_some(["a", "b"]) == "a, b"
    assert name_some([str(i) for i in range(8)]) == "0, 1, 2, 3, 4 and 3 more"


def test_caption_value_takes_the_first_of_a_list_and_strips():
    assert caption_value(["  first ", "second"]) == "first"
    assert caption_value([]) is None and caption_value(None) is None


def test_suggest_caption_column_names_a_caption_like_column_not_the_excluded_one():
    assert suggest_caption_column(["image", "Prompt"], exclude="image") == " (probably --caption_column Prompt)"
    assert suggest_caption_column(["image", "text"], exclude="text") == ""


def test_cache_key_is_the_content_id_plus_the_bucket(tmp_path):
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tmp_path / "a.png")
    sample = RawSample(key="a.png", caption="cap", path=str(tmp_path / "a.png"))
    assert sample.cache_key() == sample.content_id() and len(sample.content_id()) == 64
    bucketed = RawSample(key="a.png", caption="cap", path=str(tmp_path / "a.png"), bucket=(16, 32))
    assert bucketed.cache_key() == f"{sample.content_id()}:16x32"


def test_conditions_are_part_of_the_content_id(tmp_path):
    """An edit sample's control images: a changed one is a new cache entry; a sample without any keeps its id."""
    image = tmp_path / "a.png"
    Image.new("RGB", (4, 4), (1, 2, 3)).save(image)
    control = tmp_path / "c.png"
    Image.new("RGB", (4, 4), (9, 9, 9)).save(control)
    plain = RawSample(key="a.png", caption="x", path=str(image))
    with_control = RawSample(key="a.png", caption="x", path=str(image), conditions=(str(control),))
    before = with_control.content_id()
    assert before != plain.content_id()
    Image.new("RGB", (4, 4), (0, 0, 0)).save(control)
    assert with_control.content_id() != before and plain.content_id() == plain.content_id()
