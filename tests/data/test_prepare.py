"""data/prepare.py: from a config to what the loop trains on, for images (a pooling stand-in family, CPU).

Clips go through the same flow in tests/data/test_video_prepare.py; the screening of bad files in
tests/data/test_validation.py and tests/data/test_preflight.py; the images' buckets in test_image_media.py, the
latent cache in test_prepare_cache.py.
"""

from __future__ import annotations

import json

import pytest

from dit_lora.core.errors import UserError
from dit_lora.data import batches as batch_lib
from dit_lora.data.prepare import prepare_data, report_lines
from dit_lora.output.names import QUARANTINE_FILE
from pooling_data import accelerator, bucketed_pooling, config, pooling_images, write_images


@pytest.fixture
def images(tmp_path):
    return write_images(tmp_path / "data")


def test_without_the_cache_images_are_decoded_each_step(tmp_path, images):
    family = pooling_images()
    data = prepare_data(config(tmp_path, images, cache_latents=False), family, None, accelerator())
    assert not data.cached and isinstance(data.dataset, batch_lib.RawImageDataset) and family.encoders.encoded == []
    assert data.collate is batch_lib.collate and data.groups is None


def test_bad_images_are_quarantined_and_too_many_stop_the_run(tmp_path, images):
    (images / "2.png").write_bytes(b"broken")
    cfg = config(tmp_path, images, max_bad_samples_fraction=0.3)
    data = prepare_data(cfg, pooling_images(), None, accelerator())
    assert [s.key for s in data.samples] == ["0.png", "1.png", "3.png"]
    (entry,) = json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())
    assert entry["key"] == "2.png" and entry == data.quarantine[0]
    (images / "1.png").write_bytes(b"")
    with pytest.raises(UserError, match="--max_bad_samples_fraction") as err:
        prepare_data(cfg, pooling_images(), None, accelerator())
    assert QUARANTINE_FILE in str(err.value)
    assert len(json.loads((tmp_path / "out" / QUARANTINE_FILE).read_text())) == 2  # written before stopping


def test_every_caption_file_that_is_not_utf8_stops_the_run_in_one_paragraph(tmp_path):
    """Training's side of the issue's finding (reported one file per run): all three encodings named at once."""
    from data_files import bad_caption_folder

    data = bad_caption_folder(tmp_path / "data")
    with pytest.raises(UserError) as err:
        prepare_data(config(tmp_path, data), pooling_images(), None, accelerator())
    text = str(err.value)
    assert text.startswith(f"3 caption file(s) in --train_data_dir `{data}` are not UTF-8 text")
    assert all(name in text for name in ("latin1.txt", "shift_jis.txt", "utf16_no_bom.txt")) and "\n" not in text


def test_images_without_captions_beyond_the_text_length_get_no_report_lines(tmp_path, images):
    """report_lines on image samples: the caption lines, none for an empty list or short captions."""
    from dit_lora.data.image_media import ImageMedia

    media = ImageMedia(config(tmp_path, images), pooling_images())
    assert report_lines(media, [], None) == []
    assert report_lines(media, media.list_samples(), None) == []
