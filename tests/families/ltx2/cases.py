"""LTX-2's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

#: why tests/kernels/test_patch_image_families.py has no probe of this family's transformer
NO_GENERIC_KERNEL_PROBE = "not written yet: no test checks which of LTX-2's modules (its video and audio streams) the generic points reach"

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"Lightricks/LTX-2": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "ltx2": frozenset(),
    "ltx2_i2v": {"validation_image"},
    "ltx2_ic": frozenset(),
}


def comfyui_export():
    """LTXAV (LTX-2; comfy/ldm/lightricks/av_model.py BasicAVTransformerBlock, model.py CrossAttention, 2026): only the
    generic ``diffusion_model.<weight>`` of Lightricks' names (patchify_proj, adaln_single, av_ca_*_adaln_single)."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.ltx2.comfyui import EXPORTS
    from dit_lora.families.ltx2.demo import DEMO

    keys = re.compile(
        r"^diffusion_model\.(transformer_blocks\.\d+\.((attn[12]|audio_attn[12]|audio_to_video_attn|video_to_audio_attn)"
        r"\.(to_[qkv]|to_out\.0|to_gate_logits)|(ff|audio_ff)\.net\.(0\.proj|2))|(audio_)?(patchify_proj|proj_out)"
        r"|(audio_)?caption_projection\.linear_[12]|((audio_)?(prompt_)?adaln_single|av_ca_(video_scale_shift|a2v_gate"
        r"|audio_scale_shift|v2a_gate)_adaln_single)\.(linear|emb\.timestep_embedder\.linear_[12]))$"
    )
    return ComfyUIExport(keys=keys, convert=EXPORTS.comfyui_state,
                         transformer=("LTX2VideoTransformer3DModel",
                                      {**DEMO.read().value("transformer"), "num_layers": 1}),
                         exported_at=EXPORTS.layer_name)


#: ComfyUI's own loader reads its export in its own folder's test
NO_COMFYUI_LOADER = "ComfyUI's own loader reads its export in tests/families/ltx2/test_comfyui_loader.py"

#: the sibling names' folders a name trains too (its info.also_trains_folders_of; tests/setup/test_family_inference.py):
#: LTX-2's one checkpoint serves text-to-video, image-to-video and the in-context LoRAs
ALSO_TRAINS_FOLDERS_OF = {
    "ltx2": {"LTX2ImageToVideoPipeline"},
    "ltx2_i2v": {"LTX2Pipeline"},
    "ltx2_ic": {"LTX2Pipeline", "LTX2ImageToVideoPipeline"},
}
