"""SANA-Video checkpoints (``SanaVideoPipeline`` / ``SanaImageToVideoPipeline``, ``Efficient-Large-Model/*``).

Where each fact was checked (no network at run time; copies of published facts):
- Hub id and use: diffusers' ``docs/source/en/api/pipelines/sana_video.md`` and both pipelines' examples load
  ``Efficient-Large-Model/SANA-Video_2B_480p_diffusers`` (the image-to-video pipeline from the same repo), generate
  81 frames at 480 x 832 and export at 16 fps; NVlabs ``asset/docs/sana_video.md`` uses the same id.
- transformer/config.json: what diffusers' ``scripts/convert_sana_video_to_diffusers.py`` writes for the 2B 480p
  model (``transformer_kwargs``: 20 heads x 112, 20 layers, cross-attention 20 x 112 into 2240, caption 2304,
  ``mlp_ratio`` 3.0, ``sample_size`` 30, ``patch_size`` (1, 2, 2), ``qk_norm`` across heads, RoPE 1024); NVlabs
  ``configs/sana_video_config/Sana_2000M_480px_AdamW_fsdp.yaml`` agrees (``SanaMSVideo_2000M_P2_D20``,
  ``linear_head_dim`` 112, ``mlp_ratio`` 3, ``wan_rope``).
- vae/config.json: the script loads ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``'s VAE: ``AutoencoderKLWan``'s defaults
  (base_dim 96, z_dim 16, the 16 ``latents_mean`` / ``latents_std`` of ``Wan2.1_VAE``); NVlabs' config names
  ``vae_type: WanVAE``, ``vae_stride`` (4, 8, 8).
- scheduler/scheduler_config.json: the script's default ``--scheduler_type flow-dpm_solver``:
  ``DPMSolverMultistepScheduler(flow_shift=8.0, use_flow_sigmas=True, prediction_type="flow_prediction")``
  (image-to-video conversions: ``FlowMatchEulerDiscreteScheduler(shift=8.0)``).
- text_encoder/config.json: ``Efficient-Large-Model/gemma-2-2b-it``'s decoder (``Gemma2Model``), as in Sana;
  300 tokens (NVlabs ``model_max_length``, the pipelines' default).
- Training facts: NVlabs' config above (``flow_shift`` 3.0 for training, ``inference_flow_shift`` 7.0,
  ``weighting_scheme: logit_normal`` 0 / 1, batch 1, 81 frames at 480p). SimpleTuner's SANA-Video model
  (``simpletuner/helpers/models/sanavideo/model.py``) trains the attention projections at batch 1; no published
  recipe states a LoRA rank or learning rate (rank 16, lr 1e-4 are dit-lora's choice, said in ``sources``).

Not confirmed (kept out of signatures): the Hub files byte for byte and their stored dtype (the script's default
``--dtype fp32``); the 720p release (``Sana_2000M_720px_ltx2vae``: LTX-2's VAE, which this family refuses).
"""

from __future__ import annotations

from dit_lora.catalogue.entry import Checkpoint
from dit_lora.catalogue.text_encoders import GEMMA2_2B, GEMMA_TOKENIZER_FILES

T2V, I2V = "sanavideo", "sanavideo_i2v"

_MODEL_INDEX = {
    "_class_name": "SanaVideoPipeline",
    "scheduler": ["diffusers", "DPMSolverMultistepScheduler"],
    "text_encoder": ["transformers", "Gemma2Model"],
    "tokenizer": ["transformers", "GemmaTokenizerFast"],
    "transformer": ["diffusers", "SanaVideoTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLWan"],
}
_TRANSFORMER = {
    "_class_name": "SanaVideoTransformer3DModel",
    "in_channels": 16,
    "out_channels": 16,
    "num_attention_heads": 20,
    "attention_head_dim": 112,
    "num_layers": 20,
    "num_cross_attention_heads": 20,
    "cross_attention_head_dim": 112,
    "cross_attention_dim": 2240,
    "caption_channels": 2304,
    "mlp_ratio": 3.0,
    "attention_bias": False,
    "sample_size": 30,
    "patch_size": [1, 2, 2],
    "norm_elementwise_affine": False,
    "norm_eps": 1e-06,
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
}
_VAE = {
    "_class_name": "AutoencoderKLWan",
    "attn_scales": [],
    "base_dim": 96,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    "latents_mean": [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                     0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
    "latents_std": [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916],
    "num_res_blocks": 2,
    "temperal_downsample": [False, True, True],
    "z_dim": 16,
}  # fmt: skip
_SCHEDULER = {
    "_class_name": "DPMSolverMultistepScheduler",
    "algorithm_type": "dpmsolver++",
    "flow_shift": 8.0,
    "num_train_timesteps": 1000,
    "prediction_type": "flow_prediction",
    "solver_order": 2,
    "use_flow_sigmas": True,
}
_IDENTITY = ("_class_name", "num_attention_heads", "attention_head_dim", "cross_attention_dim", "caption_channels",
             "mlp_ratio", "sample_size", "patch_size")  # fmt: skip
_SOURCES = {
    "configs": "diffusers scripts/convert_sana_video_to_diffusers.py and sana_video.md (module docstring)",
    "trained": "the pipelines' examples (81 frames, 480 x 832, 16 fps) and NVlabs Sana_2000M_480px_AdamW_fsdp.yaml",
    "defaults": "batch 1 and 81 x 480 x 832 as NVlabs' trainer; no published SANA-Video LoRA recipe states a rank or "
    "learning rate, so rank 16 / alpha 16 / lr 1e-4 are dit-lora's video LoRA choice",
}

ENTRIES = [
    Checkpoint(
        hub_id="Efficient-Large-Model/SANA-Video_2B_480p_diffusers",
        family=T2V,
        also_families=(I2V,),  # one checkpoint animates a first frame with SanaImageToVideoPipeline
        title="SANA-Video 2B 480p",
        signature={"transformer/config.json": {k: _TRANSFORMER[k] for k in _IDENTITY}},
        depth={"transformer/config.json": {"num_layers": _TRANSFORMER["num_layers"]}},
        configs={
            "model_index.json": _MODEL_INDEX,
            "transformer/config.json": _TRANSFORMER,
            "vae/config.json": _VAE,
            "scheduler/scheduler_config.json": _SCHEDULER,
            "text_encoder/config.json": GEMMA2_2B,
        },
        stored_dtype="fp32",
        text_length=300,
        defaults={
            "rank": 16,
            "lora_alpha": 16,
            "learning_rate": 1e-4,
            "train_batch_size": 1,
            "max_num_frames": 81,
            "height": 480,
            "width": 832,
        },
        sources=_SOURCES,
        trained={"frames": 81, "height": 480, "width": 832, "fps": 16},
        tokenizer_files=GEMMA_TOKENIZER_FILES,
        notes="text-to-video (SanaVideoPipeline) and image-to-video (SanaImageToVideoPipeline) from one checkpoint; "
        "the Wan 2.1 VAE; sampling shift 8.0, trained at 3.0",
    )
]
