"""output/export.py and `dit-lora export`: a family declaring Exports writes its format next to a finished run's
adapter; an unknown format, a folder that is not a finished run, a family without exports, a path leaving the
folder and a user's own file of the same name are refused in one paragraph each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dit_lora.commands.cli import main
from dit_lora.core.errors import UserError
from dit_lora.registry import register_family, unregister_family
from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.registry import FamilyEntry
from dit_lora.core.fileio import save_safetensors_atomic
from dit_lora.output.export import EXPORT_MARKER, export_metadata, export_run, export_target, written_by_export
from dit_lora.output.names import ADAPTER_FILE, SUMMARY_FILE
from spec_parts import tiny_spec

COPY = "copy_scaled.safetensors"


class _Exporting:
    """Exports `scaled`: the adapter's tensors doubled, renamed `new.<key>`, in a file of its own."""

    adapter_weight_name = "pytorch_lora_weights.safetensors"
    out_name = COPY

    def export_formats(self) -> dict[str, str]:
        return {"scaled": "every tensor doubled (a stand-in for a consumer's key format)"}

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        target = export_target(output_dir, self.out_name)
        state = {f"new.{k}": v * 2 for k, v in load_file(str(Path(output_dir) / self.adapter_weight_name)).items()}
        return [save_safetensors_atomic(state, target, metadata=export_metadata(fmt, self.adapter_weight_name))]


class _Escaping(_Exporting):
    out_name = "../escaped.safetensors"


#: each toy family's exports component (None: the required part only, never trained here; no export formats)
_CLASSES = {"toy_export": _Exporting, "toy_noexport": None, "toy_escape": _Escaping}


def _make(name: str) -> FamilySpec:
    exports = _CLASSES[name]() if _CLASSES[name] else None
    weights = exports.adapter_weight_name if exports else _Exporting.adapter_weight_name
    return tiny_spec(name, info=FamilyInfo(pipeline_class_name="ToyPipeline", adapter_weight_name=weights),
                     exports=exports)


@pytest.fixture(autouse=True)
def toy_families():
    entry = FamilyEntry(names=tuple(_CLASSES), factory=_make)
    register_family(entry)
    yield
    unregister_family(entry)


def _run(folder: Path, family: str = "toy_export", summary: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"a.lora_A.weight": torch.ones(2, 3)}, str(folder / ADAPTER_FILE), metadata={"format": "pt"})
    if summary:
        (folder / SUMMARY_FILE).write_text(json.dumps({"family": family, "status": "completed"}))
    return folder


def _cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as caught:
        main(["export", *argv])
    captured = capsys.readouterr()
    return caught.value.code, captured.out, " ".join(captured.err.split())


def test_export_writes_the_format_beside_the_adapter(tmp_path, capsys):
    run = _run(tmp_path / "run")
    code, out, err = _cli([str(run), "--format", "scaled"], capsys)
    assert code == 0, err
    assert out.split() == [str(run / COPY)]
    assert torch.equal(load_file(str(run / COPY))["new.a.lora_A.weight"], torch.full((2, 3), 2.0))
    assert written_by_export(run / COPY)
    assert export_run(run, "scaled") == [run / COPY]  # its own earlier export is replaced
    code, out, err = _cli([str(run), "--format", "scaled"], capsys)
    assert code == 0 and out.strip() == f"{run / COPY} (replaced the earlier export)"  # and the command says so


def test_an_unknown_format_names_the_valid_ones(tmp_path, capsys):
    code, _, err = _cli([str(_run(tmp_path / "run")), "--format", "comfyui"], capsys)
    assert code == 2 and "cannot export `comfyui` (--format)" in err and "`scaled`: every tensor doubled" in err
    assert "Traceback" not in err and not (tmp_path / "run" / COPY).exists()


def test_a_family_without_exports_says_so(tmp_path):
    with pytest.raises(UserError, match="`toy_noexport` family cannot export `scaled`.*offers no export formats"):
        export_run(_run(tmp_path / "run", family="toy_noexport"), "scaled")


def test_a_folder_that_is_not_a_finished_run_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _cli([str(empty), "--format", "scaled"], capsys)
    assert code == 2 and f"has no {SUMMARY_FILE}" in err and "--family" in err
    code, _, err = _cli([str(empty), "--format", "scaled", "--family", "toy_export"], capsys)
    assert code == 2 and f"is not a finished run: it has no adapter file {ADAPTER_FILE}" in err
    code, _, err = _cli([str(tmp_path / "nowhere"), "--format", "scaled"], capsys)
    assert code == 2 and "does not exist or is not a directory" in err
    (empty / SUMMARY_FILE).write_text("{not json")
    with pytest.raises(UserError, match="is not a readable run summary"):
        export_run(empty, "scaled")


def test_the_family_can_be_named_when_the_summary_is_missing(tmp_path):
    run = _run(tmp_path / "run", summary=False)
    assert export_run(run, "scaled", family="toy_export") == [run / COPY]


def test_a_users_file_of_that_name_is_never_overwritten(tmp_path, capsys):
    run = _run(tmp_path / "run")
    (run / COPY).write_bytes(b"my own notes")
    code, _, err = _cli([str(run), "--format", "scaled"], capsys)
    assert code == 2 and "was not written by `dit-lora export`" in err
    assert (run / COPY).read_bytes() == b"my own notes"
    save_file({"x": torch.ones(1)}, str(run / COPY), metadata={"format": "pt"})  # safetensors, but not ours
    with pytest.raises(UserError, match="not replaced"):
        export_run(run, "scaled")


def test_a_path_leaving_the_folder_is_refused(tmp_path):
    run = _run(tmp_path / "run", family="toy_escape")
    with pytest.raises(UserError, match="outside the run folder"):
        export_run(run, "scaled")
    assert not (tmp_path / "escaped.safetensors").exists()
    outside = tmp_path / "elsewhere.safetensors"
    save_safetensors_atomic({"x": torch.ones(1)}, outside, metadata=export_metadata("scaled", "x"))
    (run / COPY).symlink_to(outside)  # even a link to one of our own files: never written through
    with pytest.raises(UserError, match="outside the run folder"):
        export_target(run, COPY)


def test_export_metadata_marks_the_file():
    meta = export_metadata("scaled", ADAPTER_FILE, dit_lora_expert="low")
    assert meta == {"format": "pt", EXPORT_MARKER: "scaled", "dit_lora_source": ADAPTER_FILE, "dit_lora_expert": "low"}


def test_export_help(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["export", "--help"])
    out = capsys.readouterr().out
    assert caught.value.code == 0
    assert "OUTPUT_DIR" in out.upper() and "--format FORMAT" in out and "--family" in out


class _Indexed(_Exporting):
    """Its run's only adapter file has another name, listed in the adapter index (Wan's --wan_expert low)."""

    adapter_weight_name = "pytorch_lora_weights_low_noise.safetensors"


class _FullDisk(_Exporting):
    def export_adapter(self, output_dir, fmt):
        import errno

        raise OSError(errno.ENOSPC, "No space left on device")


_CLASSES.update(toy_indexed=_Indexed, toy_fulldisk=_FullDisk)


def test_a_run_whose_adapter_is_listed_in_its_index_is_a_finished_run(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    name = _Indexed.adapter_weight_name
    save_file({"a.lora_A.weight": torch.ones(2, 3)}, str(folder / name), metadata={"format": "pt"})
    (folder / "dit_lora_adapter_files.json").write_text(json.dumps({"files": [
        {"file": name, "label": "low", "load_kwargs": {"load_into_transformer_2": True}}]}))
    (folder / SUMMARY_FILE).write_text(json.dumps({"family": "toy_indexed", "status": "completed"}))
    assert [p.name for p in export_run(folder, "scaled")] == [COPY]


def test_a_full_disk_during_an_export_is_one_paragraph(tmp_path):
    from dit_lora.core.fileio import DiskFullError

    folder = _run(tmp_path / "run", family="toy_fulldisk")
    with pytest.raises(DiskFullError, match="export"):
        export_run(folder, "scaled")
    assert {p.name for p in folder.iterdir()} == {ADAPTER_FILE, SUMMARY_FILE}


def _ema_run(folder: Path, inside: bool) -> Path:
    """A finished run with --use_ema: its EMA adapter (every tensor 3) beside the adapter, or in ema/."""
    run = _run(folder)
    ema = run / "ema" / ADAPTER_FILE if inside else run / "pytorch_lora_weights_ema.safetensors"
    ema.parent.mkdir(exist_ok=True)
    save_file({"a.lora_A.weight": torch.full((2, 3), 3.0)}, str(ema), metadata={"format": "pt"})
    return run


def test_the_ema_adapter_is_exported_beside_its_own(tmp_path, capsys):
    """`pytorch_lora_weights_ema.safetensors` beside the adapter: the writer's file for it is `<export>_ema`, and
    the command names it as the EMA adapter's."""
    run = _ema_run(tmp_path / "run", inside=False)
    code, out, err = _cli([str(run), "--format", "scaled"], capsys)
    assert code == 0, err
    ema = run / "copy_scaled_ema.safetensors"
    assert out.splitlines() == [str(run / COPY), f"{ema} (the EMA adapter's)"]
    assert torch.equal(load_file(str(ema))["new.a.lora_A.weight"], torch.full((2, 3), 6.0))
    assert torch.equal(load_file(str(run / COPY))["new.a.lora_A.weight"], torch.full((2, 3), 2.0))
    assert written_by_export(ema) and not list(run.glob(".tmp-*"))  # the view is gone
    code, out, err = _cli([str(run), "--format", "scaled"], capsys)  # again: both replaced, and said so
    assert code == 0 and out.splitlines()[1] == f"{ema} (the EMA adapter's; replaced the earlier export)"


def test_an_ema_folder_gets_its_export_inside(tmp_path):
    run = _ema_run(tmp_path / "run", inside=True)
    assert export_run(run, "scaled") == [run / COPY, run / "ema" / COPY]
    assert torch.equal(load_file(str(run / "ema" / COPY))["new.a.lora_A.weight"], torch.full((2, 3), 6.0))


def test_a_users_file_in_the_ema_exports_place_is_never_overwritten(tmp_path):
    run = _ema_run(tmp_path / "run", inside=False)
    (run / "copy_scaled_ema.safetensors").write_bytes(b"mine")
    with pytest.raises(UserError, match="copy_scaled_ema.safetensors already exists and was not written by"):
        export_run(run, "scaled")
    assert (run / "copy_scaled_ema.safetensors").read_bytes() == b"mine" and not list(run.glob(".tmp-*"))


def test_a_real_familys_comfyui_export_includes_the_ema_adapter(tmp_path):
    """Z-Image's writer (diffusers' file converted to ComfyUI's names) on a run written by write_adapter and
    write_ema_adapter: the EMA adapter's ComfyUI file comes out beside the trained one's, with the EMA's weights."""
    from dit_lora.output.adapter import write_adapter
    from dit_lora.output.ema_adapter import write_ema_adapter
    from dit_lora.registry import get_spec

    spec, run = get_spec("zimage"), tmp_path / "run"
    config = {"r": 2, "lora_alpha": 2, "target_modules": ["to_q"]}
    state = {f"layers.0.attention.to_q.lora_{p}.weight": torch.ones(2, 2) for p in "AB"}
    write_adapter(spec, run, state, config, {}, [])
    write_ema_adapter(spec, run, {k: v * 3 for k, v in state.items()}, config, {}, [])
    (run / SUMMARY_FILE).write_text(json.dumps({"family": "zimage", "status": "completed"}))
    written = export_run(run, "comfyui")
    assert [p.name for p in written] == ["pytorch_lora_weights_comfyui.safetensors",
                                         "pytorch_lora_weights_comfyui_ema.safetensors"]
    key = "transformer.layers.0.attention.to_q.lora_B.weight"
    assert torch.equal(load_file(str(written[1]))[key], 3 * load_file(str(written[0]))[key])


def _loaded_in_comfyui_as_it_is() -> list[str]:
    """Every registered name without a ``comfyui`` export whose run's file ComfyUI loads as it is
    (``info.loads_as_is``: FLUX.1's, Chroma's)."""
    from dit_lora.registry import available, get_spec

    found = []
    for name in available():
        spec = get_spec(name)
        formats = spec.exports.export_formats() if spec.exports is not None else {}
        if "comfyui" in spec.info.loads_as_is and "comfyui" not in formats:
            found.append(name)
    return found


@pytest.mark.parametrize("family", _loaded_in_comfyui_as_it_is())
def test_exporting_to_a_consumer_that_loads_the_file_as_it_is_says_so_and_writes_nothing(tmp_path, capsys, family):
    """Issue 76: `export --format comfyui` for FLUX.1 and Chroma said the family had "no export format", though the
    run's file loads in ComfyUI as it is (their comfyui tests, with ComfyUI's own loader). The card says it too."""
    from dit_lora.config import TrainConfig
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_spec

    run = _run(tmp_path / "run", family=family)
    before = sorted(p.name for p in run.iterdir())
    code, out, err = _cli([str(run), "--format", "comfyui"], capsys)
    assert code == 0, err
    assert out.startswith(f"nothing to export: {run / ADAPTER_FILE} loads in ComfyUI as it is") and "loras" in out
    assert sorted(p.name for p in run.iterdir()) == before
    (tmp_path / "card").mkdir()
    cfg = TrainConfig.for_family(family, pretrained_model_name_or_path="o/m")
    card = write_model_card(get_spec(family), cfg, tmp_path / "card", {"steps": 1}, [])
    assert "loads in ComfyUI as it is" in card.read_text()
    code, _, err = _cli([str(run), "--format", "nope"], capsys)  # another format is still refused
    assert code == 2 and "cannot export `nope`" in err
