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

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

ENTRIES = read_catalogue(__name__).entries
