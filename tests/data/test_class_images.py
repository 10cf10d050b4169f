"""data/class_images.py: prior preservation's missing class images are generated with the base model, seeded by
batch, only the missing ones (a stopped run makes the rest), the user's own images counted first and never
touched; what cannot be generated is refused before anything loads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.data import class_images
from dit_lora.registry import get_spec

ONE_PROCESS = SimpleNamespace(is_main_process=True, num_processes=1, process_index=0)


def _cfg(folder, **values) -> TrainConfig:
    options = dict(with_prior_preservation=True, class_data_dir=str(folder), class_prompt="a photo of dog",
                   num_class_images=5, sample_batch_size=2, seed=3)
    options.update(values)
    return TrainConfig.for_family("sana", **options)


class FakeSamples:
    """A sampler drawing flat images whose colour is its seed and position: which batch made a file shows."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str]] = []

    def validation_inputs(self, comps, validation):
        return {"prompt": validation.validation_prompt}

    def generate(self, comps, model, cond, cfg, seed):
        count = cfg.validation.num_validation_images
        self.calls.append((seed, count, cond["prompt"]))
        return [Image.new("RGB", (8, 8), (seed % 251, i, 0)) for i in range(count)]


def _spec(samples):
    return SimpleNamespace(name="sana", samples=samples, video_frames=None)


def test_the_missing_images_are_made_in_seeded_batches_and_a_stopped_run_makes_the_rest(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    Image.new("RGB", (8, 8)).save(folder / "mine.jpg")  # the user's own: counts first, never touched
    mine = (folder / "mine.jpg").read_bytes()
    cfg = _cfg(folder)
    assert class_images.missing(cfg.data) == [0, 1, 2, 3]
    samples, lines = FakeSamples(), []
    class_images.generate(cfg, _spec(samples), SimpleNamespace(model=None), ONE_PROCESS, lines.append)
    assert sorted(p.name for p in folder.iterdir()) == ["class_00000.png", "class_00001.png", "class_00002.png",
                                                          "class_00003.png", "mine.jpg"]
    assert [c[1:] for c in samples.calls] == [(2, "a photo of dog"), (2, "a photo of dog")]
    assert samples.calls[0][0] != samples.calls[1][0]  # each batch its own seed
    assert "holds 1 of --num_class_images 5; generating 4" in lines[0]
    first = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert (folder / "mine.jpg").read_bytes() == mine and class_images.missing(cfg.data) == []
    # a stopped run: image 2 never written; started again, only its batch is made again, and the same image
    (folder / "class_00002.png").unlink()
    again = FakeSamples()
    class_images.generate(cfg, _spec(again), SimpleNamespace(model=None), ONE_PROCESS, lines.append)
    assert [c[0] for c in again.calls] == [samples.calls[1][0]]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == first
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_nothing_is_made_when_the_folder_holds_enough(tmp_path):
    folder = tmp_path / "class"
    (folder / "sub").mkdir(parents=True)
    for i in range(5):
        Image.new("RGB", (8, 8)).save(folder / "sub" / f"{i}.png")
    assert class_images.missing(_cfg(folder).data) == []
    assert class_images.missing(_cfg(folder, with_prior_preservation=False).data) == []


@pytest.mark.parametrize(
    ("family", "values", "words"),
    [
        ("sana", {"class_prompt": None}, "there is no --class_prompt to make them from"),
        ("wan", {}, "trains clips"),
        ("sana", {"blocks_to_swap": 1}, "--blocks_to_swap keeps blocks off the device"),
    ],
)
def test_images_that_cannot_be_made_are_refused_before_loading(tmp_path, family, values, words):
    options = {"with_prior_preservation": True, "class_data_dir": str(tmp_path / "none"),
               "class_prompt": "a photo of dog", "num_class_images": 3, **values}
    cfg = TrainConfig.for_family(family, **options)
    with pytest.raises(UserError) as err:
        class_images.check(cfg.data, cfg.performance, get_spec(family))
    text = str(err.value)
    assert words in text and "holds 0 of the --num_class_images 3" in text and "\n" not in text, text


def test_what_the_listing_skips_does_not_count_and_the_users_images_come_first(tmp_path):
    folder = tmp_path / "class"
    (folder / "__MACOSX").mkdir(parents=True)
    for name in ("dog1.jpg", "dog2.jpg", "dog1_mask.png", "__MACOSX/._dog1.jpg", ".hidden.png"):
        Image.new("RGB", (8, 8)).save(folder / name, format="PNG")
    Image.new("RGB", (8, 8)).save(folder / "class_00000.png")
    cfg = _cfg(folder, num_class_images=4)
    assert class_images.missing(cfg.data) == [1]  # 2 of the user's, then class_00000 present: one more to make
    samples = [SimpleNamespace(key=k) for k in ("class_00000.png", "class_00001.png", "dog1.jpg", "sub/class_1.png")]
    assert [s.key for s in class_images.users_first(samples)] == ["dog1.jpg", "sub/class_1.png", "class_00000.png",
                                                                  "class_00001.png"]


def test_generating_under_fsdp2_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(class_images, "decide_engine", lambda: SimpleNamespace(name="fsdp2"))
    with pytest.raises(UserError, match="under FSDP2 the blocks wait in host memory"):
        cfg = _cfg(tmp_path / "none")
        class_images.check(cfg.data, cfg.performance, get_spec("sana"))
