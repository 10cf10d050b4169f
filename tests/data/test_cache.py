"""data/cache.py: the per-sample latent + caption cache (naming, building, checking an entry), with stand-in encoders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dit_lora.data import cache


@dataclass
class Sample:
    key: str
    caption: str
    bucket: str = ""

    def cache_key(self) -> str:
        return self.key + self.bucket


def _samples(n=5):
    return [Sample(f"img{i}.png", f"caption {i}") for i in range(n)]


def _pixels(i: int) -> torch.Tensor:
    return torch.full((3, 4, 6), float(i)) + torch.arange(6.0)  # varies along the width: a flip shows


def _encode_images(px: torch.Tensor) -> torch.Tensor:
    return px[:, :2] * 2.0  # (B, 2, H, W)


def _encode_prompts(captions: list[str]) -> dict[str, torch.Tensor]:
    ids = torch.tensor([[float(c.split()[-1])] * 3 for c in captions])
    return {"prompt_embeds": ids, "prompt_attention_mask": torch.ones(len(captions), 3, dtype=torch.long)}


def _build(tmp_path, samples, todo=None, **kwargs):
    files = cache.cache_files(tmp_path, "ns", samples)
    logs: list[str] = []
    options = {"encode_images": _encode_images, "encode_prompts": _encode_prompts, "load_pixels": _pixels,
               "random_flip": False, "batch_size": 2, "log": logs.append, **kwargs}
    failed = cache.build_cache(samples, files, list(range(len(samples))) if todo is None else todo, **options)
    return files, failed, logs


def test_default_root_follows_hf_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert cache.default_cache_root() == tmp_path / "dit-lora" / "cache"
    monkeypatch.delenv("HF_HOME")
    assert cache.default_cache_root() == Path.home() / ".cache" / "dit-lora" / "cache"


def test_namespace_is_stable_and_changes_with_any_setting():
    identity = {"model": "m", "resolution": 64, "flip": True}
    assert cache.cache_namespace(identity) == cache.cache_namespace(dict(reversed(list(identity.items()))))
    assert len(cache.cache_namespace(identity)) == 20
    assert cache.cache_namespace({**identity, "resolution": 128}) != cache.cache_namespace(identity)


def test_file_names_are_per_sample_and_bucket(tmp_path):
    a, b = Sample("x.mp4", "c"), Sample("x.mp4", "c", bucket=":9x64x64")
    files = cache.cache_files(tmp_path, "ns", [a, b, a])
    assert files[0] == files[2] != files[1] and files[0].parent == tmp_path / "ns"
    assert files[0].name == cache.cache_file_name("ns", "x.mp4") and files[0].suffix == ".safetensors"
    assert cache.cache_file_name("other", "x.mp4") != files[0].name


def test_build_writes_each_sample_with_its_own_caption(tmp_path):
    samples = _samples(5)
    files, failed, logs = _build(tmp_path, samples)
    assert failed == {} and logs == []
    for i, path in enumerate(files):
        entry = load_file(path)
        assert torch.equal(entry["latents"], _pixels(i)[:2] * 2.0)
        assert torch.equal(entry["prompt_embeds"], torch.full((3,), float(i)))  # never another sample's caption
        assert cache.verify_cache_file(path) is None


def test_random_flip_stores_the_flipped_latents(tmp_path):
    files, failed, _ = _build(tmp_path, _samples(2), random_flip=True,
                              encode_images=lambda px: {"latents": px[:, :2], "image_latents": px[:, 2:]})
    entry = load_file(files[1])
    assert set(entry) == {"latents", "latents_flipped", "image_latents", "image_latents_flipped", "prompt_embeds",
                          "prompt_attention_mask"}
    assert torch.equal(entry["latents_flipped"], _pixels(1)[:2].flip(-1))


def test_only_todo_is_encoded(tmp_path):
    files, failed, _ = _build(tmp_path, _samples(4), todo=[1, 3])
    assert [f.exists() for f in files] == [False, True, False, True] and failed == {}
    assert _build(tmp_path / "none", _samples(2), todo=[])[1] == {}


def test_undecodable_and_non_finite_samples_are_reported_not_cached(tmp_path):
    def load(i):
        if i == 1:
            raise OSError("truncated\nfile")
        return torch.full((3, 4, 6), float("nan")) if i == 2 else _pixels(i)

    files, failed, logs = _build(tmp_path, _samples(4), load_pixels=load)
    assert set(failed) == {1, 2} and "could not be decoded" in failed[1] and "OSError: truncated file" in failed[1]
    assert failed[2] == "decoded pixels are not finite"
    assert [f.exists() for f in files] == [True, False, False, True]
    assert any(line.startswith("skipping img1.png") for line in logs)


def test_non_finite_encoding_is_recomputed_alone_once(tmp_path):
    calls = []

    def encode(px):
        calls.append(px.shape[0])
        out = px[:, :2].clone()
        if px.shape[0] > 1:
            out[0] = float("nan")  # the batch poisons its first sample; alone it is fine
        return out

    files, failed, logs = _build(tmp_path, _samples(2), encode_images=encode)
    assert failed == {} and calls == [2, 1] and cache.verify_cache_file(files[0]) is None
    assert any("finite when recomputed alone" in line for line in logs)

    files, failed, _ = _build(tmp_path / "bad", _samples(2), encode_images=lambda px: px[:, :2] * float("inf"))
    assert set(failed) == {0, 1} and "also when recomputed" in failed[0]
    assert not any(f.exists() for f in files)


def test_encode_images_must_give_latents():
    assert set(cache.as_encoding(torch.zeros(1))) == {"latents"}
    with pytest.raises(TypeError, match=r"got \['x'\]"):
        cache.as_encoding({"x": torch.zeros(1)})
    with pytest.raises(TypeError, match="got list"):
        cache.as_encoding([torch.zeros(1)])


def test_inspect_names_what_is_wrong_with_an_entry(tmp_path):
    good = tmp_path / "good.safetensors"
    save_file({"latents": torch.zeros(2, 3), "mask": torch.ones(2, dtype=torch.long)}, good)
    assert cache.inspect_cache_file(good) == (None, {"latents": (2, 3), "mask": (2,)})
    nan = tmp_path / "nan.safetensors"
    save_file({"latents": torch.tensor([float("nan"), float("inf")])}, nan)
    assert cache.verify_cache_file(nan) == "cached tensors are not finite: latents has NaN/Inf"
    no_latents = tmp_path / "none.safetensors"
    save_file({"prompt_embeds": torch.zeros(2)}, no_latents)
    assert cache.verify_cache_file(no_latents) == "cache file has no 'latents' tensor"
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(good.read_bytes()[:20])
    assert cache.verify_cache_file(broken).startswith("cache file is unreadable (")
    assert cache.verify_cache_file(tmp_path / "missing.safetensors") == "cache file is missing"


def test_repeats_sharing_a_cache_file_are_encoded_once(tmp_path):
    calls: list[int] = []

    def load(i):
        calls.append(i)
        if i == 2:
            raise OSError("broken")
        return _pixels(i)

    samples = [Sample("a.png", "caption 0"), Sample("a.png", "caption 0"), Sample("b.png", "caption 1"),
               Sample("b.png", "caption 1")]
    files, failed, _ = _build(tmp_path, samples, load_pixels=load)
    assert calls == [0, 2] and files[0] == files[1] and files[0].exists()
    assert set(failed) == {2, 3}  # the repeat of a failed image fails with it


def test_caching_without_a_terminal_prints_progress_lines_with_rate_and_eta(tmp_path, capsys):
    """pytest's stdout is no terminal: plain lines (every tenth of the work), each with its rate; ETA until the
    last, which says how long it took. Rank 0 only."""
    _build(tmp_path, _samples(20))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("caching")]
    assert lines[0].startswith("caching 2/20 samples, ")
    assert all("samples/s" in line or "s/sample" in line for line in lines)
    assert all("ETA " in line for line in lines[:-1]) and lines[-1].startswith("caching 20/20 samples")
    assert "took " in lines[-1] and len(lines) == 10
    _build(tmp_path / "rank1", _samples(4), rank=1, world=2)
    assert "caching" not in capsys.readouterr().out  # only rank 0 reports its share


def test_cache_files_hash_a_repeated_file_once(tmp_path, monkeypatch):
    """Each kohya copy names its first's entry, and the file is read (hashed) once, not once per copy."""
    from dit_lora.data.sources import RawSample

    (tmp_path / "a.png").write_bytes(b"image a")
    (tmp_path / "b.png").write_bytes(b"image b")
    first_a, first_b = (RawSample(key=n, caption="c", path=str(tmp_path / n)) for n in ("a.png", "b.png"))
    samples = [first_a, *(RawSample(key="a.png", caption="c", path=str(tmp_path / "a.png"), repeat=r)
                          for r in (1, 2)), first_b]
    hashed: list[str] = []
    real = RawSample.content_id
    monkeypatch.setattr(RawSample, "content_id", lambda self: hashed.append(self.key) or real(self))
    files = cache.cache_files(tmp_path / "cache", "ns", samples)
    assert files[0] == files[1] == files[2] != files[3]
    assert hashed == ["a.png", "b.png"]


def test_encode_samples_replaces_the_caption_encoder_and_is_given_the_samples(tmp_path):
    """A family whose conditioning reads more of a sample than its caption (an edit model's control images)."""
    given = []

    def encode_samples(chosen):
        given.append([s.key for s in chosen])
        return {"prompt_embeds": torch.tensor([[float(len(s.key))] for s in chosen])}

    samples = _samples(3)
    files, failed, _ = _build(tmp_path, samples, encode_samples=encode_samples,
                              encode_prompts=lambda captions: pytest.fail("encode_prompts is not called"))
    assert not failed and given == [["img0.png", "img1.png"], ["img2.png"]]
    assert load_file(str(files[2]))["prompt_embeds"].tolist() == [8.0]
