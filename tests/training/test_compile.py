"""``--compile``: the refusals before loading, which blocks become compiled regions, and the counters that the
summary's "zero recompiles after warm-up" rests on (dynamo's own counters, on small modules)."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, inject_adapter_in_model

from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.training import compile as compile_mod
from dit_lora.training.compile import CompileCounters, block_classes, check_compiler, compile_model, eager, shape_key


# ---- refusals: one paragraph naming the flag, the cause and the fix ----------------------------------------
def test_off_never_refuses(monkeypatch):
    monkeypatch.setattr(compile_mod.shutil, "which", lambda name: None)
    check_compiler("off", "cpu")
    check_compiler("off", "mps")


@pytest.mark.parametrize("mode", ["blocks", "full"])
def test_cpu_without_a_cxx_compiler_stops_before_loading(monkeypatch, mode):
    monkeypatch.setattr(compile_mod.shutil, "which", lambda name: None)
    with pytest.raises(UserError) as err:
        check_compiler(mode, "cpu")
    text = str(err.value)
    assert f"--compile {mode}" in text and "C++ compiler" in text and "--compile off" in text and "\n" not in text


def test_cuda_without_triton_stops_before_loading(monkeypatch):
    import torch.utils._triton as triton_probe

    monkeypatch.setattr(triton_probe, "has_triton", lambda: False)
    with pytest.raises(UserError, match=r"--compile blocks needs Triton.*pip install triton.*--compile off"):
        check_compiler("blocks", "cuda")


def test_other_devices_are_refused():
    with pytest.raises(UserError, match="--compile off"):
        check_compiler("blocks", "mps")


def test_this_machine_can_compile():
    check_compiler("blocks", "cpu")  # gcc is part of the documented environment


def test_unknown_mode_names_the_choices(tmp_path):
    from dit_lora.config import parse_config

    with pytest.raises(UserError, match=r"(?s)--compile.*off.*blocks.*full"):
        parse_config(["--pretrained_model_name_or_path", str(tmp_path), "--train_data_dir", str(tmp_path),
                      "--compile", "regional"])


# ---- which blocks ------------------------------------------------------------------------------------------
def _lora(model, targets):
    model.requires_grad_(False)
    return inject_adapter_in_model(LoraConfig(r=2, lora_alpha=2, target_modules=targets), model)


def _regions(model) -> list[str]:
    return [name for name, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]


def test_diffusion_families_compile_their_transformer_blocks(tiny_sana, tiny_cogvideox):
    from diffusers import CogVideoXTransformer3DModel, SanaTransformer2DModel

    from dit_lora.families.dit.demo import build_tiny_dit_components

    cases = [
        ("sana", SanaTransformer2DModel.from_pretrained(tiny_sana / "transformer"), "SanaTransformerBlock"),
        ("cogvideox", CogVideoXTransformer3DModel.from_pretrained(tiny_cogvideox / "transformer"), "CogVideoXBlock"),
        ("dit", build_tiny_dit_components()["transformer"], "BasicTransformerBlock"),
    ]
    for family, model, block in cases:
        assert block_classes(get_family(family), model) == [block], family
        _lora(model, ["to_q", "to_v"])
        counters = compile_model(model, get_family(family), "blocks", dynamic=False, buckets=1)
        blocks = [n for n, m in model.named_modules() if type(m).__name__ == block]
        assert _regions(model) == blocks and counters.regions == len(blocks) >= 2, family


def test_video_llm_compiles_the_language_model_layers_only():
    """LoRA on the language model: its decoder layers are compiled, the frozen vision tower stays eager."""
    from dit_lora.families.videollm.demo_llava import build_tiny_videollm_model

    model = _lora(build_tiny_videollm_model(dtype=torch.float32),
                  r"model\.language_model\.layers\.\d+\.self_attn\.(q|v)_proj")
    family = get_family("llava_next_video")
    names = block_classes(family, model)
    assert "MistralDecoderLayer" in names and "CLIPEncoderLayer" in names  # both repeat ...
    compile_model(model, family, "blocks", dynamic=True, buckets=1)
    regions = _regions(model)
    assert regions and all(".language_model.layers." in n for n in regions)  # ... only the trained ones compile
    assert len(regions) == model.config.text_config.num_hidden_layers


def test_a_model_without_repeated_trainable_blocks_is_refused():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    with pytest.raises(UserError, match=r"--compile blocks found no repeated.*--compile full"):
        compile_model(model, get_family("sana"), "blocks", dynamic=False, buckets=1)


# ---- the counters ------------------------------------------------------------------------------------------
class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) + x


class _Model(torch.nn.Module):
    _no_split_modules = ["_Block"]

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _step(model, counters, step, x, *, compiled=True):
    counters.before_step()
    with eager(counters) if not compiled else torch.enable_grad():
        model(x).sum().backward()
    counters.after_step(step, shape_key({"x": x}), ran_compiled=compiled)


@pytest.fixture
def eager_backend(monkeypatch):
    monkeypatch.setattr(compile_mod, "BACKEND", "eager")  # dynamo's capture without code generation


def test_static_graphs_one_per_shape_and_a_recompile_after_warmup_is_counted(eager_backend):
    model = _Model()
    counters = compile_model(model, get_family("sana"), "blocks", dynamic=False, buckets=2)
    a, b = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    _step(model, counters, 1, a, compiled=False)  # a check step: eager, compiles nothing
    assert counters.summary()["graphs"] == 0
    for step, x in enumerate([a, a, b, a, b, b], start=2):
        _step(model, counters, step, x)
    summary = counters.summary()
    # two graphs per shape: the first block's input needs no gradient, the others' do (one guard each)
    assert summary["graphs"] == 4 and summary["graph_breaks"] == 0 and summary["batch_shapes"] == 2
    assert summary["recompiles_after_warmup"] == 0 and summary["steps_that_compiled"] == [2, 4]
    # A graph for a shape that already ran compiled is a recompile (here: the grad-mode guard fails).
    counters.before_step()
    with torch.no_grad():
        model(a)
    counters.after_step(9, shape_key({"x": a}))
    assert counters.summary()["recompiles_after_warmup"] == 1 and counters.summary()["steps_that_compiled"][-1] == 9


def test_every_bucket_and_remainder_shape_gets_its_own_graph(eager_backend):
    """Five buckets, each with a full and a smaller remainder batch: all ten shapes compile (two graphs each) and
    none runs eagerly past dynamo's recompile limit, which would make the bits depend on the order of shapes."""
    model = _Model()
    counters = compile_model(model, get_family("sana"), "blocks", dynamic=False, buckets=5)
    shapes = [(batch, tokens, 8) for tokens in (3, 5, 7, 9, 11) for batch in (4, 1)]
    for step, shape in enumerate(shapes, start=1):
        _step(model, counters, step, torch.randn(shape))
    summary = counters.summary()
    assert summary["graphs"] == 2 * len(shapes) and summary["recompiles_after_warmup"] == 0
    assert summary["steps_that_compiled"] == list(range(1, len(shapes) + 1))


def test_dynamic_shapes_serve_every_length_with_the_first_graph(eager_backend):
    model = _Model()
    counters = compile_model(model, get_family("llava_next_video"), "blocks", dynamic=True, buckets=1)
    for step, n in enumerate([5, 9, 13, 6, 21], start=1):
        _step(model, counters, step, torch.randn(2, n, 8))
    summary = counters.summary()
    assert summary["batch_shapes"] == 5 and summary["steps_that_compiled"] == [1]
    assert summary["graphs"] == 2 and summary["recompiles_after_warmup"] == 0  # first block / the others, as above


def test_graph_breaks_are_counted(eager_backend):
    class Breaking(_Block):
        def forward(self, x):
            torch._dynamo.graph_break()
            return super().forward(x)

    model = _Model()
    model.blocks = torch.nn.ModuleList([Breaking() for _ in range(2)])
    model._no_split_modules = ["Breaking"]
    counters = compile_model(model, get_family("sana"), "blocks", dynamic=False, buckets=1)
    _step(model, counters, 1, torch.randn(2, 5, 8))
    assert counters.summary()["graph_breaks"] >= 1


def test_full_mode_compiles_the_whole_model(eager_backend):
    model = _Model()
    counters = compile_model(model, get_family("sana"), "full", dynamic=False, buckets=1)
    _step(model, counters, 1, torch.randn(2, 5, 8))
    assert _regions(model) == [""] and counters.summary()["graphs"] == 1


def test_off_compiles_nothing_and_eager_is_a_no_op():
    model = _Model()
    counters = compile_model(model, get_family("sana"), "off", dynamic=False, buckets=1)
    assert _regions(model) == [] and counters.regions == 0
    with eager(counters), eager(None):
        model(torch.randn(1, 2, 8))


def test_doctor_says_whether_compile_can_run(monkeypatch):
    from dit_lora.commands.doctor import run_checks

    if torch.cuda.is_available():
        pytest.skip("the doctor reports the CUDA device here; the C++ compiler matters on a CPU")
    (check,) = [c for c in run_checks(import_check=False) if c.name == "compile"]
    assert check.value == "--compile blocks/full can run on cpu"
    monkeypatch.setattr(compile_mod.shutil, "which", lambda name: None)
    (check,) = [c for c in run_checks(import_check=False) if c.name == "compile"]
    assert check.value == "cannot run on cpu" and "C++ compiler" in check.message


def test_a_paired_batchs_class_images_are_part_of_its_shape():
    from dit_lora.data.batches import PRIOR

    one = {"x": torch.zeros(2, 3), PRIOR: {"x": torch.zeros(2, 3)}}
    other = {"x": torch.zeros(2, 3), PRIOR: {"x": torch.zeros(2, 5)}}
    assert shape_key(one) != shape_key(other) and shape_key({"x": torch.zeros(2, 3)}) == (("x", (2, 3), "torch.float32"),)
