"""families/ltx2/info.py: the video VAE's compression and the audio geometry read from a folder's configs, the
published checkpoint's from the catalogue."""

from __future__ import annotations

from ltx2_configs import ltx2_cfg

from dit_lora.families.ltx2.info import LTX2Task, read_info, vae_compression


def test_compression_is_the_configs_or_the_blocks():
    published = {"spatial_compression_ratio": 32, "temporal_compression_ratio": 8, "patch_size": 4}
    assert vae_compression(published) == (8, 32)
    built = {"patch_size": 2, "patch_size_t": 1, "downsample_type": ["spatiotemporal", "spatiotemporal"],
             "spatio_temporal_scaling": [True, True], "spatial_compression_ratio": None}
    assert vae_compression(built) == (4, 8)
    # LTX-2's blocks without the written ratios give the same 8x / 32x the class computes
    assert vae_compression({"patch_size": 4}) == (8, 32)


def test_the_tiny_folder_reads_as_the_model_it_is(tiny_folder, tiny):
    info = read_info(ltx2_cfg(tiny_folder).model)
    vae = tiny["vae"]
    assert (info.vae_temporal, info.vae_spatial) == (vae.temporal_compression_ratio, vae.spatial_compression_ratio)
    assert info.z_dim == 8 and info.patch == (1, 1, 1) and info.layers == 2
    assert info.audio.sample_rate == 16000 and info.audio.mel_bins == 16 and info.audio_width == 8
    assert info.audio.token_width == tiny["transformer"].config.audio_in_channels


def test_the_published_checkpoint_reads_from_the_catalogue():
    cfg = ltx2_cfg("Lightricks/LTX-2")
    info = read_info(cfg.model)
    assert (info.z_dim, info.vae_spatial, info.vae_temporal, info.layers) == (128, 32, 8, 48)
    assert info.audio.latents_per_second == 25 and info.audio.token_width == info.audio_width == 128
    task = LTX2Task(name="ltx2", task="t2v", pipeline_class_name="LTX2Pipeline")
    assert task.video_buckets(cfg)[0] == (121, 512, 768) and task.model_fps(cfg.model) == 24
