"""benchmarks/common/lever_child.py: the lever benchmarks' shared step loop and child runner."""

from __future__ import annotations

import types

import pytest
import torch

from benchmarks.common import lever_child


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, hidden_states, encoder_hidden_states, timestep, return_dict=False):
        return (self.proj(hidden_states) + encoder_hidden_states.mean() * 0 + timestep.mean() * 0,)


def _batches(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    x, target = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    return [
        {"hidden_states": x, "encoder_hidden_states": torch.zeros(1), "timestep": torch.zeros(1), "target": target}
        for _ in range(n)
    ]


def test_train_steps_times_only_the_steps_after_the_warmup_and_trains():
    torch.manual_seed(0)
    model = _Tiny()
    calls = {"start": 0, "before": 0, "after": 0}
    args = types.SimpleNamespace(device="cpu", dtype=torch.float32, warmup=2)
    out = lever_child.train_steps(
        model,
        _batches(6),
        args,
        measured_start=lambda: calls.__setitem__("start", calls["start"] + 1),
        before_step=lambda: calls.__setitem__("before", calls["before"] + 1),
        after_step=lambda: calls.__setitem__("after", calls["after"] + 1),
    )
    assert len(out.losses) == 6 and len(out.times) == len(out.cpu_times) == 4
    assert calls == {"start": 1, "before": 6, "after": 4}
    assert out.losses[-1] < out.losses[0]  # the same batch six times: AdamW brings its loss down


def test_run_child_ends_the_benchmark_with_the_childs_output(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('the child says why')\nsys.exit(3)\n")
    args = types.SimpleNamespace(threads=1, checkpointing=False)
    with pytest.raises(SystemExit, match="child \\(probe\\) failed:\nthe child says why"):
        lever_child.run_child(script, args, ["threads"], [], "probe")


def test_run_child_returns_the_last_line_as_json(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("import json, sys\nprint('noise')\nprint(json.dumps({'argv': sys.argv[1:]}))\n")
    args = types.SimpleNamespace(threads=2, checkpointing=True)
    got = lever_child.run_child(script, args, ["threads"], ["--swap", "1"], "ok")
    assert got == {"argv": ["--child", "--swap", "1", "--threads", "2", "--checkpointing", "on"]}
