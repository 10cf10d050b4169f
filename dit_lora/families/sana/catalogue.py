"""Sana checkpoints (``SanaPipeline``, ``Efficient-Large-Model/*``).

Where each fact was checked (no network at run time; these are copies of published files):
- Hub ids: the diffusers docs' Sana table (``docs/source/en/api/pipelines/sana.md``) and NVlabs/Sana
  ``asset/docs/model_zoo.md``; the 2K/4K and SANA 1.5 ids appear in model_zoo.md and on their Hub pages.
  ``Sana_600M_1024px_BF16_diffusers`` is in neither (the 600M releases are fp16/fp32 only).
- transformer/config.json: the Hub file of ``Sana_1600M_512px_MultiLing_diffusers`` (496 bytes) and
  ``Sana_1600M_1024px_MultiLing_diffusers`` (527 bytes, with ``interpolation_scale: null``), read in full; the
  600M, 2K, 4K and 1.5 values are what diffusers' ``scripts/convert_sana_to_diffusers.py`` writes for each
  model type (``sample_size = px // 32``; ``interpolation_scale`` None / 1.0 at 2K / 2.0 at 4K; ``qk_norm``
  only for 1.5), which the 1600M Hub files agree with.
- vae/config.json: ``Sana_600M_1024px_diffusers/vae/config.json`` (dc-ae-f32c32-sana-1.0), read in full.
- scheduler/scheduler_config.json: ``Sana_1600M_512px_diffusers`` (840 bytes), read in full; ``flow_shift`` 6.0
  at 4K per the conversion script and NVlabs ``configs/sana_config/4096ms/Sana_1600M_img4096_bf16.yaml``.
- text_encoder/config.json: Gemma-2-2B-it (``transformers.Gemma2Config`` defaults agree); tokenizer files:
  the Hub tree of ``Sana_1600M_1024px_BF16_diffusers/tokenizer``.
- Recommended LoRA: diffusers ``examples/dreambooth/train_dreambooth_lora_sana.py`` defaults (``--rank 4``,
  ``--lora_alpha 4``, ``--learning_rate 1e-4``, ``--max_sequence_length 300``); its README and NVlabs'
  ``train_scripts/train_lora.sh`` train with batch 1 x gradient accumulation 4 at lr 1e-4.
- Stored dtype: model_zoo.md's "Precision" column (600M and 1600M 512/1024: fp16/fp32; 1600M BF16, 2K, 4K:
  bf16/fp32; SANA 1.5: bf16); the diffusers docs load the BF16 repo in bfloat16 and the others in float16.

SANA-Sprint (``REFUSED``: recognised, not trained; :data:`SPRINT_REFUSAL` says why): the Hub ids are the diffusers
docs' table (``docs/source/en/api/pipelines/sana_sprint.md``); the transformer is what
``scripts/convert_sana_to_diffusers.py`` writes for ``SanaSprint_1600M_P1_D20`` / ``SanaSprint_600M_P1_D28`` (the
SanaMS widths, ``qk_norm`` across heads, ``guidance_embeds: true``), the scheduler its ``--scheduler_type scm``
(``SCMScheduler``: trigflow, ``sigma_data`` 0.5) and the pipeline ``SanaSprintPipeline`` (NVlabs
``asset/docs/sana_sprint.md``'s conversion command). Not confirmed: the Hub files byte for byte.

Not confirmed (kept out of signatures): the 600M and 2K/4K/1.5 transformer files byte for byte, which VAE
the 1.5 repos ship (the current conversion script loads dc-ae ``sana-1.1``), the 4.8B Hub repo's files.

The entries themselves are data: ``catalogue.json`` beside this module (:mod:`dit_lora.catalogue.files`).
"""

from __future__ import annotations

from dit_lora.catalogue.files import read_catalogue

_FILE = read_catalogue(__name__)
ENTRIES = _FILE.entries
#: SANA-Sprint: recognised, refused (each entry's ``refusal`` says why)
REFUSED = _FILE.refused
#: why a Sprint checkpoint is refused, where the model is recognised (``{model}``: the path or Hub id given)
SPRINT_REFUSAL: str = _FILE.parts["sprint_refusal"]
