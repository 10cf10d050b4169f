"""families/wan/demo.py: the tiny offline Wan pipelines (2.1 T2V/I2V, 2.2 TI2V-5B, T2V-A14B, I2V-A14B) build, reload
with their Hub repo's pipeline class, generate, and carry each variant's structure."""

from __future__ import annotations

import json
import types

import pytest
from offline import no_network
import torch

from dit_lora.families.wan.demo import (
    TINY_WAN_GEOMETRY,
    WAN_DEMO_VARIANTS,
    build_tiny_wan_components,
    build_tiny_wan_pipeline,
    get_tiny_wan_config,
    wan_pipeline_class,
)

I2V = {"2.1-i2v", "2.2-i2v-a14b"}
A14B = {"2.2-t2v-a14b": 0.875, "2.2-i2v-a14b": 0.9}  # boundary_ratio: Wan2.2 wan/configs/wan_{t2v,i2v}_A14B.py
FLOW_SHIFT = {"2.2-ti2v": 5.0}  # scripts/convert_wan_to_diffusers.py: TI2V 5.0, the others 3.0


@pytest.fixture(scope="module", autouse=True)
def _offline():
    yield from no_network()


@pytest.fixture(scope="module", autouse=True)
def _ftfy():
    """diffusers 0.42.1's WanImageToVideoPipeline calls ``ftfy.fix_text`` on every prompt without checking that
    ftfy is installed (``pipeline_wan_i2v.py``, ``basic_clean``; ``pipeline_wan.py`` checks). Without ftfy, an
    identity stands in, which is what ftfy does to the plain ASCII prompts here."""
    from diffusers.pipelines.wan import pipeline_wan_i2v

    patch = pytest.MonkeyPatch()
    if not hasattr(pipeline_wan_i2v, "ftfy"):
        patch.setattr(pipeline_wan_i2v, "ftfy", types.SimpleNamespace(fix_text=lambda text: text), raising=False)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan")
    rng_before = torch.get_rng_state()
    paths = {v: build_tiny_wan_pipeline(root / v, variant=v) for v in WAN_DEMO_VARIANTS}
    assert torch.equal(torch.get_rng_state(), rng_before)  # the builds seed a forked RNG
    return paths


def _generate(pipe, variant):
    from PIL import Image

    g = TINY_WAN_GEOMETRY
    kwargs = dict(
        prompt="a red square moving left to right",
        height=g["height"],
        width=g["width"],
        num_frames=g["num_frames"],
        num_inference_steps=2,
        output_type="pt",
        generator=torch.Generator().manual_seed(0),
    )
    if variant in I2V:
        kwargs["image"] = Image.new("RGB", (g["width"], g["height"]), (200, 30, 30))
    return pipe(**kwargs).frames


@pytest.mark.parametrize("variant", WAN_DEMO_VARIANTS)
def test_variant_reloads_with_its_pipeline_class_and_generates(built, variant):
    path = built[variant]
    index = json.loads((path / "model_index.json").read_text())
    expected = "WanImageToVideoPipeline" if variant in I2V else "WanPipeline"
    assert index["_class_name"] == expected == wan_pipeline_class(variant).__name__
    assert index["boundary_ratio"] == A14B.get(variant)
    assert index["expand_timesteps"] is (variant == "2.2-ti2v")

    pipe = wan_pipeline_class(variant).from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    assert type(pipe).__name__ == expected
    sc = pipe.scheduler.config
    assert type(pipe.scheduler).__name__ == "UniPCMultistepScheduler"
    assert sc.prediction_type == "flow_prediction" and sc.use_flow_sigmas
    assert sc.flow_shift == FLOW_SHIFT.get(variant, 3.0)

    frames = _generate(pipe, variant)
    g = TINY_WAN_GEOMETRY
    assert frames.shape == (1, g["num_frames"], 3, g["height"], g["width"])
    assert torch.isfinite(frames).all()
    assert frames.std() > 0.01  # not a constant clip


@pytest.mark.parametrize("variant", WAN_DEMO_VARIANTS)
def test_transformer_channels_follow_the_vae(built, variant):
    config = json.loads((built[variant] / "transformer" / "config.json").read_text())
    vae = json.loads((built[variant] / "vae" / "config.json").read_text())
    z = vae["z_dim"]
    assert config["out_channels"] == z
    assert config["in_channels"] == (2 * z + 4 if variant in I2V else z)  # noise + mask + image latents
    assert len(vae["latents_mean"]) == len(vae["latents_std"]) == z
    assert all(s > 0 for s in vae["latents_std"])
    # RoPE splits head_dim into t/h/w parts of 2 * (head_dim // 6) for h and w; each must be even and non-zero.
    assert config["attention_head_dim"] // 6 >= 1
    g = TINY_WAN_GEOMETRY
    assert (g["num_frames"] - 1) % vae["scale_factor_temporal"] == 0
    assert g["height"] % (vae["scale_factor_spatial"] * config["patch_size"][1]) == 0


def test_ti2v_has_the_wan22_vae(built):
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(built["2.2-ti2v"], subfolder="vae")
    c = vae.config
    assert (c.z_dim, c.is_residual, c.patch_size, c.scale_factor_spatial) == (48, True, 2, 16)
    assert (c.in_channels, c.out_channels) == (12, 12)  # 3 channels x 2 x 2 patch
    g = TINY_WAN_GEOMETRY
    clip = torch.zeros(1, 3, g["num_frames"], g["height"], g["width"])
    with torch.no_grad():
        latents = vae.encode(clip).latent_dist.mean
    assert latents.shape == (1, 48, (g["num_frames"] - 1) // 4 + 1, g["height"] // 16, g["width"] // 16)


@pytest.mark.parametrize("variant", sorted(A14B))
def test_a14b_has_two_different_experts(built, variant):
    pipe = wan_pipeline_class(variant).from_pretrained(built[variant])
    assert pipe.transformer is not None and pipe.transformer_2 is not None
    assert pipe.config.boundary_ratio == A14B[variant]
    same = {k: v for k, v in pipe.transformer.config.items() if k != "_name_or_path"}
    assert same == {k: v for k, v in pipe.transformer_2.config.items() if k != "_name_or_path"}
    one, two = pipe.transformer.state_dict(), pipe.transformer_2.state_dict()
    assert any(not torch.equal(a, two[k]) for k, a in one.items())
    if variant in I2V:
        assert pipe.image_encoder is None and pipe.image_processor is None  # Wan 2.2 I2V has no CLIP


def test_wan21_i2v_has_a_clip_image_encoder(built):
    from transformers import CLIPImageProcessor

    pipe = wan_pipeline_class("2.1-i2v").from_pretrained(built["2.1-i2v"])
    tc = pipe.transformer.config
    assert tc.image_dim == pipe.image_encoder.config.hidden_size  # 1280 = CLIP ViT-H/14 width
    assert tc.added_kv_proj_dim == tc.num_attention_heads * tc.attention_head_dim  # 5120 = transformer width
    assert pipe.transformer_2 is None and pipe.config.boundary_ratio is None
    assert isinstance(pipe.image_processor, CLIPImageProcessor) or "CLIPImageProcessor" in type(
        pipe.image_processor
    ).__name__
    from PIL import Image

    size = pipe.image_encoder.config.image_size
    inputs = pipe.image_processor(images=Image.new("RGB", (50, 40)), return_tensors="pt")
    assert inputs.pixel_values.shape == (1, 3, size, size)


def test_tokenizer_reloads_with_auto_tokenizer(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built["2.1-t2v"], subfolder="tokenizer")
    ids = tok("a red square moving left to right").input_ids
    assert ids[-1] == tok.eos_token_id and tok.unk_token_id not in ids
    assert len(ids) == 8  # one piece per demo word, then </s>
    assert tok.model_max_length == 512  # Wan's text_len


def test_rebuilding_rewrites_nothing_and_other_builds_replace_only_ours(built, tmp_path):
    path = built["2.1-t2v"]
    files = sorted(p for p in path.rglob("*") if p.is_file())
    mtimes = [p.stat().st_mtime_ns for p in files]
    assert build_tiny_wan_pipeline(path, variant="2.1-t2v") == path
    assert sorted(p for p in path.rglob("*") if p.is_file()) == files
    assert [p.stat().st_mtime_ns for p in files] == mtimes

    # A folder someone else wrote is refused; a build of ours with other arguments is replaced (like the
    # CogVideoX and Sana builders: dit_lora.data.synthetic.build_directory_atomically).
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "weights.bin").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        build_tiny_wan_pipeline(foreign, variant="2.1-t2v")
    assert (foreign / "weights.bin").read_bytes() == b"x"

    ours = build_tiny_wan_pipeline(tmp_path / "ours", variant="2.2-ti2v")
    build_tiny_wan_pipeline(ours, variant="2.1-t2v", layers=2)
    marker = json.loads((ours / "dit_lora_tiny.json").read_text())
    assert marker["variant"] == "2.1-t2v" and marker["layers"] == 2
    assert json.loads((ours / "transformer" / "config.json").read_text())["num_layers"] == 2
    assert json.loads((ours / "vae" / "config.json").read_text())["z_dim"] == 16


def test_components_are_seeded_and_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    first = build_tiny_wan_components("2.2-t2v-a14b", seed=3)
    again = build_tiny_wan_components("2.2-t2v-a14b", seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    for name in ("transformer", "transformer_2", "vae", "text_encoder"):
        for (key, a), b in zip(first[name].state_dict().items(), again[name].state_dict().values()):
            assert torch.equal(a, b), (name, key)
    assert first["vae"].config.latents_std == again["vae"].config.latents_std
    other = build_tiny_wan_components("2.2-t2v-a14b", seed=4)["transformer"].state_dict()
    assert any(not torch.equal(a, other[k]) for k, a in first["transformer"].state_dict().items())
    half = build_tiny_wan_components("2.1-t2v", dtype=torch.bfloat16)
    assert half["transformer"].dtype == half["vae"].dtype == half["text_encoder"].dtype == torch.bfloat16


def test_unknown_variants_and_depths_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown Wan demo variant '2.1-flf2v'.*2.2-ti2v"):
        build_tiny_wan_pipeline(tmp_path / "x", variant="2.1-flf2v")
    with pytest.raises(ValueError, match="layers must be at least 1"):
        build_tiny_wan_pipeline(tmp_path / "x", layers=0)
    assert not (tmp_path / "x").exists()
    config = get_tiny_wan_config("2.1-t2v", layers=3)
    assert config["transformer"]["num_layers"] == 3
    config["vae"]["dim_mult"].append(8)
    assert get_tiny_wan_config("2.1-t2v")["vae"]["dim_mult"] == [1, 2, 4, 4]  # a fresh copy each time
