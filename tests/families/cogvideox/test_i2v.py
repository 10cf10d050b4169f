"""families/cogvideox/i2v.py: what image-to-video changes (the conditioning input, the validation image in the run's
state, the card).

Encoding on a real tiny pipeline and the loss are pinned in tests/families/cogvideox/test_spec.py.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family


def config(**kw) -> TrainConfig:
    values = dict(family="cogvideox_i2v", pretrained_model_name_or_path="THUDM/CogVideoX-5b-I2V", height=32, width=48,
                  max_num_frames=9, first_frame_noise=False)
    values.update(kw)
    return TrainConfig.for_family(**values)


def test_model_input_puts_the_image_latents_at_frame_zero_on_the_channel_axis():
    family = get_family("cogvideox_i2v")
    noisy = torch.randn(2, 3, 4, 2, 2)
    image = torch.randn(2, 1, 4, 2, 2)
    out = family.loss.model_input(noisy, {"image_latents": image}, torch.Generator().manual_seed(0), config())
    assert out.shape == (2, 3, 8, 2, 2)
    assert torch.equal(out[:, :, :4], noisy) and torch.equal(out[:, :1, 4:], image)
    assert not out[:, 1:, 4:].any()  # zeros after the first frame


def test_first_frame_noise_and_dropout_change_only_the_conditioning():
    family = get_family("cogvideox_i2v")
    noisy, image = torch.zeros(2, 3, 4, 2, 2), torch.ones(2, 1, 4, 2, 2)
    noised = family.loss.model_input(noisy, {"image_latents": image}, torch.Generator().manual_seed(0),
                                config(first_frame_noise=True))
    assert not torch.equal(noised[:, :1, 4:], image) and (noised[:, :1, 4:] - image).abs().max() < 0.5
    dropped = family.loss.model_input(noisy, {"image_latents": image}, torch.Generator().manual_seed(0),
                                 config(noised_image_dropout=1.0))
    assert not dropped.any()


def test_the_validation_image_is_fitted_to_the_video_size_and_kept_in_the_components(tmp_path):
    family = get_family("cogvideox_i2v")
    Image.new("RGB", (200, 100), (10, 200, 30)).save(tmp_path / "first.png")
    cfg = config(validation_image=str(tmp_path / "first.png"))
    comps = Components(model=torch.nn.Linear(1, 1))
    family.setup.inspect_samples(comps, cfg, samples=[])
    image = comps.state.validation_image
    assert image.size == (48, 32) and image.getpixel((24, 16)) == (10, 200, 30)
    assert family.samples.call_kwargs(cfg, None, 2, comps)["image"] == [image, image]
    assert family.card.card_settings(cfg)["noised_image_dropout"] == 0.0 and not family.card.card_settings(cfg)[
        "first_frame_noise"]


def test_a_missing_or_unreadable_validation_image_is_named(tmp_path):
    family = get_family("cogvideox_i2v")
    with pytest.raises(UserError, match="--validation_image `.*nope.png` does not exist"):
        family.model.check_validation_image(config(validation_image=str(tmp_path / "nope.png")))
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="cannot be read as an image"):
        family.setup.inspect_samples(Components(model=None), config(validation_image=str(tmp_path / "bad.png")), [])
    with pytest.raises(UserError, match="needs a conditioning image: set --validation_image"):
        family.setup.inspect_samples(Components(model=None), config(), [])
