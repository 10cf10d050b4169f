"""Helpers the benchmark scripts share (not benchmarks themselves).

``gpu_step``: the timed LoRA train step, memory figures and result files of the GPU benchmarks.
``step_timer``: runs a training script unmodified and timestamps each update of its tqdm step bar.
"""
