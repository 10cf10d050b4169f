"""kit/adapter.py: the kit's adapter writer round-trips on a tiny pipeline, its snippet lays the facts
out, and every registered diffusion family saves, reloads and writes its card through the kit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sana_configs import sana_cfg

from dit_lora.contract.spec import FamilyInfo
from dit_lora.kit.adapter import SEED_ARGUMENT, KitAdapter, KitCard, Snippet, quoted
from dit_lora.kit.components import DiffusionLoss
from dit_lora.output.adapter import stable_config
from dit_lora.registry import available, get_spec

CPU = torch.device("cpu")


class RecordingFitting:
    """A ``FamilySpec.fitting`` that records the folder it was handed (and that the adapter was not yet in)."""

    def __init__(self):
        self.calls = []

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir):
        self.calls.append((adapter_dir, bool(getattr(pipe.transformer, "peft_config", None))))


class SwitchingAdapter(KitAdapter):
    """The kit's adapter with a switch set once the adapter is in (as CogVideoX turns on VAE tiling)."""

    def fit_loaded(self, pipe, options):
        pipe.switched = bool(pipe.transformer.peft_config)


def _trained_lora(path) -> tuple[dict, dict]:
    """A LoRA on the tiny Sana transformer's q/v projections, with every lora_B nonzero (a trained adapter)."""
    from diffusers import SanaTransformer2DModel
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    model = SanaTransformer2DModel.from_pretrained(path, subfolder="transformer", torch_dtype=torch.float32)
    model.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=["to_q", "to_v"], init_lora_weights="gaussian"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param, generator=torch.Generator().manual_seed(len(name))))
    return get_peft_model_state_dict(model), stable_config(model.peft_config["default"].to_dict())


def test_the_kit_adapter_round_trips_on_a_tiny_pipeline(tiny_sana, tmp_path):
    """Saved through the pipeline's own saver under the family's weight name, reloaded into the stock pipeline: the
    VAE in fp32, the rest in the run's dtype, the fitting run before the adapter loads, the switch after it, the
    progress bar off, every LoRA weight as saved."""
    info = FamilyInfo(pipeline_class_name="SanaPipeline")
    fitting = RecordingFitting()
    adapter = SwitchingAdapter(info, fp32_vae="AutoencoderDC", fitting=fitting)
    state, config = _trained_lora(tiny_sana)
    path = adapter.save_adapter(tmp_path, state, config)
    assert path == tmp_path / info.adapter_weight_name and path.is_file()

    cfg = sana_cfg(pretrained_model_name_or_path=str(tiny_sana), mixed_precision="no")
    pipe = adapter.load_pipeline_with_adapter(cfg, tmp_path, CPU)
    assert type(pipe).__name__ == "SanaPipeline" and pipe.switched
    assert pipe.vae.dtype == torch.float32 and pipe.transformer.dtype == cfg.weight_dtype
    assert fitting.calls == [(tmp_path, False)]
    assert pipe._progress_bar_config == {"disable": True}
    from peft.utils import get_peft_model_state_dict

    (name,) = pipe.transformer.peft_config  # diffusers' own adapter name
    loaded = get_peft_model_state_dict(pipe.transformer, adapter_name=name)
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert torch.equal(loaded[key].float(), value.float()), key


def test_the_save_calls_layer_argument_follows_the_prefix(tmp_path, monkeypatch):
    """``lora_prefix`` names the save call's model arguments (a pipeline whose LoRA goes into a ``unet``)."""
    calls = []

    class Pipeline:
        @classmethod
        def save_lora_weights(cls, output_dir, **kwargs):
            calls.append(kwargs)

    adapter = KitAdapter(FamilyInfo(pipeline_class_name="Anything"), lora_prefix="unet")
    monkeypatch.setattr(adapter, "pipeline_class", lambda cfg=None: Pipeline)
    assert adapter.save_adapter(tmp_path, {"k": 1}, {"r": 1}) == tmp_path / "pytorch_lora_weights.safetensors"
    assert calls == [{"unet_lora_layers": {"k": 1}, "unet_lora_adapter_metadata": {"r": 1},
                      "weight_name": "pytorch_lora_weights.safetensors", "safe_serialization": True}]


def test_the_snippet_lays_out_its_facts_as_code():
    """The fp32 VAE imported and loaded before the pipeline that takes it; the call's arguments one per line."""
    code = Snippet(pipeline="SanaPipeline", base='me/"base"', repo="me/lora", vae="AutoencoderDC",
                   call_args=['prompt="a cat",', SEED_ARGUMENT]).text()
    compile(code, "snippet", "exec")
    assert code == (
        "import torch\n"
        "from diffusers import AutoencoderDC, SanaPipeline\n\n"
        'base = "me/\\"base\\""\n'
        'vae = AutoencoderDC.from_pretrained(base, subfolder="vae", torch_dtype=torch.float32)\n'
        "pipe = SanaPipeline.from_pretrained(base, vae=vae, torch_dtype=torch.bfloat16)\n"
        'pipe.load_lora_weights("me/lora")\n'
        'pipe.to("cuda" if torch.cuda.is_available() else "cpu")\n'
        "image = pipe(\n"
        '    prompt="a cat",\n'
        "    generator=torch.manual_seed(0),\n"
        ").images[0]\n"
        'image.save("sample.png")\n'
    )


def test_the_kit_card_builds_the_default_snippet_from_the_pipeline_class():
    """A family stating nothing gets its pipeline, the run's prompt and validation settings; no rows, no license."""
    card = KitCard(FamilyInfo(pipeline_class_name="ZImagePipeline"))
    cfg = sana_cfg(validation_prompt="a dog", resolution=256, validation_inference_steps=7)
    code = card.usage_snippet(cfg, "me/lora")
    compile(code, "snippet", "exec")
    assert "pipe = ZImagePipeline.from_pretrained(base, torch_dtype=torch.bfloat16)" in code
    assert '    prompt="a dog",\n    height=256, width=256,\n    num_inference_steps=7, ' in code
    assert card.card_settings(cfg) == {} and card.base_model_license(cfg.model) is None


def _diffusion_families() -> list[str]:
    return [name for name in available() if isinstance(get_spec(name).loss, DiffusionLoss)]


def test_every_diffusion_family_is_found():
    """The names whose loss is a DiffusionLoss are the names whose model is a DiffusionModel (the kit's bases): none is
    missed by the scan, and the video LLMs are not among them."""
    from dit_lora.kit.loader import DiffusionModel

    models = [name for name in available() if isinstance(get_spec(name).model, DiffusionModel)]
    assert _diffusion_families() == models and len(models) < len(available())


@pytest.mark.parametrize("family", _diffusion_families())
def test_every_diffusion_familys_adapter_and_card_are_the_kits(family):
    """So a new consumer rule (how a pipeline reloads, how the snippet reads) edits the kit, not each family."""
    spec = get_spec(family)
    assert isinstance(spec.adapter, KitAdapter), type(spec.adapter)
    assert isinstance(spec.card, KitCard), type(spec.card)
    assert type(spec.adapter).load_pipeline_with_adapter is KitAdapter.load_pipeline_with_adapter
    assert type(spec.card).usage_snippet is KitCard.usage_snippet


# ---- a pipeline without a LoRA loader: PEFT's files, dit_lora.load_adapter in the card -----------------------------
PEFT_INFO = FamilyInfo(pipeline_class_name="PixArtAlphaPipeline", adapter_weight_name="adapter_model.safetensors")


def test_a_peft_named_adapter_is_saved_in_peft_format_without_the_pipelines_saver(tmp_path, monkeypatch):
    """PEFT's file name tells a pipeline without ``save_lora_weights``: PEFT's own two files, no pipeline call."""
    import json

    from safetensors.torch import load_file

    adapter = KitAdapter(PEFT_INFO)
    monkeypatch.setattr(adapter, "pipeline_class", lambda cfg=None: pytest.fail("the pipeline has no saver"))
    state = {"transformer_blocks.0.attn1.to_q.lora_A.weight": torch.ones(2, 4)}
    path = adapter.save_adapter(tmp_path, state, {"r": 2, "lora_alpha": 2, "target_modules": ["to_q"]})
    assert path == tmp_path / "adapter_model.safetensors"
    assert list(load_file(str(path))) == ["base_model.model.transformer_blocks.0.attn1.to_q.lora_A.weight"]
    assert json.loads((tmp_path / "adapter_config.json").read_text())["r"] == 2


def test_a_peft_named_adapters_card_loads_it_with_dit_lora_and_seeds_the_call():
    """The card of such a pipeline imports ``dit_lora.load_adapter`` (the pipeline has no ``load_lora_weights``) and,
    as every kit card, seeds the call: the card pushed to the Hub makes the local card's image."""
    cfg = sana_cfg(validation_prompt="a dog", resolution=32)
    code = KitCard(PEFT_INFO).usage_snippet(cfg, "me/lora")
    compile(code, "snippet", "exec")
    assert "from dit_lora import load_adapter  # PixArtAlphaPipeline has no load_lora_weights\n" in code
    assert 'load_adapter(pipe, "me/lora")\n' in code and "load_lora_weights(" not in code.replace("no load_lora", "")
    assert SEED_ARGUMENT in code


def test_a_peft_named_adapters_card_takes_the_familys_quoting_and_load_comment():
    """A family states how its snippet quotes names and what its ``load_adapter`` line restores; the kit lays out
    the rest (DiT's card: the older quoting, its class tables)."""
    from dit_lora.kit.adapter import quoted

    class Commented(KitCard):
        quote = staticmethod(quoted)
        load_comment = "  # LoRA + class tables"

    cfg = sana_cfg(validation_prompt="a dog", resolution=32)
    code = Commented(PEFT_INFO).usage_snippet(cfg, "C:\\runs\\lora")
    assert 'load_adapter(pipe, "C:\\runs\\lora")  # LoRA + class tables\n' in code  # as it stands, not escaped
    assert 'load_adapter(pipe, "C:\\\\runs\\\\lora")\n' in KitCard(PEFT_INFO).usage_snippet(cfg, "C:\\runs\\lora")


def test_a_card_adds_its_own_call_arguments():
    """``call_args`` is the family's say in the call (PixArt: no resolution binning), the snippet's layout the kit's."""

    class Unbinned(KitCard):
        def call_args(self, cfg):
            return [*super().call_args(cfg), "use_resolution_binning=False,"]

    code = Unbinned(FamilyInfo(pipeline_class_name="SanaPipeline")).usage_snippet(sana_cfg(), "me/lora")
    assert "    use_resolution_binning=False,\n).images[0]\n" in code and 'pipe.load_lora_weights("me/lora")' in code


def test_a_card_states_its_fields_prompt_extras_and_parts_and_the_kit_lays_them_out():
    """A family's card states what differs (fields of every run, the prompt's arguments, its arguments before the
    seed, this run's parts); the kit keeps the order: prompt, size and steps, extras, seed."""

    class Stated(KitCard):
        quote, prompt_keyword = staticmethod(quoted), False
        snippet_fields = {"vae": "AutoencoderDC", "vae_comment": "  # fp32"}

        def extra_call_args(self, cfg):
            return ["max_sequence_length=77,"]

        def snippet_parts(self, cfg):
            return {"before_call": "image = None\n", "pipeline": "OtherPipeline"}

    code = Stated(FamilyInfo(pipeline_class_name="SanaPipeline")).usage_snippet(sana_cfg(validation_prompt="a dog"), "me/x")
    assert "OtherPipeline" in code and "SanaPipeline" not in code and "AutoencoderDC" in code and "# fp32" in code
    assert "image = None\n" in code and '    "a dog",\n' in code
    call = code[code.index('"a dog",'):]
    assert call.index("height=") < call.index("max_sequence_length=77,") < call.index("generator=")


def test_flow_rows_name_the_density_and_an_unset_shift():
    from dit_lora.config import TrainConfig

    card = KitCard(FamilyInfo(pipeline_class_name="ChromaPipeline"))
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path="m")
    assert card.flow_rows(cfg.family_options) == {"weighting_scheme": cfg.family_options.weighting_scheme}
    assert card.flow_rows(cfg.family_options, "chroma_shift")["chroma_shift"] == "the scheduler's"
    assert card.flow_rows(cfg.family_options, "chroma_shift", unset="dynamic")["chroma_shift"] == "dynamic"
    shifted = TrainConfig.for_family("chroma", pretrained_model_name_or_path="m", chroma_shift=3.0)
    assert card.flow_rows(shifted.family_options, "chroma_shift")["chroma_shift"] == 3.0


def test_a_cards_own_imports_come_beside_the_load_adapter_import():
    class Imports(KitCard):
        def snippet_parts(self, cfg):
            return {"imports": ["from PIL import Image\n"]}

    code = Imports(PEFT_INFO).usage_snippet(sana_cfg(), "me/x")
    assert "from dit_lora import load_adapter" in code and "from PIL import Image\n" in code


class ClipTask:
    """A video family's task as the video card reads it."""

    pipeline_class_name = "WanPipeline"

    def model_fps(self, model):
        return 16

    def video_buckets(self, cfg):
        return [(17, 64, 96)]

    def info(self, cfg):
        return SimpleNamespace(describe=lambda: "Wan 2.1 T2V 1.3B")


def _clip_cfg(validation_image=None):
    return SimpleNamespace(
        model=SimpleNamespace(pretrained_model_name_or_path="me/base"),
        family_options=SimpleNamespace(validation_image=validation_image),
        video=SimpleNamespace(frame_buckets=None, frame_sampling="uniform"),
        validation=SimpleNamespace(prompts=[]),
    )


def test_a_video_card_writes_one_video_at_the_models_frame_rate_and_the_familys_fields_win():
    from dit_lora.kit.adapter import VideoCard
    from dit_lora.output.video import snippet_write_video

    class Card(VideoCard, KitCard):  # as a video family's card is
        pass

    card = Card(ClipTask())
    snippet = card.video_snippet(_clip_cfg(), "me/lora", vae="AutoencoderKLWan", call_args=[card.prompt(_clip_cfg().validation)])
    assert (snippet.pipeline, snippet.base, snippet.repo, snippet.base_name) == ("WanPipeline", "me/base", "me/lora",
                                                                                  "model_id")
    assert snippet.output == "video" and snippet.tail == snippet_write_video(16) and snippet.vae == "AutoencoderKLWan"
    assert snippet.call_args == ['"a video"']  # the placeholder prompt of a video family
    compile(snippet.text(), "snippet", "exec")
    own = card.video_snippet(_clip_cfg(), "me/lora", call_args=[], output="result", tail="write(result)\n")
    assert (own.output, own.tail) == ("result", "write(result)\n")


def test_a_video_cards_rows_start_with_the_clips_and_model_and_end_with_the_frame_sampling():
    from dit_lora.kit.adapter import VideoCard

    rows = VideoCard(ClipTask()).video_rows(_clip_cfg(), flow_shift=3.0)
    assert list(rows) == ["resolution", "model", "flow_shift", "frame_sampling"]
    assert rows["resolution"] == "17x64x96 (frames x height x width)" and rows["model"] == "Wan 2.1 T2V 1.3B"
    assert rows["flow_shift"] == 3.0 and rows["frame_sampling"] == "uniform"


def test_an_image_to_video_snippet_loads_the_first_frame_the_run_wrote_beside_the_adapter():
    """Issue 76: a card loaded a placeholder (or the run's --validation_image by its own, maybe relative, path); the
    run writes the frame it conditioned on beside the adapter and the card writer points the snippet there."""
    import inspect

    from dit_lora.kit.adapter import first_frame_image, first_frame_line, image_lines

    assert first_frame_line() == 'image = load_image("card_input.png")  # the first frame to animate\n'
    # the same line whatever --validation_image says: neither function is given the run's options
    assert not inspect.signature(first_frame_line).parameters and not inspect.signature(first_frame_image).parameters
    extra, before, arg = first_frame_image()
    assert before == first_frame_line()
    assert image_lines(extra, arg) == (["from diffusers.utils import load_image\n"], ["image=image,"])
