"""HunyuanVideo 1.5's answers to the shared tests (what each case is: tests/support/family_cases.py)."""

from __future__ import annotations

#: why tests/kernels/test_patch_image_families.py has no probe of this family's transformer
NO_GENERIC_KERNEL_PROBE = "not written yet: no test checks which of HunyuanVideo 1.5's modules the generic points reach"

#: the Hub id its guide's main example names -> the options that make --demo build a tiny model of it
#: (tests/test_guides.py)
GUIDE_STAND_INS = {"hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v": {}}

#: which of the shared option groups tests/config/test_owners.py checks it owns (config/owners.py)
SHARED_OPTIONS = {
    "hunyuanvideo15": {"logit_mean", "weighting_scheme"},
    "hunyuanvideo15_i2v": {"logit_mean", "weighting_scheme", "validation_image"},
}


def comfyui_export():
    """HunyuanVideo 1.5 (comfy/ldm/hunyuan_video/model.py, commit fe251146, Feb 2026): the generic names (and
    diffusion-pipe's ``transformer.`` spelling of them) of Tencent's layout, q/k/v fused per stream and in the
    refiner; every type: its block's two streams' and its refiner block's q/k/v into one each."""
    import re

    from comfyui_cases import ComfyUIExport

    from dit_lora.families.hunyuanvideo15.comfyui import EXPORT
    from dit_lora.families.hunyuanvideo15.demo import DEMO

    keys = re.compile(
        r"^diffusion_model\.(double_blocks\.\d+\.(img|txt)_(attn\.(qkv|proj)|mlp\.[02]|mod\.lin)|txt_in\."
        r"(individual_token_refiner\.blocks\.\d+\.(self_attn\.(qkv|proj)|mlp\.[02]|adaLN_modulation\.1)"
        r"|input_embedder|[tc]_embedder\.(in|out)_layer)|byt5_in\.fc[123]|vision_in\.proj\.[13]"
        r"|time_in\.(in|out)_layer|img_in\.proj|final_layer\.(linear|adaLN_modulation\.1))$"
    )
    config = {k: v for k, v in DEMO.read().value("transformer").items() if k != "why"}
    return ComfyUIExport(keys=keys, convert=EXPORT.comfyui_state,
                         transformer=("HunyuanVideo15Transformer3DModel", {**config, "num_layers": 1}),
                         exported_at=EXPORT.typed_layer_name, fused=lambda kind: 3 * 2, typed_fused=EXPORT)


#: ComfyUI's own loader reads its export in its own folder's test
NO_COMFYUI_LOADER = "ComfyUI's own loader reads its export in tests/families/hunyuanvideo15/test_comfyui.py"

#: why tests/kit/test_prompts.py does not look for its caption length in the card's pipeline call
NO_CARD_CAPTION_LENGTH = (
    "HunyuanVideo15Pipeline's call and encode_prompt take no max_sequence_length: a consumer encodes at the pipeline's "
    "own length, and the card's rows name the trained one"
)
